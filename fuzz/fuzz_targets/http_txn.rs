//! A `POST /v1/txn` body, decoded and checked into the transaction it asks for. The body
//! is `firn_fuzz_targets::http_txn` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::http_txn(data));
