//! A large value's file on a node's disk, read as the sweeper, a restart's repair, a peer's
//! chunk read and a fetch taking it up read it. The body is `firn_fuzz_targets::blob_file`
//! (crates/firn-fuzz-targets), which `cargo test` also replays over the corpus. No input may
//! panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::blob_file(data));
