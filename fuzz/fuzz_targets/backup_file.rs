//! A backup file: checked whole as `firn restore` checks it, and each line parsed. The body is
//! `firn_fuzz_targets::backup_file` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::backup_file(data));
