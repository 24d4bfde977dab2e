//! The bodies of Firn's fuzz targets. Each takes any bytes and feeds them to one of Firn's
//! readers of untrusted input, as the node (or the command line) calls it; the property is
//! the same for all: no input panics, hangs or exhausts memory. A reader that refuses the
//! input with an error has passed.
//!
//! The libFuzzer binaries in `fuzz/` (coverage-guided, `scripts/fuzz`) and this crate's
//! replay test (every corpus file and seeded mutations of it, in `cargo test`) call these
//! same functions, so there is one copy of each body. This crate only reads: it never
//! serves, and nothing in Firn depends on it.

mod backup_file;
mod blob_manifest;
mod http;
mod local_region;
mod mqtt_codec;
mod peer_frame;
mod resp_parse;
mod snapshot_file;
mod wasm_module;

pub use backup_file::backup_file;
pub use blob_manifest::blob_manifest;
pub use http::{http_bodies, http_params, http_txn};
pub use local_region::local_region;
pub use mqtt_codec::mqtt_codec;
pub use peer_frame::peer_frame;
pub use resp_parse::resp_parse;
pub use snapshot_file::snapshot_file;
pub use wasm_module::wasm_module;

/// A target's body: any bytes in, nothing out; it fails by panicking.
pub type Target = fn(&[u8]);

/// Every target by the name of its binary in `fuzz/` and its corpus, `fuzz/corpus/<name>/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("resp_parse", resp_parse),
    ("mqtt_codec", mqtt_codec),
    ("peer_frame", peer_frame),
    ("snapshot_file", snapshot_file),
    ("local_region", local_region),
    ("blob_manifest", blob_manifest),
    ("http_params", http_params),
    ("http_txn", http_txn),
    ("wasm_module", wasm_module),
    ("backup_file", backup_file),
    ("http_bodies", http_bodies),
];

/// Writes `data` to a new file of its own (removed when dropped): the readers of snapshots
/// and regions take a path, as the node gives them one.
fn file_of(data: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(data).expect("writing a temporary file");
    file.flush().expect("writing a temporary file");
    file
}
