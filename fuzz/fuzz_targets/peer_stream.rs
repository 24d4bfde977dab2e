//! Bytes as they arrive on a peer connection, cut into frames by its codec and each read as a
//! request and an answer. The body is `firn_fuzz_targets::peer_stream` (crates/firn-fuzz-
//! targets), which `cargo test` also replays over the corpus. No input may panic, hang or
//! exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::peer_stream(data));
