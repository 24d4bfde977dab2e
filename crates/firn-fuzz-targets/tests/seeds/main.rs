//! Writes the seeds of the corpora of the targets whose inputs are files or bodies Firn
//! writes itself — snapshots, regions, manifests — with Firn's own writers, plus request
//! bodies and modules as users send them, one module per kind of input. Run by hand when a
//! format changes:
//!
//! ```sh
//! cargo test -p firn-fuzz-targets --test seeds -- --ignored
//! ```
//!
//! Every seed is at most 4 KiB, the longest input `scripts/fuzz` lets the fuzzer make. Each
//! module also checks, in every run of the suite, that its seeds get past their readers'
//! first checks, so that the fuzzer starts deep inside.

mod backup;
mod blob;
mod http;
mod peer;
mod region;
mod store;
mod wasm;

use std::path::{Path, PathBuf};

use firn_model::CommitTs;

const SEED_BYTES_MAX: usize = 4096;

/// A stamp for the versions and shard states the seeds hold.
const TS: CommitTs = CommitTs::new(1_790_000_000_000_000, 3);

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn seed(target: &str, name: &str, bytes: &[u8]) {
    assert!(
        bytes.len() <= SEED_BYTES_MAX,
        "{target}/{name} is {} bytes",
        bytes.len()
    );
    std::fs::write(corpus(target).join(name), bytes).unwrap();
}

/// The corpus of `target` as it is in the repository: (file name, bytes), by name.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus(target))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}
