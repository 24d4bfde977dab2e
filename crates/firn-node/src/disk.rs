//! The data disk's free space. A node looks at the filesystem of its data directory every
//! [`DISK_CHECK_EVERY`]; while less is free than its reserve (`--disk-reserve-bytes`), the
//! shards it leads refuse writes that add data ([`firn_store::Op::adds_data`]) with
//! `NOSPACE` (HTTP 507), and the upload of a large value is refused before it starts.
//! Reads, deletes, truncations, trims, drops and the node's own bookkeeping go on: they are
//! small, and most are how space is freed. Writes resume at the first look that finds
//! enough free again, with no restart.
//!
//! The reserve is what keeps the disk from filling: a write that finds no space fails in
//! the storage engine, which then stops the shard's group for good — the node stops (see
//! `crate::node`) rather than serve on without it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use firn_model::FirnError;
use tokio::sync::watch;

/// How often the free space is looked at. At 1 GB/s of writes this lets 250 MB through
/// between two looks: about the default reserve.
pub const DISK_CHECK_EVERY: Duration = Duration::from_millis(250);

/// The default reserve: room for what runs while writes are refused (memtable flushes of
/// up to 16 MiB each, compactions rewriting a few tables, snapshots, the bookkeeping).
pub const DISK_RESERVE_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;

const MIB: u64 = 1024 * 1024;

/// What a node knows of its data disk's free space.
pub struct DiskSpace {
    node: u64,
    dir: PathBuf,
    /// Writes that add data are refused while fewer bytes than this are free (0: never).
    reserve: AtomicU64,
    /// Bytes free to an unprivileged writer at the last look (`u64::MAX` before any).
    free: AtomicU64,
    low: AtomicBool,
}

impl DiskSpace {
    pub fn new(node: u64, dir: &Path, reserve: u64) -> Self {
        DiskSpace {
            node,
            dir: dir.to_path_buf(),
            reserve: AtomicU64::new(reserve),
            free: AtomicU64::new(u64::MAX),
            low: AtomicBool::new(false),
        }
    }

    /// Looks at the free space now, and returns it.
    pub fn refresh(&self) -> io::Result<u64> {
        let st = rustix::fs::statvfs(&self.dir)?;
        // What a process without root's reserved blocks may use: the conservative figure.
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        self.free.store(free, Ordering::Relaxed);
        let reserve = self.reserve.load(Ordering::Relaxed);
        let low = free < reserve;
        if self.low.swap(low, Ordering::Relaxed) != low {
            if low {
                tracing::error!(
                    free_mib = free / MIB,
                    reserve_mib = reserve / MIB,
                    dir = %self.dir.display(),
                    "the data disk is nearly full: writes that add data are refused until \
                     space is freed"
                );
            } else {
                tracing::warn!(
                    free_mib = free / MIB,
                    "the data disk has space again: writes resume"
                );
            }
        }
        metrics::gauge!("firn_disk_free_bytes").set(free as f64);
        metrics::gauge!("firn_disk_low").set(if low { 1.0 } else { 0.0 });
        Ok(free)
    }

    /// Whether a write that adds data may go on: `NoSpace` while the disk is low.
    pub fn check(&self) -> Result<(), FirnError> {
        if !self.low.load(Ordering::Relaxed) {
            return Ok(());
        }
        let free = self.free.load(Ordering::Relaxed);
        Err(FirnError::NoSpace(format!(
            "node {}'s data disk has {} MiB free, under its reserve of {} MiB \
             (--disk-reserve-bytes): writes that add data are refused until space is freed \
             (reads, deletes and truncations still run)",
            self.node,
            free / MIB,
            self.reserve.load(Ordering::Relaxed) / MIB
        )))
    }

    /// Changes the reserve, and looks at the free space again under it.
    pub fn set_reserve(&self, bytes: u64) -> io::Result<u64> {
        self.reserve.store(bytes, Ordering::Relaxed);
        self.refresh()
    }

    /// Looks at the free space every [`DISK_CHECK_EVERY`] until `stop`.
    pub async fn run(self: std::sync::Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            match self.refresh() {
                Ok(_) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(dir = %self.dir.display(), "looking at the free space: {e}");
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(DISK_CHECK_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_refused_only_while_less_than_the_reserve_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let roomy = DiskSpace::new(1, dir.path(), 0);
        assert!(roomy.check().is_ok(), "before any look");
        let free = roomy.refresh().unwrap();
        assert!(free > 0);
        assert!(roomy.check().is_ok());

        let tight = DiskSpace::new(1, dir.path(), u64::MAX);
        assert!(
            tight.check().is_ok(),
            "nothing is refused before the first look"
        );
        tight.refresh().unwrap();
        let err = tight.check().unwrap_err();
        assert!(matches!(err, FirnError::NoSpace(_)), "{err:?}");
        assert_eq!(err.resp_code(), "NOSPACE");
        assert_eq!(err.http_status(), 507);
        assert!(err.to_string().contains("reserve"), "{err}");

        // A smaller reserve lets writes through again at once.
        tight.set_reserve(1).unwrap();
        assert!(tight.check().is_ok());
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let gone = DiskSpace::new(1, &dir.path().join("nope"), u64::MAX);
        assert!(gone.refresh().is_err());
        assert!(gone.check().is_ok());
    }
}
