//! RESP input as a connection reads it: commands split off the buffer, each parsed by the
//! command registry into the typed action the router would run. The body
//! is `firn_fuzz_targets::resp_parse` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::resp_parse(data));
