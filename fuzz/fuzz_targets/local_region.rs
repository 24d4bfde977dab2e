//! A node's shared-memory region file, as a process on the host opens and reads it. The body
//! is `firn_fuzz_targets::local_region` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::local_region(data));
