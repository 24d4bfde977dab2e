//! A shard's snapshot file: opened, its dump checked, installed into tables in memory. The body
//! is `firn_fuzz_targets::snapshot_file` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::snapshot_file(data));
