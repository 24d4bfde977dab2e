//! A request's path segment and headers, read as the routes and the session read them. The body
//! is `firn_fuzz_targets::http_headers` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::http_headers(data));
