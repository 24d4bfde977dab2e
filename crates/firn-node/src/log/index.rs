//! The local index: IndiLog's bounded per-node cache in front of the index tier (the
//! shards that answer a tag's reads), so that many readers of one tag's records on a node
//! ask the tier once. It owns, per (log, tag), one contiguous seq range `[from, through]`
//! this node knows *completely* — every record of the tag with a seq in it, with its tags
//! and payload — and the tag's trim point as the tier last told it. It never asks the tier
//! itself, never guesses, and never serves what it does not know: when unsure, a miss.
//!
//! # What it learns, and why that is exact
//!
//! A range is learnt only from a plain linearizable query's answer (below), and only up to
//! a seq below which no record of the tag can ever be added ("final"):
//!
//! - **One home** (the tag's shard named no other, read at latest after the linearizable
//!   barrier): the shard's state is a prefix of its Raft log. Within a shard stamps only
//!   grow (apply raises each command's stamp above the last), and a record's seq is its
//!   stamp with the shard as tie-break, so a record the prefix lacks gets a seq above every
//!   seq in it, in particular above the tag's `last_seq` there. A record of the tag in any
//!   other shard needs the tag's directory to name that shard first (appends note the home,
//!   then write stamped above the note) and that note, missing from the prefix, is stamped
//!   above it too. So the tag's records with seq ≤ `last_seq` are final.
//! - **Several homes** (every home read at one closed time `t`): no shard commits at or
//!   below `t` after closing it, a home noted after `t` holds only records stamped above
//!   its note, and seqs order as stamps do, so the records with seq ≤ the greatest seq of
//!   stamp `t` are final.
//!
//! Given that bound `F`, a forward read from `s` that answered its full `limit` ending at
//! `x` teaches `[s, x]`; one that answered fewer teaches `[s, min(to, F)]` (it got every
//! record there). A reverse read to `m` teaches `[x, min(m, F)]` when full, else
//! `[max(from, first_kept), min(m, F)]`. A learnt range touching the cached one merges with
//! it (their common part must agree, or both are dropped); a range apart from it replaces
//! it. Every learnt range starts at or above the tag's trim point as that answer gave it.
//!
//! A lookup answers only from inside the range: `next(s)` hits iff `from ≤ s ≤ through`
//! and a cached record lies in `[s, through]`; `prev(m)` iff `from ≤ m ≤ through` and one
//! lies in `[from, m]`; a range when its first `limit` records (or, for fewer, its whole
//! span) lie inside. The tier answers those reads with the same records now and later,
//! since they are final and a record once read is always read the same; `tail` reads up to
//! the greatest seq, which no range reaches, so it always misses.
//!
//! Served: plain log queries (no `at`, not `q.stream`) at linearizable or lease
//! consistency, whose tag is not the log's name. Learnt from: only the linearizable ones.
//! Reads at a time, `local` reads (a stale replica may not know a trim) and every stream
//! read go to the tier, and so does any tag named as its log: that is where Redis streams
//! live, whose ids clients choose and whose entries XDEL and MAXLEN remove, outside the
//! seq rules above.
//!
//! # Trims and FLUSHALL
//!
//! A trim or FLUSHALL, once committed, is told to every node of the layout ([`Forget`],
//! awaited by the write, [`FORGET_WAIT`] per node; this node at once): each raises its
//! cached trim points and drops what lies below, and bumps an epoch so that a tier answer
//! read before the forget is not learnt after it. Any tier answer also carries the tag's
//! trim point, which raises the cached one. The remaining window: a node that does not hear
//! the forget (cut off from the trimming node for the whole [`FORGET_WAIT`]; the trim
//! still succeeds and the miss is logged) keeps serving its cached records below the new
//! trim point — records that did exist with those seqs, never other ones — where the tier
//! would answer TRIMMED (or, after FLUSHALL, nothing), until that tag misses once (the tier
//! answer brings the new trim point; one that contradicts the cached records drops the
//! tag) or is evicted. The same holds for a node joining the cluster that the trimming
//! node's layout does not list yet.
//!
//! # Memory
//!
//! At most `--log-index-bytes` (0: off), counted as each record's
//! [`LogRecord::footprint`] plus [`RECORD_OVERHEAD_BYTES`], and [`TAG_OVERHEAD_BYTES`] plus
//! the names per tag. Past it, whole tags go, least recently used first; a tag that alone
//! is larger loses its oldest records.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use firn_model::log::LOG_SHARDS_MAX;
use firn_model::{CommitTs, Key, LogQuery, LogRecord, LogSeq, ReadConsistency, TagInfo};
use firn_raft::NodeId;
use serde::{Deserialize, Serialize};

use crate::rpc::PeerClient;

/// Bytes a cached tag costs beyond its records and names: its map slot, its place in the
/// use order, its bounds.
pub const TAG_OVERHEAD_BYTES: usize = 160;
/// Bytes a cached record costs beyond its footprint: its node in the tag's ordered map.
pub const RECORD_OVERHEAD_BYTES: usize = 48;
/// How long a trim waits for each node to forget what it removed.
pub const FORGET_WAIT: Duration = Duration::from_secs(1);

/// What a committed write removed, as every node's index must forget it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Forget {
    /// A trim: records of `tag` (of every tag: `None`) of `log` below `before` are gone.
    Trim {
        log: Key,
        tag: Option<Key>,
        before: LogSeq,
    },
    /// FLUSHALL: every log is gone.
    Everything,
}

/// The peer call that tells a node to forget what a committed write removed.
#[derive(Debug, Serialize, Deserialize)]
pub struct ForgetLog(pub Forget);

crate::rpc::rpc! {
    ForgetLog => ();
}

/// Why the tier's answer is final below some seq (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finality {
    /// One home, read at latest after a linearizable barrier; the greatest seq it ever gave
    /// a record of the tag.
    OneHome { last_seq: LogSeq },
    /// Every home read at this closed time.
    ClosedAt(CommitTs),
}

impl Finality {
    /// How a tier read was made: every home at a closed time, or else the tag's one home at
    /// latest, whose account of the tag is `info` (`None`: it knows no such tag, and there
    /// is nothing to learn).
    pub fn of(closed_at: Option<CommitTs>, info: Option<&TagInfo>) -> Option<Self> {
        match (closed_at, info) {
            (Some(t), _) => Some(Finality::ClosedAt(t)),
            (None, Some(info)) => Some(Finality::OneHome {
                last_seq: info.last_seq,
            }),
            (None, None) => None,
        }
    }

    /// The greatest seq at or below which no record of the tag can be added any more.
    fn final_through(self) -> LogSeq {
        match self {
            Finality::OneHome { last_seq } => last_seq,
            Finality::ClosedAt(t) => LogSeq::from_stamp(t, LOG_SHARDS_MAX - 1),
        }
    }
}

/// The tier's answer to a query, as the index learns from it.
pub struct TierAnswer<'a> {
    /// The merged answer, in the query's order, at most its limit.
    pub records: &'a [LogRecord],
    /// The tag's trim point the answer was read under.
    pub first_kept: LogSeq,
    pub finality: Finality,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The exact answer.
    Hit(Vec<LogRecord>),
    /// Ask the tier, then [`LogIndex::learn`] with this.
    Miss(Ticket),
    /// Not a read the index serves (see the module doc): ask the tier, learn nothing.
    Bypass,
}

/// Taken at a miss, given back with the tier's answer: learning is refused if a forget
/// came in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    epoch: u64,
    learn: bool,
}

/// Counters for tests and operators (also on `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogIndexStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bytes: usize,
    pub tags: usize,
}

pub struct LogIndex {
    bytes_max: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

type TagKey = (Key, Key);

#[derive(Default)]
struct Inner {
    tags: HashMap<TagKey, Cached>,
    /// Last use → tag: least recently used first.
    lru: BTreeMap<u64, TagKey>,
    clock: u64,
    bytes: usize,
    /// Bumped by every forget (see [`Ticket`]).
    epoch: u64,
}

/// One tag's known range.
#[derive(Clone, Debug)]
struct Cached {
    from: LogSeq,
    through: LogSeq,
    first_kept: LogSeq,
    records: BTreeMap<LogSeq, LogRecord>,
    /// What it counts against the bound, names and overhead included.
    bytes: usize,
    used: u64,
}

fn record_bytes(r: &LogRecord) -> usize {
    r.footprint() + RECORD_OVERHEAD_BYTES
}

/// Whether `[a, b]` and `[c, d]` overlap or are adjacent.
fn touches(a: LogSeq, b: LogSeq, c: LogSeq, d: LogSeq) -> bool {
    b.successor().is_none_or(|after_b| c <= after_b)
        && d.successor().is_none_or(|after_d| a <= after_d)
}

impl Cached {
    fn new(key: &TagKey, from: LogSeq, through: LogSeq, first_kept: LogSeq) -> Self {
        Cached {
            from,
            through,
            first_kept,
            records: BTreeMap::new(),
            bytes: TAG_OVERHEAD_BYTES + key.0.as_bytes().len() + key.1.as_bytes().len(),
            used: 0,
        }
    }

    fn put(&mut self, record: LogRecord) {
        let bytes = record_bytes(&record);
        if self.records.insert(record.seq, record).is_none() {
            self.bytes += bytes;
        }
    }

    /// Raises the trim point and forgets what lies below it. False when nothing is left.
    fn raise_floor(&mut self, first_kept: LogSeq) -> bool {
        self.first_kept = self.first_kept.max(first_kept);
        if self.from < self.first_kept {
            let kept = self.records.split_off(&self.first_kept);
            self.bytes -= self.records.values().map(record_bytes).sum::<usize>();
            self.records = kept;
            self.from = self.first_kept;
        }
        self.from <= self.through
    }

    /// Forgets the oldest record, the range starting past it. False when nothing is left.
    fn drop_oldest(&mut self) -> bool {
        let Some((seq, r)) = self.records.pop_first() else {
            return false;
        };
        self.bytes -= record_bytes(&r);
        match seq.successor() {
            Some(next) if next <= self.through => {
                self.from = next;
                true
            }
            _ => false,
        }
    }

    /// `learnt` joined to what is known: one range if they touch (their common part must
    /// agree), else `learnt` alone. `None`: they disagree, so neither can be trusted.
    fn merge(mut self, mut learnt: Cached) -> Option<Cached> {
        let first_kept = self.first_kept.max(learnt.first_kept);
        if !touches(self.from, self.through, learnt.from, learnt.through) {
            learnt.first_kept = first_kept;
            return Some(learnt);
        }
        let (lo, hi) = (self.from.max(learnt.from), self.through.min(learnt.through));
        if lo <= hi {
            let mine = self.records.range(lo..=hi).map(|(_, r)| r);
            let theirs = learnt.records.range(lo..=hi).map(|(_, r)| r);
            if !mine.eq(theirs) {
                return None;
            }
        }
        self.from = self.from.min(learnt.from);
        self.through = self.through.max(learnt.through);
        self.first_kept = first_kept;
        for (_, r) in learnt.records {
            self.put(r);
        }
        Some(self)
    }

    /// The exact answer to `q` from the known range, if it lies inside (module doc).
    fn answer(&self, q: &LogQuery) -> Option<Vec<LogRecord>> {
        let take = |lo: LogSeq, hi: LogSeq| -> Vec<LogRecord> {
            if lo > hi {
                return Vec::new();
            }
            let range = self.records.range(lo..=hi).map(|(_, r)| r.clone());
            if q.reverse {
                range.rev().take(q.limit).collect()
            } else {
                range.take(q.limit).collect()
            }
        };
        if q.reverse {
            if q.to < self.from || q.to > self.through {
                return None;
            }
            let records = take(q.from.max(self.from), q.to);
            (records.len() == q.limit || q.from >= self.from).then_some(records)
        } else {
            if q.from < self.from || q.from > self.through {
                return None;
            }
            let records = take(q.from, q.to.min(self.through));
            (records.len() == q.limit || q.to <= self.through).then_some(records)
        }
    }
}

/// The seq range `[from, through]` a tier answer to `q` shows completely and for good;
/// `None` when it shows none, or when the answer is not what `q` asked (out of order,
/// outside its bounds, of another tag or past the final seq: unsure, so learn nothing).
fn known_range(q: &LogQuery, answer: &TierAnswer<'_>) -> Option<(LogSeq, LogSeq)> {
    let final_through = answer.finality.final_through();
    let records = answer.records;
    let ordered = records.windows(2).all(|w| {
        if q.reverse {
            w[0].seq > w[1].seq
        } else {
            w[0].seq < w[1].seq
        }
    });
    let inside = records.iter().all(|r| {
        q.from <= r.seq && r.seq <= q.to && r.seq <= final_through && r.tags.contains(&q.tag)
    });
    if q.limit == 0 || records.len() > q.limit || !ordered || !inside {
        return None;
    }
    let full = records.len() == q.limit;
    let edge = records.last().map(|r| r.seq);
    let (from, through) = match (q.reverse, full) {
        (false, true) => (q.from, edge?),
        (false, false) => (q.from, q.to.min(final_through)),
        (true, true) => (edge?, q.to.min(final_through)),
        (true, false) => (q.from, q.to.min(final_through)),
    };
    let from = from.max(answer.first_kept);
    (from <= through).then_some((from, through))
}

impl LogIndex {
    /// An index of at most `bytes_max` bytes; 0 turns it off.
    pub fn new(bytes_max: usize) -> Self {
        LogIndex {
            bytes_max,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `q` is a read the index serves (module doc).
    fn serves(&self, q: &LogQuery) -> bool {
        self.bytes_max > 0
            && q.at.is_none()
            && !q.stream
            && q.log != q.tag
            && matches!(
                q.consistency,
                ReadConsistency::Linearizable | ReadConsistency::Lease
            )
    }

    /// `q`'s exact answer when the index knows it; else a ticket to learn the tier's.
    pub fn lookup(&self, q: &LogQuery) -> Lookup {
        if !self.serves(q) {
            return Lookup::Bypass;
        }
        let key = (q.log.clone(), q.tag.clone());
        let mut inner = self.lock();
        let answer = inner.tags.get(&key).and_then(|c| c.answer(q));
        match answer {
            Some(records) => {
                inner.touch(&key);
                drop(inner);
                self.hits.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("firn_log_index_hits_total").increment(1);
                Lookup::Hit(records)
            }
            None => {
                let ticket = Ticket {
                    epoch: inner.epoch,
                    learn: q.consistency == ReadConsistency::Linearizable,
                };
                drop(inner);
                self.misses.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("firn_log_index_misses_total").increment(1);
                Lookup::Miss(ticket)
            }
        }
    }

    /// Learns what the tier's answer to `q` (asked after a miss) shows for good.
    pub fn learn(&self, ticket: Ticket, q: &LogQuery, answer: TierAnswer<'_>) {
        if !ticket.learn || !self.serves(q) {
            return;
        }
        let Some((from, through)) = known_range(q, &answer) else {
            return;
        };
        let key = (q.log.clone(), q.tag.clone());
        let mut learnt = Cached::new(&key, from, through, answer.first_kept);
        for r in answer.records {
            if from <= r.seq && r.seq <= through {
                learnt.put(r.clone());
            }
        }
        let mut inner = self.lock();
        if inner.epoch != ticket.epoch {
            return;
        }
        let evicted = inner.insert(key, learnt, self.bytes_max);
        let bytes = inner.bytes;
        drop(inner);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
            metrics::counter!("firn_log_index_evictions_total").increment(evicted);
        }
        metrics::gauge!("firn_log_index_bytes").set(bytes as f64);
    }

    /// Forgets what a committed trim or FLUSHALL removed (module doc).
    pub fn forget(&self, forget: &Forget) {
        let mut inner = self.lock();
        inner.epoch += 1;
        match forget {
            Forget::Everything => {
                inner.tags.clear();
                inner.lru.clear();
                inner.bytes = 0;
            }
            Forget::Trim { log, tag, before } => {
                let keys: Vec<TagKey> = match tag {
                    Some(tag) => vec![(log.clone(), tag.clone())],
                    None => inner.tags.keys().filter(|k| &k.0 == log).cloned().collect(),
                };
                for key in keys {
                    inner.raise_floor(&key, *before);
                }
            }
        }
        let bytes = inner.bytes;
        drop(inner);
        metrics::gauge!("firn_log_index_bytes").set(bytes as f64);
    }

    pub fn stats(&self) -> LogIndexStats {
        let inner = self.lock();
        LogIndexStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bytes: inner.bytes,
            tags: inner.tags.len(),
        }
    }
}

impl Inner {
    fn touch(&mut self, key: &TagKey) {
        self.clock += 1;
        let now = self.clock;
        if let Some(c) = self.tags.get_mut(key) {
            self.lru.remove(&c.used);
            c.used = now;
            self.lru.insert(now, key.clone());
        }
    }

    fn remove(&mut self, key: &TagKey) -> Option<Cached> {
        let c = self.tags.remove(key)?;
        self.lru.remove(&c.used);
        self.bytes -= c.bytes;
        Some(c)
    }

    fn raise_floor(&mut self, key: &TagKey, first_kept: LogSeq) {
        if let Some(mut c) = self.remove(key)
            && c.raise_floor(first_kept)
        {
            self.bytes += c.bytes;
            self.lru.insert(c.used, key.clone());
            self.tags.insert(key.clone(), c);
        }
    }

    /// Joins a learnt range to the tag's, then makes room within `bytes_max`: the tag's own
    /// oldest records if it alone is larger, then least recently used tags. Returns how
    /// many tags (or parts of one) went.
    fn insert(&mut self, key: TagKey, learnt: Cached, bytes_max: usize) -> u64 {
        let joined = match self.remove(&key) {
            Some(known) => known.merge(learnt),
            None => Some(learnt),
        };
        let Some(mut c) = joined else {
            // Only a trim or FLUSHALL this node did not hear of explains it (module doc).
            tracing::warn!(
                log = ?key.0,
                tag = ?key.1,
                "the log index learnt records that disagree with what it knew; forgot the tag"
            );
            return 0;
        };
        if !c.raise_floor(c.first_kept) {
            return 0;
        }
        let mut evicted = 0;
        if c.bytes > bytes_max {
            evicted += 1;
            while c.bytes > bytes_max {
                if !c.drop_oldest() {
                    return evicted;
                }
            }
        }
        while self.bytes + c.bytes > bytes_max {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            if let Some(gone) = self.tags.remove(&oldest) {
                self.bytes -= gone.bytes;
                evicted += 1;
            }
        }
        self.clock += 1;
        c.used = self.clock;
        self.bytes += c.bytes;
        self.lru.insert(c.used, key.clone());
        self.tags.insert(key, c);
        evicted
    }
}

/// Tells every node in `nodes` to forget what a committed write removed: this one at once,
/// the others concurrently, each within [`FORGET_WAIT`]; one that does not answer is logged
/// (the window the module doc describes).
pub async fn forget_everywhere(
    index: Arc<LogIndex>,
    peers: PeerClient,
    me: NodeId,
    nodes: Vec<NodeId>,
    forget: Forget,
) {
    index.forget(&forget);
    let calls = nodes.into_iter().filter(|n| *n != me).map(|node| {
        let peers = peers.clone();
        let call = ForgetLog(forget.clone());
        async move {
            if let Err(e) = peers.call_within(node, call, FORGET_WAIT).await {
                tracing::warn!(
                    node,
                    "node did not confirm forgetting trimmed log records ({e}); it may serve them from its log index until it next misses on the tag"
                );
            }
        }
    });
    futures::future::join_all(calls).await;
}

#[cfg(test)]
mod tests;
