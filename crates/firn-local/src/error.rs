//! The region's one error type: what went wrong opening or creating a region file.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    BadConfig(String),
    #[error("{path} is not a Firn local-read region (wrong magic)")]
    NotARegion { path: PathBuf },
    #[error("{path} has region layout {found}; this build reads layout {expected}")]
    LayoutVersion {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("{path} is {actual} bytes; its header says {expected}")]
    Size {
        path: PathBuf,
        actual: u64,
        expected: u64,
    },
    #[error(
        "{path}: cannot give it to group {gid}: {source} (the node's user must be root or a \
         member of the group)"
    )]
    Group {
        path: PathBuf,
        gid: u32,
        source: std::io::Error,
    },
    #[error("{path} is already written by another process (a node given the same region path?)")]
    InUse { path: PathBuf },
    #[error("{path} was replaced by its node (retired): open it again")]
    Retired { path: PathBuf },
    #[error("{path} belongs to cluster {found}, not {expected}")]
    OtherCluster {
        path: PathBuf,
        found: String,
        expected: String,
    },
}
