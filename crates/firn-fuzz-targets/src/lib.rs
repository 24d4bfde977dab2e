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
mod blob_file;
mod blob_manifest;
/// Its module's program layout is public for the seeds.
pub mod host_calls;
mod http;
mod local_region;
mod mqtt_codec;
mod peer_frame;
mod peer_stream;
mod resp_parse;
mod snapshot_file;
mod wasm_module;

pub use backup_file::backup_file;
pub use blob_file::{KEY as BLOB_FILE_KEY, blob_file};
pub use blob_manifest::blob_manifest;
pub use host_calls::host_calls;
pub use http::{http_bodies, http_headers, http_params, http_txn};
pub use local_region::local_region;
pub use mqtt_codec::mqtt_codec;
pub use peer_frame::peer_frame;
pub use peer_stream::peer_stream;
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
    ("peer_stream", peer_stream),
    ("blob_file", blob_file),
    ("http_headers", http_headers),
    ("host_calls", host_calls),
];

/// Where the targets write their files: `TMPDIR` when set, else a RAM disk when the
/// machine has one (`/dev/shm`), else the system's temporary folder. On a RAM disk the
/// writes and fsyncs the readers make cost little, so a fuzzer runs several times more
/// inputs a second; what is read is the same.
fn scratch() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if std::env::var_os("TMPDIR").is_none() && shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Writes `data` to a new file of its own (removed when dropped): the readers of snapshots
/// and regions take a path, as the node gives them one.
fn file_of(data: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new_in(scratch()).expect("a temporary file");
    file.write_all(data).expect("writing a temporary file");
    file.flush().expect("writing a temporary file");
    file
}

/// A new folder of its own (removed when dropped), in the place [`file_of`] writes to.
fn folder() -> tempfile::TempDir {
    tempfile::tempdir_in(scratch()).expect("a temporary folder")
}
