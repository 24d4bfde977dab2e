//! MQTT packets as a connection decodes them with `rmqtt-codec`; the first byte picks how
//! the rest is read. The body
//! is `firn_fuzz_targets::mqtt_codec` (crates/firn-fuzz-targets), which `cargo test` also
//! replays over the corpus. No input may panic, hang or exhaust memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| firn_fuzz_targets::mqtt_codec(data));
