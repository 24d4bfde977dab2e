//! How a snapshot file travels to a peer: in chunks of [`chunk_bytes`] (4 MiB), each its
//! own peer request ([`SnapshotChunk`]), in order; the receiver appends them to a file of
//! its own ([`IncomingSnapshots`]) and hands Raft the file when it is whole and checked.
//! Each end holds a chunk or two in memory, whatever the snapshot's size, and no frame is
//! larger than a chunk. The sending loop is [`crate::network`]'s; the file's format is
//! [`crate::snapshot`]'s.
//!
//! A receiver keeps at most one transfer per group. A chunk at offset 0 starts a transfer
//! and discards one in progress (a new leader, or a new snapshot); any other chunk must
//! continue the transfer in progress (the same vote, snapshot and size) at the offset
//! received so far, else it is refused with an error the sender sees, the partial file is
//! discarded, and the sender starts again from 0. A chunk the receiver already stored (its
//! answer was lost) is answered with the offset to go on from. A transfer that receives
//! nothing for [`SNAPSHOT_ABANDONED_AFTER`] is discarded when the next chunk of any group
//! arrives.
//!
//! A transfer cut off part-way (the connection dropped, a chunk timed out) goes on where it
//! stopped: the sender remembers, for each follower, how far the receiver acknowledged
//! ([`SentSoFar`]), and when openraft sends the same snapshot again it starts there. A
//! receiver that no longer has the transfer refuses that chunk, and the sender starts again
//! from 0 at once.
//!
//! A transfer starts only if the receiver's disk has room for it ([`SnapshotRoom`]): else
//! the first chunk is answered [`SnapshotChunkAnswer::NoRoom`], nothing is written, and the
//! sender offers the snapshot again after [`SNAPSHOT_NO_ROOM_RETRY`].

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use metrics::{Counter, Histogram};
use openraft::Raft;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::raft::SnapshotResponse;
use serde::{Deserialize, Serialize};

use crate::snapshot::{Snapshot, SnapshotData, SnapshotFile};
use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, NodeId, ShardId, SnapshotMeta, Vote};

/// How long a sender waits before offering a snapshot again to a receiver that had no room
/// for it: long enough that a replica short of disk costs its leader little (one chunk read
/// and sent each time), short enough that it catches up soon after space is freed.
pub const SNAPSHOT_NO_ROOM_RETRY: Duration = Duration::from_secs(5);

/// Bytes of a snapshot per chunk. Large enough that a chunk's round trip is small beside
/// its transfer (4 MiB take ~35 ms at 1 Gbit/s), small enough that a chunk never holds up
/// the heartbeats sharing its connection for long, and that both ends' memory stays at a
/// few MiB.
pub const SNAPSHOT_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Largest chunk a receiver accepts (and [`set_chunk_bytes`] allows).
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How long one chunk may take to be sent and stored: far above a chunk's transfer time, so
/// running past it means the peer or the link is gone.
pub const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(10);
/// The last chunk's answer waits for the receiver to check and install the whole snapshot:
/// it is allowed [`SNAPSHOT_CHUNK_TIMEOUT`] plus the snapshot's size at this rate (the
/// install measured far faster; see docs/benchmarks.md, "Snapshot transfer").
pub const SNAPSHOT_INSTALL_BYTES_PER_SEC_MIN: u64 = 8 * 1024 * 1024;
/// A partial transfer idle this long is abandoned (well above [`SNAPSHOT_CHUNK_TIMEOUT`]:
/// a live sender sends its next chunk, or gives up, sooner).
pub const SNAPSHOT_ABANDONED_AFTER: Duration = Duration::from_secs(60);

static CHUNK_BYTES: AtomicUsize = AtomicUsize::new(SNAPSHOT_CHUNK_BYTES);

/// The chunk size of transfers this process starts.
pub fn chunk_bytes() -> usize {
    CHUNK_BYTES.load(Ordering::Relaxed)
}

/// Sets the chunk size of every transfer this process starts from now on (tests: a small
/// snapshot in many chunks), within 1 byte..=[`SNAPSHOT_CHUNK_BYTES_MAX`].
pub fn set_chunk_bytes(bytes: usize) {
    CHUNK_BYTES.store(bytes.clamp(1, SNAPSHOT_CHUNK_BYTES_MAX), Ordering::Relaxed);
}

/// How long the answer to a transfer's last chunk of a `total_bytes` snapshot may take.
pub fn last_chunk_timeout(total_bytes: u64) -> Duration {
    SNAPSHOT_CHUNK_TIMEOUT + Duration::from_secs(total_bytes / SNAPSHOT_INSTALL_BYTES_PER_SEC_MIN)
}

/// One piece of a snapshot file, sent to a replica of its group.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotChunk {
    pub shard: ShardId,
    /// The sending leader's vote: checked on every chunk, and by Raft on the install.
    pub vote: Vote,
    /// The snapshot's meta, which names it: a chunk of another snapshot supersedes.
    pub meta: SnapshotMeta,
    /// The whole file's length.
    pub total_bytes: u64,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

impl SnapshotChunk {
    pub fn is_last(&self) -> bool {
        self.offset + self.bytes.len() as u64 == self.total_bytes
    }
}

/// A receiver's answer to a chunk.
#[derive(Debug, Serialize, Deserialize)]
pub enum SnapshotChunkAnswer {
    /// Stored: the next chunk starts at `next_offset`.
    Continue { next_offset: u64 },
    /// The transfer is over: the last chunk's snapshot was handed to Raft, or the
    /// receiver's vote is newer than the sender's (the answer carries it: the sender is
    /// no longer leader).
    Done(SnapshotResponse<FirnRaft>),
    /// The receiver's disk has no room for the snapshot: nothing was written, and the
    /// sender should offer it again later. Says why, with the receiver's figures.
    NoRoom(String),
}

/// Whether this node's disk can take a snapshot it is sent (the node's disk watch answers;
/// a receiver without one takes every snapshot).
pub trait SnapshotRoom: Send + Sync + 'static {
    /// `Err(why)` when a snapshot file of `bytes` must not be received now.
    fn room_for_snapshot(&self, bytes: u64) -> Result<(), String>;
}

struct TransferMetrics {
    bytes: Counter,
    seconds: Histogram,
}

const SECONDS: &str = "firn_snapshot_transfer_seconds";

static DESCRIBED: LazyLock<()> = LazyLock::new(|| {
    metrics::describe_counter!(
        "firn_snapshot_sent_bytes_total",
        metrics::Unit::Bytes,
        "snapshot bytes this node sent to peers (acknowledged chunks), by shard"
    );
    metrics::describe_counter!(
        "firn_snapshot_received_bytes_total",
        metrics::Unit::Bytes,
        "snapshot bytes this node received from leaders (stored chunks), by shard"
    );
    metrics::describe_counter!(
        "firn_snapshots_refused_total",
        "snapshots this node's disk had no room for (transfers refused at their start), by shard"
    );
    metrics::describe_histogram!(
        SECONDS,
        metrics::Unit::Seconds,
        "time of each whole snapshot transfer, from the first chunk until the receiver \
         installed it, by shard and direction (sent, received)"
    );
});

/// What a transfer sends: one leader's (its vote) snapshot, of its size.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sending {
    pub(crate) vote: Vote,
    pub(crate) meta: SnapshotMeta,
    pub(crate) total_bytes: u64,
}

/// On a group's leader, how far each follower acknowledged the last transfer to it that was
/// cut off part-way, so that sending the same snapshot again goes on from there. One mark
/// a follower, dropped when a transfer ends (installed, superseded, refused) or another
/// snapshot is sent.
#[derive(Clone, Default)]
pub(crate) struct SentSoFar(Arc<Mutex<HashMap<NodeId, (Sending, u64)>>>);

impl SentSoFar {
    /// The offset a transfer of `sending` to `to` starts at: where the last one stopped, if
    /// it sent the same; else 0.
    pub(crate) fn resume_at(&self, to: NodeId, sending: &Sending) -> u64 {
        let marks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match marks.get(&to) {
            Some((sent, acknowledged)) if sent == sending => *acknowledged,
            _ => 0,
        }
    }

    /// `to` has stored `sending` up to `acknowledged`.
    pub(crate) fn acknowledged(&self, to: NodeId, sending: &Sending, acknowledged: u64) {
        let mut marks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        marks.insert(to, (sending.clone(), acknowledged));
    }

    /// The next transfer to `to` starts from 0.
    pub(crate) fn forget(&self, to: NodeId) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&to);
    }
}

/// One transfer's progress: logged when it starts and ends, counted on `/metrics`.
pub(crate) struct Transfer {
    direction: &'static str,
    shard: ShardId,
    /// Who the transfer is with, for the log.
    peer: String,
    total_bytes: u64,
    /// Bytes already at the receiver when this transfer started.
    from: u64,
    done_bytes: u64,
    started: Instant,
    metrics: TransferMetrics,
    finished: bool,
}

impl Transfer {
    /// A transfer of `total_bytes`, of which the first `from` are already at the receiver
    /// (a transfer cut off part-way going on).
    pub(crate) fn start(
        sent: bool,
        shard: ShardId,
        peer: String,
        total_bytes: u64,
        from: u64,
    ) -> Self {
        LazyLock::force(&DESCRIBED);
        let (direction, counter) = match sent {
            true => ("sent", "firn_snapshot_sent_bytes_total"),
            false => ("received", "firn_snapshot_received_bytes_total"),
        };
        let label = shard.to_string();
        match from {
            0 => {
                tracing::info!(shard, %peer, total_bytes, chunk_bytes = chunk_bytes(), "snapshot transfer ({direction}) starts")
            }
            from => {
                tracing::info!(shard, %peer, total_bytes, from, chunk_bytes = chunk_bytes(), "snapshot transfer ({direction}) goes on where it was cut off")
            }
        }
        Transfer {
            direction,
            shard,
            peer,
            total_bytes,
            from,
            done_bytes: from,
            started: Instant::now(),
            metrics: TransferMetrics {
                bytes: metrics::counter!(counter, "shard" => label.clone()),
                seconds: metrics::histogram!(SECONDS, "shard" => label, "direction" => direction),
            },
            finished: false,
        }
    }

    pub(crate) fn add(&mut self, bytes: u64) {
        self.done_bytes += bytes;
        self.metrics.bytes.increment(bytes);
    }

    /// Ends the transfer: logs its size and rate, and records its time when it sent the
    /// whole snapshot.
    pub(crate) fn finish(mut self, outcome: &str) {
        self.finished = true;
        let seconds = self.started.elapsed().as_secs_f64();
        if self.from == 0 && self.done_bytes == self.total_bytes {
            self.metrics.seconds.record(seconds);
        }
        let mib_per_s =
            (self.done_bytes - self.from) as f64 / (1024.0 * 1024.0) / seconds.max(1e-9);
        tracing::info!(
            shard = self.shard,
            peer = %self.peer,
            bytes = self.done_bytes,
            total_bytes = self.total_bytes,
            seconds,
            mib_per_s,
            "snapshot transfer ({}) ends: {outcome}",
            self.direction
        );
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        if !self.finished {
            tracing::warn!(
                shard = self.shard,
                peer = %self.peer,
                bytes = self.done_bytes,
                total_bytes = self.total_bytes,
                "snapshot transfer ({}) failed or was cancelled",
                self.direction
            );
        }
    }
}

/// A partial transfer.
struct Incoming {
    vote: Vote,
    meta: SnapshotMeta,
    total_bytes: u64,
    received: IncomingFile,
    last_chunk_at: Instant,
    transfer: Transfer,
}

/// A received file, removed when dropped unless installing it moved it away first.
struct IncomingFile {
    path: PathBuf,
    file: File,
}

impl Drop for IncomingFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The transfers this node is receiving, at most one per group.
#[derive(Default)]
pub struct IncomingSnapshots {
    transfers: Mutex<HashMap<ShardId, Incoming>>,
    /// Names each transfer's file apart from an older one of the same group still being
    /// written.
    next_id: AtomicU64,
    /// Asked before a transfer starts; none: every snapshot is taken.
    room: Option<Arc<dyn SnapshotRoom>>,
}

impl IncomingSnapshots {
    /// Transfers that start only when `room` says the disk can take them.
    pub fn with_room(room: Arc<dyn SnapshotRoom>) -> Self {
        IncomingSnapshots {
            room: Some(room),
            ..Default::default()
        }
    }

    /// How many transfers this node has begun receiving (each a new file from offset 0).
    pub fn begun(&self) -> u64 {
        self.next_id.load(Ordering::Relaxed)
    }

    fn take(&self, shard: ShardId) -> Option<Incoming> {
        let mut transfers = self.transfers.lock().unwrap_or_else(|p| p.into_inner());
        // Abandoned transfers of any group go too (their files are removed on drop).
        transfers.retain(|_, t| t.last_chunk_at.elapsed() < SNAPSHOT_ABANDONED_AFTER);
        transfers.remove(&shard)
    }

    /// Discards `shard`'s transfer in progress, if any (its replica left this node).
    pub fn discard(&self, shard: ShardId) {
        drop(self.take(shard));
    }

    /// Stores one chunk for `raft`'s group; the last one is checked and installed.
    pub async fn receive(
        &self,
        raft: &Raft<FirnRaft, ShardStateMachine>,
        chunk: SnapshotChunk,
    ) -> Result<SnapshotChunkAnswer, String> {
        let shard = chunk.shard;
        let current = raft.metrics().borrow_watched().vote;
        // Raft's own rule for a leader's message: its vote is at least the receiver's.
        let accepted = matches!(
            chunk.vote.partial_cmp(&current),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        );
        if !accepted {
            // A newer leader exists: whatever this one was sending is superseded.
            self.discard(shard);
            return Ok(SnapshotChunkAnswer::Done(SnapshotResponse::new(current)));
        }
        let end = chunk.offset.checked_add(chunk.bytes.len() as u64);
        if chunk.bytes.len() > SNAPSHOT_CHUNK_BYTES_MAX || end.is_none_or(|e| e > chunk.total_bytes)
        {
            self.discard(shard);
            return Err(format!(
                "shard {shard}: a snapshot chunk of {} bytes at offset {} of {}; chunks are at \
                 most {SNAPSHOT_CHUNK_BYTES_MAX} bytes and within the snapshot",
                chunk.bytes.len(),
                chunk.offset,
                chunk.total_bytes
            ));
        }
        if chunk.offset == 0
            && let Some(why) = self.no_room(&chunk)
        {
            return Ok(SnapshotChunkAnswer::NoRoom(why));
        }
        let mut incoming = match chunk.offset {
            0 => self.begin(raft, &chunk).await?,
            offset => {
                let incoming = self.take(shard).ok_or_else(|| {
                    format!(
                        "shard {shard}: a snapshot chunk at offset {offset}, but no transfer is \
                         in progress; a transfer starts at offset 0"
                    )
                })?;
                let received = incoming.transfer.done_bytes;
                if incoming.vote != chunk.vote
                    || incoming.meta != chunk.meta
                    || incoming.total_bytes != chunk.total_bytes
                {
                    return Err(format!(
                        "shard {shard}: a chunk of another snapshot ({}) than the one in \
                         progress ({}); both are discarded, start again at offset 0",
                        chunk.meta, incoming.meta
                    ));
                }
                if offset < received {
                    // A chunk already stored: the answer to it was lost, and a sender going
                    // on from where it last heard sent it again. It is told where to go on.
                    let mut transfers = self.transfers.lock().unwrap_or_else(|p| p.into_inner());
                    transfers.entry(shard).or_insert(incoming);
                    return Ok(SnapshotChunkAnswer::Continue {
                        next_offset: received,
                    });
                }
                if received != offset {
                    return Err(format!(
                        "shard {shard}: a snapshot chunk at offset {offset}, but {received} \
                         bytes were received; the transfer is discarded, start again at \
                         offset 0"
                    ));
                }
                incoming
            }
        };
        let last = chunk.is_last();
        let len = chunk.bytes.len() as u64;
        let bytes = chunk.bytes;
        // The chunk goes to disk off the async worker; fsync'd once, with the last.
        let written = tokio::task::spawn_blocking(move || -> io::Result<Incoming> {
            incoming.received.file.write_all(&bytes)?;
            if last {
                incoming.received.file.sync_all()?;
            }
            Ok(incoming)
        })
        .await
        .map_err(|e| e.to_string())?;
        let mut incoming =
            written.map_err(|e| format!("shard {shard}: storing a snapshot chunk: {e}"))?;
        incoming.transfer.add(len);
        incoming.last_chunk_at = Instant::now();
        if !last {
            let next_offset = incoming.transfer.done_bytes;
            let mut transfers = self.transfers.lock().unwrap_or_else(|p| p.into_inner());
            // A transfer begun meanwhile supersedes this one, which is then dropped.
            transfers.entry(shard).or_insert(incoming);
            return Ok(SnapshotChunkAnswer::Continue { next_offset });
        }
        self.install(raft, chunk.vote, chunk.meta, incoming).await
    }

    /// Why a transfer starting with `chunk` cannot be taken, if it cannot. A transfer of the
    /// same group in progress is discarded either way (the leader started again).
    fn no_room(&self, chunk: &SnapshotChunk) -> Option<String> {
        let why = self
            .room
            .as_ref()?
            .room_for_snapshot(chunk.total_bytes)
            .err()?;
        drop(self.take(chunk.shard));
        LazyLock::force(&DESCRIBED);
        let shard = chunk.shard;
        tracing::warn!(shard, snapshot = %chunk.meta, total_bytes = chunk.total_bytes, "snapshot refused: {why}");
        metrics::counter!("firn_snapshots_refused_total", "shard" => shard.to_string())
            .increment(1);
        Some(format!("shard {shard}: {why}"))
    }

    async fn begin(
        &self,
        raft: &Raft<FirnRaft, ShardStateMachine>,
        chunk: &SnapshotChunk,
    ) -> Result<Incoming, String> {
        drop(self.take(chunk.shard));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let path = raft
            .with_state_machine(move |sm: &mut ShardStateMachine| {
                let path = sm.incoming_path(id);
                Box::pin(async move { path })
            })
            .await
            .map_err(|e| e.to_string())?;
        let file = File::create(&path)
            .map_err(|e| format!("shard {}: creating {}: {e}", chunk.shard, path.display()))?;
        let peer = format!("leader of {}", chunk.vote);
        Ok(Incoming {
            vote: chunk.vote,
            meta: chunk.meta.clone(),
            total_bytes: chunk.total_bytes,
            received: IncomingFile { path, file },
            last_chunk_at: Instant::now(),
            transfer: Transfer::start(false, chunk.shard, peer, chunk.total_bytes, 0),
        })
    }

    /// Checks the whole file and hands it to Raft, which checks the vote again and installs
    /// it (moving the file to the replica's snapshot) unless its replica is already newer.
    async fn install(
        &self,
        raft: &Raft<FirnRaft, ShardStateMachine>,
        vote: Vote,
        meta: SnapshotMeta,
        incoming: Incoming,
    ) -> Result<SnapshotChunkAnswer, String> {
        // The file stays until Raft is done with it (removed then unless installed).
        let Incoming {
            received, transfer, ..
        } = incoming;
        let path = received.path.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let (meta, file) = SnapshotFile::open(&path)?;
            file.verify()?;
            Ok::<_, io::Error>((meta, file))
        })
        .await
        .map_err(|e| e.to_string())?;
        let (file_meta, file) = opened.map_err(|e| format!("received snapshot refused: {e}"))?;
        if file_meta != meta {
            return Err(format!(
                "the received snapshot file holds {file_meta}, but {meta} was sent"
            ));
        }
        let response = raft
            .install_full_snapshot(
                vote,
                Snapshot {
                    meta,
                    snapshot: SnapshotData::File(file),
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        drop(received);
        transfer.finish("handed to Raft");
        Ok(SnapshotChunkAnswer::Done(response))
    }
}
