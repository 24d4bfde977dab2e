//! A query string, through every parameter reader the HTTP routes call. The body
//! is `firn_fuzz_targets::http_params` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::http_params(data));
