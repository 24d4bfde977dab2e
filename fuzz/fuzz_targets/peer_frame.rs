//! A frame's body from a peer, decoded as a request, a response and an envelope. The body
//! is `firn_fuzz_targets::peer_frame` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::peer_frame(data));
