//! A large value's manifest, as a stored version holds it and as a peer's seal carries it. The body
//! is `firn_fuzz_targets::blob_manifest` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::blob_manifest(data));
