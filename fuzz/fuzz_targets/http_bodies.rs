//! The JSON body of any route that takes one (its first byte picks the route), decoded and
//! checked into the request it asks for. The body is `firn_fuzz_targets::http_bodies`
//! (crates/firn-fuzz-targets), which `cargo test` also replays over the corpus. No input
//! may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::http_bodies(data));
