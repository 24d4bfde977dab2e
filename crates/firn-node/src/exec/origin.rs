//! Where this node's clients send their requests: per shard, how many kv requests for keys
//! of keyspaces that follow their clients (or are pinned) this node received from clients in
//! the last [`ORIGIN_WINDOW_S`] seconds. The steward reads every node's counts
//! (`OriginCounts`) and decides where leaders go (`cluster::follow`). It owns only the
//! counting: it never decides or moves anything, never counts a part forwarded by another
//! node (that node counted it), and looks nothing up while no keyspace follows.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use firn_model::{Key, KvRead, KvRequest};
use firn_raft::{NodeId, ShardId};

use crate::cluster::follow::{OriginReport, Pull, follows_any};
use crate::cluster::layout::ClusterLayout;

/// Seconds of requests a count covers, in one-second buckets: long enough that one round of
/// the steward (500 ms) sees a steady client's requests at modest rates, and that a burst of
/// one second is at most a fifth of the window; short enough that a client that moved is
/// followed within seconds.
pub const ORIGIN_WINDOW_S: u64 = 5;
/// Most (shard, pull) pairs counted at once (256 shards × a few pins): past it, a new pair is
/// not counted until a pair without requests in the window is dropped (at the next report).
const ORIGIN_ENTRIES_MAX: usize = 4_096;
/// Most keys of one request looked up: a request of more keys counts toward the shards of
/// its first ones, so a 10,000-key MGET costs 64 lookups, not 10,000.
const KEYS_COUNTED_MAX: usize = 64;

/// Per-second buckets of one (shard, pull) pair; each bucket remembers its second, so a
/// bucket from a previous turn of the ring is never counted.
#[derive(Clone, Copy, Debug, Default)]
struct Buckets([(u64, u32); ORIGIN_WINDOW_S as usize]);

impl Buckets {
    fn add(&mut self, second: u64) {
        let bucket = &mut self.0[(second % ORIGIN_WINDOW_S) as usize];
        if bucket.0 != second {
            *bucket = (second, 0);
        }
        bucket.1 = bucket.1.saturating_add(1);
    }

    /// Requests in the window that ends with `second` (the current, partial one included).
    fn total(&self, second: u64) -> u64 {
        self.0
            .iter()
            .filter(|(s, _)| *s <= second && s + ORIGIN_WINDOW_S > second)
            .map(|(_, n)| u64::from(*n))
            .sum()
    }
}

/// This node's counts.
pub struct OriginCounter {
    started: Instant,
    counts: Mutex<HashMap<(ShardId, Pull), Buckets>>,
}

impl Default for OriginCounter {
    fn default() -> Self {
        OriginCounter {
            started: Instant::now(),
            counts: Mutex::default(),
        }
    }
}

impl OriginCounter {
    /// Counts a client's `request` once for each (shard, pull) its keys fall in. Nothing is
    /// looked up when no keyspace follows or is pinned.
    pub fn count(&self, layout: &ClusterLayout, request: &KvRequest) {
        if counts_anything(layout) {
            self.count_keys(layout, request.keys());
        }
    }

    /// [`OriginCounter::count`] for a read.
    pub fn count_read(&self, layout: &ClusterLayout, read: &KvRead) {
        if counts_anything(layout) {
            self.count_keys(layout, read.keys());
        }
    }

    fn count_keys<'a>(&self, layout: &ClusterLayout, keys: impl Iterator<Item = &'a Key>) {
        let mut pulls: Vec<(ShardId, Pull)> = Vec::new();
        for key in keys.take(KEYS_COUNTED_MAX) {
            let Some(pull) = Pull::of(layout.placement_for(key.as_bytes()).follow) else {
                continue;
            };
            let at = (layout.shard_of_key(key.as_bytes()), pull);
            if !pulls.contains(&at) {
                pulls.push(at);
            }
        }
        if pulls.is_empty() {
            return;
        }
        let second = self.started.elapsed().as_secs();
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for at in pulls {
            if counts.len() >= ORIGIN_ENTRIES_MAX && !counts.contains_key(&at) {
                continue;
            }
            counts.entry(at).or_default().add(second);
        }
    }

    /// The counts over the window as `node` reports them; pairs without requests in it are
    /// dropped.
    pub fn report(&self, node: NodeId) -> OriginReport {
        let elapsed = self.started.elapsed();
        let second = elapsed.as_secs();
        // The window ends now: the full seconds before this one, and this one so far (or
        // less, just after start).
        let window_ms = (elapsed.as_millis() as u64)
            .min((ORIGIN_WINDOW_S - 1) * 1_000 + u64::from(elapsed.subsec_millis()));
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.retain(|_, b| b.total(second) > 0);
        let mut counts: Vec<(ShardId, Pull, u64)> = counts
            .iter()
            .map(|(&(shard, pull), b)| (shard, pull, b.total(second)))
            .collect();
        counts.sort_unstable();
        OriginReport {
            node,
            window_ms,
            counts,
        }
    }
}

/// Whether any keyspace follows its clients or is pinned: nothing is counted otherwise.
fn counts_anything(layout: &ClusterLayout) -> bool {
    !layout.placements.is_empty() && follows_any(layout)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use firn_model::{
        Follow, KeyspaceDef, KeyspacePlacement, KeyspaceSpec, KvWrite, PutRequest, ReadAt,
        ReadConsistency,
    };

    use super::*;
    use crate::cluster::layout::parse_peers;

    fn key(k: &str) -> Key {
        Key::new(Bytes::copy_from_slice(k.as_bytes())).unwrap()
    }

    fn get(k: &str) -> KvRequest {
        KvRequest::Read(KvRead::Get {
            key: key(k),
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        })
    }

    /// Three shards; keyspaces `on/` (follows), `pin/` (pinned to node 2), `off/`.
    fn layout() -> ClusterLayout {
        let mut l = ClusterLayout::new(parse_peers("1=a:1,2=b:2,3=c:3").unwrap(), 3, 3).unwrap();
        for (prefix, follow) in [
            ("on/", Follow::On),
            ("pin/", Follow::Pin(2)),
            ("off/", Follow::Off),
        ] {
            let def = KeyspaceDef {
                spec: KeyspaceSpec {
                    prefix: prefix.into(),
                    ..KeyspaceSpec::default_keyspace()
                },
                placement: KeyspacePlacement {
                    local: false,
                    follow,
                },
            };
            l.define_keyspace(def, false).unwrap();
        }
        l
    }

    #[test]
    fn only_keys_that_follow_or_are_pinned_are_counted_once_per_shard() {
        let l = layout();
        let c = OriginCounter::default();
        c.count(&l, &get("on/{a}1"));
        c.count(&l, &get("off/{a}1"));
        c.count(&l, &get("elsewhere"));
        c.count(&l, &get("pin/{a}1"));
        // Two keys of one shard in one request count once.
        c.count(
            &l,
            &KvRequest::Write(KvWrite::MSet {
                items: vec![
                    (key("on/{a}2"), Bytes::new()),
                    (key("on/{a}3"), Bytes::new()),
                ],
            }),
        );
        c.count(
            &l,
            &KvRequest::Write(KvWrite::Put(PutRequest::new(key("on/{a}4"), Bytes::new()))),
        );
        let shard = l.shard_of_key(b"{a}");
        let r = c.report(7);
        assert_eq!(r.node, 7);
        let mut want = vec![(shard, Pull::Follow, 3), (shard, Pull::Pin(2), 1)];
        want.sort_unstable();
        assert_eq!(r.counts, want);
        assert!(r.window_ms <= ORIGIN_WINDOW_S * 1_000);
    }

    #[test]
    fn nothing_is_counted_while_no_keyspace_follows() {
        let mut l = layout();
        l.placements.clear();
        let c = OriginCounter::default();
        c.count(&l, &get("on/1"));
        assert!(c.report(1).counts.is_empty());
    }

    #[test]
    fn buckets_forget_requests_older_than_the_window() {
        let mut b = Buckets::default();
        b.add(10);
        b.add(10);
        b.add(12);
        assert_eq!(b.total(12), 3);
        assert_eq!(b.total(14), 3, "second 10 is still in 10..=14");
        assert_eq!(b.total(15), 1, "second 10 has left the window");
        // Second 15 reuses second 10's bucket: the old count is not carried over.
        b.add(15);
        assert_eq!(b.total(15), 2);
        assert_eq!(b.total(17), 1);
        assert_eq!(b.total(20), 0);
    }
}
