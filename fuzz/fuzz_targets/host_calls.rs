//! A function's host calls with arguments a module chose: pointers and lengths into the
//! guest's memory, past it and negative. The body is `firn_fuzz_targets::host_calls`
//! (crates/firn-fuzz-targets), which `cargo test` also replays over the corpus. No input may
//! panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::host_calls(data));
