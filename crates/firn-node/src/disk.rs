//! The data disk's free space. A node looks at the filesystem of its data directory every
//! [`DISK_CHECK_EVERY`]; while less is free than its reserve (`--disk-reserve-bytes`), the
//! shards it leads refuse writes that add data ([`firn_store::Op::adds_data`]) with
//! `NOSPACE` (HTTP 507), and the upload of a large value is refused before it starts.
//! Reads, deletes, truncations, trims, drops and the node's own bookkeeping go on: they are
//! small, and most are how space is freed. Writes resume at the first look that finds
//! enough free again, with no restart.
//!
//! A follower's disk fills as fast as its leader's: each node tells the others when its disk
//! goes low (and again every [`NOTICE_EVERY`] while it stays low, and when it has room
//! again), and a leader refuses those writes too while any replica of the shard is low. A
//! notice not renewed lapses after [`PEER_LOW_FOR`] (a node that went low and then down).
//!
//! The reserve is what keeps the disk from filling: a write that finds no space fails in
//! the storage engine, which then stops the shard's group for good — the node stops (see
//! `crate::node`) rather than serve on without it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_model::FirnError;
use firn_raft::NodeId;
use firn_raft::snapshot_transfer::SnapshotRoom;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::cluster::layout::ClusterLayout;
use crate::rpc::PeerClient;

/// How often the free space is looked at. At 1 GB/s of writes this lets 250 MB through
/// between two looks: about the default reserve.
pub const DISK_CHECK_EVERY: Duration = Duration::from_millis(250);

/// The default reserve: room for what runs while writes are refused (memtable flushes of
/// up to 16 MiB each, compactions rewriting a few tables, snapshots, the bookkeeping).
pub const DISK_RESERVE_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;

/// How often a node whose disk is low says so again to its peers.
pub const NOTICE_EVERY: Duration = Duration::from_secs(2);

/// How long a peer's word that its disk is low holds without being renewed.
pub const PEER_LOW_FOR: Duration = Duration::from_secs(10);

const MIB: u64 = 1024 * 1024;

/// A node's word to its peers about its data disk (a peer call; answered with nothing).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiskNotice {
    pub node: NodeId,
    pub low: bool,
    pub free: u64,
    pub reserve: u64,
}

crate::rpc::rpc! {
    DiskNotice => ();
}

/// A peer that said its disk is low, until when that holds.
struct PeerLow {
    free: u64,
    reserve: u64,
    until: Instant,
}

/// What a node knows of its data disk's free space.
pub struct DiskSpace {
    node: NodeId,
    dir: PathBuf,
    /// Writes that add data are refused while fewer bytes than this are free (0: never).
    reserve: AtomicU64,
    /// Bytes free to an unprivileged writer at the last look (`u64::MAX` before any).
    free: AtomicU64,
    low: AtomicBool,
    /// Peers whose disks are low, by their notices.
    peers_low: Mutex<BTreeMap<NodeId, PeerLow>>,
    /// Whether `peers_low` may hold anyone: the check's fast path.
    any_peer_low: AtomicBool,
}

impl DiskSpace {
    pub fn new(node: NodeId, dir: &Path, reserve: u64) -> Self {
        DiskSpace {
            node,
            dir: dir.to_path_buf(),
            reserve: AtomicU64::new(reserve),
            free: AtomicU64::new(u64::MAX),
            low: AtomicBool::new(false),
            peers_low: Mutex::default(),
            any_peer_low: AtomicBool::new(false),
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

    /// Whether a write that adds data may go on: `NoSpace` while this node's disk is low.
    pub fn check(&self) -> Result<(), FirnError> {
        if !self.low.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(refusal(
            self.node,
            self.free.load(Ordering::Relaxed),
            self.reserve.load(Ordering::Relaxed),
        ))
    }

    /// Whether a write that adds data to a shard with these replicas (and one being added)
    /// may go on: `NoSpace` while this node's disk is low, or a replica's by its latest
    /// notice.
    pub fn check_replicas(
        &self,
        replicas: &[NodeId],
        adding: Option<NodeId>,
    ) -> Result<(), FirnError> {
        self.check()?;
        if !self.any_peer_low.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut peers = self.peers_low.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        peers.retain(|_, p| p.until > now);
        self.any_peer_low
            .store(!peers.is_empty(), Ordering::Relaxed);
        let holders = replicas.iter().copied().chain(adding);
        match holders.filter_map(|r| peers.get(&r).map(|p| (r, p))).next() {
            Some((node, p)) => Err(refusal(node, p.free, p.reserve)),
            None => Ok(()),
        }
    }

    /// Whether some peer said its disk is low (and the word may still hold).
    pub fn any_peer_low(&self) -> bool {
        self.any_peer_low.load(Ordering::Relaxed)
    }

    /// Takes a peer's notice.
    pub fn note_peer(&self, notice: DiskNotice) {
        let mut peers = self.peers_low.lock().unwrap_or_else(|p| p.into_inner());
        if notice.low {
            let low = PeerLow {
                free: notice.free,
                reserve: notice.reserve,
                until: Instant::now() + PEER_LOW_FOR,
            };
            if peers.insert(notice.node, low).is_none() {
                tracing::warn!(
                    node = notice.node,
                    free_mib = notice.free / MIB,
                    "a peer's data disk is nearly full: the shards it holds refuse writes \
                     that add data"
                );
            }
        } else if peers.remove(&notice.node).is_some() {
            tracing::info!(node = notice.node, "a peer's data disk has space again");
        }
        self.any_peer_low
            .store(!peers.is_empty(), Ordering::Relaxed);
    }

    /// The disk as the last look found it, for the cluster view.
    pub fn view(&self) -> crate::cluster::view::DiskView {
        crate::cluster::view::DiskView {
            free_bytes: self.free.load(Ordering::Relaxed),
            reserve_bytes: self.reserve.load(Ordering::Relaxed),
            low: self.low.load(Ordering::Relaxed),
        }
    }

    /// What this node tells its peers now.
    fn notice(&self) -> DiskNotice {
        DiskNotice {
            node: self.node,
            low: self.low.load(Ordering::Relaxed),
            free: self.free.load(Ordering::Relaxed),
            reserve: self.reserve.load(Ordering::Relaxed),
        }
    }

    /// Changes the reserve, and looks at the free space again under it.
    pub fn set_reserve(&self, bytes: u64) -> io::Result<u64> {
        self.reserve.store(bytes, Ordering::Relaxed);
        self.refresh()
    }

    /// Looks at the free space every [`DISK_CHECK_EVERY`] until `stop`, and hands `tell`
    /// the notice for the peers: once at the start, when the disk goes low or has room
    /// again, and every [`NOTICE_EVERY`] while it is low. `tell` answers how many peers it
    /// reached (0: none known yet, and the first notice is tried again).
    pub async fn run(
        self: Arc<Self>,
        tell: impl Fn(DiskNotice) -> usize + Send + 'static,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut failing = false;
        let mut told: Option<(bool, Instant)> = None;
        loop {
            match self.refresh() {
                Ok(_) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(dir = %self.dir.display(), "looking at the free space: {e}");
                }
                Err(_) => {}
            }
            let notice = self.notice();
            let due = told.is_none_or(|(low, at)| {
                low != notice.low || (notice.low && at.elapsed() >= NOTICE_EVERY)
            });
            if due && (tell(notice.clone()) > 0 || told.is_some()) {
                told = Some((notice.low, Instant::now()));
            }
            tokio::select! {
                _ = tokio::time::sleep(DISK_CHECK_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// A snapshot takes its size twice while it installs (the received file, and the state
/// written from it before the old state's tables go); both must fit above the reserve,
/// which is room for everything else that goes on meanwhile.
impl SnapshotRoom for DiskSpace {
    fn room_for_snapshot(&self, bytes: u64) -> Result<(), String> {
        let reserve = self.reserve.load(Ordering::Relaxed);
        if reserve == 0 {
            return Ok(());
        }
        // A fresh look: the last may be 250 ms old, and a transfer can be gigabytes.
        let free = self
            .refresh()
            .unwrap_or_else(|_| self.free.load(Ordering::Relaxed));
        let needed = bytes.saturating_mul(SNAPSHOT_SPACE_FACTOR);
        if free.saturating_sub(needed) >= reserve {
            return Ok(());
        }
        Err(format!(
            "node {}'s data disk has {:.1} MiB free; a snapshot of {:.1} MiB needs {:.1} MiB \
             while it installs, above the {:.1} MiB reserve (--disk-reserve-bytes); it is \
             taken once space is freed",
            self.node,
            mib(free),
            mib(bytes),
            mib(needed),
            mib(reserve)
        ))
    }
}

/// Space a snapshot takes while it installs, in multiples of its file's size.
const SNAPSHOT_SPACE_FACTOR: u64 = 2;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// What [`DiskSpace::run`] tells the peers by: a call to each node of the current layout
/// but this one, not waited for. Answers how many it called.
pub fn tell_peers(
    peers: PeerClient,
    me: NodeId,
    layout: watch::Receiver<Arc<ClusterLayout>>,
) -> impl Fn(DiskNotice) -> usize + Send + 'static {
    move |notice| {
        let nodes: Vec<NodeId> = layout
            .borrow()
            .nodes
            .keys()
            .copied()
            .filter(|n| *n != me)
            .collect();
        for &node in &nodes {
            let (peers, notice) = (peers.clone(), notice.clone());
            tokio::spawn(async move {
                if let Err(e) = peers.call(node, notice).await {
                    tracing::debug!(node, "telling a peer about this node's disk: {e}");
                }
            });
        }
        nodes.len()
    }
}

fn refusal(node: NodeId, free: u64, reserve: u64) -> FirnError {
    FirnError::NoSpace(format!(
        "node {node}'s data disk has {} MiB free, under its reserve of {} MiB \
         (--disk-reserve-bytes): writes that add data are refused until space is freed \
         (reads, deletes and truncations still run)",
        free / MIB,
        reserve / MIB
    ))
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
    fn a_snapshot_is_taken_only_if_twice_its_size_fits_above_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskSpace::new(1, dir.path(), 0);
        // The reserve off: any snapshot is taken.
        assert!(disk.room_for_snapshot(u64::MAX / 4).is_ok());
        let free = disk.refresh().unwrap();
        assert!(
            free > 400 * MIB,
            "the test needs 400 MiB free; {free} bytes are"
        );
        // 100 MiB above the reserve (other writers may move it by a few).
        disk.set_reserve(free - 100 * MIB).unwrap();
        assert!(disk.room_for_snapshot(30 * MIB).is_ok(), "60 MiB of 100");
        let why = disk.room_for_snapshot(60 * MIB).unwrap_err();
        assert!(
            why.contains("a snapshot of 60.0 MiB needs 120.0 MiB") && why.contains("reserve"),
            "{why}"
        );
        // Refusing a snapshot is not a low disk: writes go on.
        assert!(disk.check().is_ok());
    }

    #[test]
    fn a_shard_is_refused_while_a_replica_says_its_disk_is_low() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskSpace::new(1, dir.path(), 0);
        disk.refresh().unwrap();
        let notice = |low| DiskNotice {
            node: 3,
            low,
            free: 5 * MIB,
            reserve: 256 * MIB,
        };
        disk.note_peer(notice(true));
        let err = disk.check_replicas(&[1, 2], Some(3)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("node 3's data disk has 5 MiB free"),
            "{err}"
        );
        assert!(
            disk.check_replicas(&[1, 2], None).is_ok(),
            "a shard node 3 does not hold"
        );
        assert!(disk.check().is_ok(), "this node's own disk has room");
        disk.note_peer(notice(false));
        assert!(disk.check_replicas(&[1, 2, 3], None).is_ok());

        // A notice that is not renewed lapses.
        disk.note_peer(notice(true));
        disk.peers_low.lock().unwrap().get_mut(&3).unwrap().until = Instant::now();
        assert!(disk.check_replicas(&[3], None).is_ok());
        assert!(!disk.any_peer_low.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn peers_are_told_at_the_start_when_the_disk_turns_and_again_while_it_is_low() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskSpace::new(1, dir.path(), 0));
        let told = Arc::new(Mutex::new(Vec::new()));
        let reached = Arc::new(AtomicU64::new(0));
        let (stop_tx, stop) = watch::channel(false);
        let (t, r) = (told.clone(), reached.clone());
        let run = tokio::spawn(disk.clone().run(
            move |n| {
                t.lock().unwrap().push(n.low);
                r.load(Ordering::Relaxed) as usize
            },
            stop,
        ));
        let wait = |n: usize| {
            let told = told.clone();
            async move {
                for _ in 0..200 {
                    if told.lock().unwrap().len() >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("told {:?}, waited for {n}", told.lock().unwrap());
            }
        };
        // Nobody to tell yet: the first notice is tried at each look until someone hears it.
        wait(2).await;
        reached.store(2, Ordering::Relaxed);
        wait(3).await;
        tokio::time::sleep(DISK_CHECK_EVERY * 3).await;
        assert!(told.lock().unwrap().iter().all(|low| !low));
        let quiet = told.lock().unwrap().len();
        // Not low: nothing more is said. Low: at once, then again every NOTICE_EVERY.
        disk.reserve.store(u64::MAX, Ordering::Relaxed);
        wait(quiet + 1).await;
        assert!(told.lock().unwrap()[quiet], "the disk went low");
        tokio::time::sleep(NOTICE_EVERY + DISK_CHECK_EVERY * 2).await;
        assert!(told.lock().unwrap().len() >= quiet + 2);
        disk.reserve.store(0, Ordering::Relaxed);
        tokio::time::sleep(DISK_CHECK_EVERY * 3).await;
        assert_eq!(
            told.lock().unwrap().last(),
            Some(&false),
            "room again is said too"
        );
        stop_tx.send(true).unwrap();
        run.await.unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let gone = DiskSpace::new(1, &dir.path().join("nope"), u64::MAX);
        assert!(gone.refresh().is_err());
        assert!(gone.check().is_ok());
    }
}
