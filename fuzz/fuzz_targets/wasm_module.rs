//! A function's module, checked as the node checks it before storing it. The body
//! is `firn_fuzz_targets::wasm_module` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::wasm_module(data));
