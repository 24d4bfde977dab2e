//! A shard's live changes for the triggers run on it: every version applied since the feed
//! started under one of the triggers' prefixes, held in commit order until every running
//! trigger is past it. A trigger at or past the feed's start takes its inputs here, without
//! reading the store; one behind it (new, replaying, resumed, or after the feed broke) catches
//! up with [`firn_store::VersionedStore::changes`] and then moves here.
//!
//! The store sends a version to its subscribers before its closed time passes it, so the
//! versions stamped at or below a closed time read before a [`Feed::pull`] are all here.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use firn_model::{CommitTs, WatchEvent};
use firn_store::{ChangePosition, VersionedStore};
use tokio::sync::broadcast::{self, error::TryRecvError};

/// The most versions a feed holds; past it the feed breaks (its triggers catch up from the
/// store) rather than grow without bound behind a slow trigger.
pub const FEED_VERSIONS_MAX: usize = 200_000;

pub struct Feed {
    prefixes: Vec<Bytes>,
    /// Every version stamped after this one reached the feed.
    since: CommitTs,
    /// Versions at or before this place were let go.
    forgotten: ChangePosition,
    receiver: broadcast::Receiver<WatchEvent>,
    versions: BTreeMap<ChangePosition, WatchEvent>,
    broken: bool,
}

impl Feed {
    /// Starts following `store`'s versions under `prefixes` (sorted, no duplicates).
    pub fn start(store: &VersionedStore, prefixes: Vec<Bytes>) -> Feed {
        let receiver = store.subscribe();
        // Read after subscribing: what was applied before is stamped at or below it.
        let since = store.applied_ts();
        Feed {
            prefixes,
            since,
            forgotten: ChangePosition::default(),
            receiver,
            versions: BTreeMap::new(),
            broken: false,
        }
    }

    /// Whether this feed follows exactly `prefixes` and still has every version since it
    /// started.
    pub fn serves(&self, prefixes: &[Bytes]) -> bool {
        !self.broken && self.prefixes == prefixes
    }

    /// Takes in what the store applied since the last pull. A feed that fell behind the
    /// store's buffer, or outgrew [`FEED_VERSIONS_MAX`], breaks: it answers `false`.
    pub fn pull(&mut self) -> bool {
        while !self.broken {
            match self.receiver.try_recv() {
                Ok(event) => {
                    let key = event.key.as_bytes();
                    if !self.prefixes.iter().any(|p| key.starts_with(p)) {
                        continue;
                    }
                    if self.versions.len() >= FEED_VERSIONS_MAX {
                        self.broken = true;
                    } else {
                        self.versions.insert(ChangePosition::of(&event), event);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(_) | TryRecvError::Closed) => self.broken = true,
            }
        }
        if self.broken {
            self.versions.clear();
        }
        !self.broken
    }

    /// Whether every version after `cursor` is here, given that none lies between `cursor`
    /// and `seen_through` (what a trigger learned from the store).
    pub fn covers(&self, cursor: &ChangePosition, seen_through: CommitTs) -> bool {
        !self.broken
            && (cursor.commit_ts > self.since || seen_through >= self.since)
            && *cursor >= self.forgotten
    }

    /// The first `limit` versions under `prefix` after `after`, stamped at or before
    /// `through`, in commit order.
    pub fn changes(
        &self,
        prefix: &[u8],
        after: &ChangePosition,
        through: CommitTs,
        limit: usize,
    ) -> Vec<WatchEvent> {
        self.versions
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take_while(|(p, _)| p.commit_ts <= through)
            .filter(|(p, _)| p.key.starts_with(prefix))
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Lets go of the versions at or before `upto`: every running trigger is past them.
    pub fn forget_through(&mut self, upto: &ChangePosition) {
        if *upto <= self.forgotten {
            return;
        }
        let mut kept = self.versions.split_off(upto);
        kept.remove(upto);
        self.versions = kept;
        self.forgotten = upto.clone();
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.versions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::{Key, KeyKind, VersionInfo};

    fn event(wall: u64, key: &str, version: u64) -> WatchEvent {
        WatchEvent {
            key: Key::new(key.as_bytes().to_vec()).unwrap(),
            info: VersionInfo {
                version,
                commit_ts: CommitTs::new(wall, 0),
                event_time_us: None,
                deleted: false,
                value: None,
                blob: None,
                kind: KeyKind::String,
            },
        }
    }

    fn feed_of(events: &[WatchEvent], since: u64) -> Feed {
        let (sender, receiver) = broadcast::channel(16);
        let mut feed = Feed {
            prefixes: vec![Bytes::from_static(b"s/")],
            since: CommitTs::new(since, 0),
            forgotten: ChangePosition::default(),
            receiver,
            versions: BTreeMap::new(),
            broken: false,
        };
        for e in events {
            sender.send(e.clone()).unwrap();
        }
        assert!(feed.pull());
        feed
    }

    #[test]
    fn a_feed_answers_in_commit_order_under_the_prefix_and_forgets_what_all_passed() {
        // Sent out of order (a transaction resolved at an older stamp), one beside the prefix.
        let feed_events = [
            event(30, "s/b", 2),
            event(10, "s/a", 1),
            event(20, "x/z", 1),
            event(20, "s/b", 1),
        ];
        let mut feed = feed_of(&feed_events, 5);
        let keys = |es: Vec<WatchEvent>| -> Vec<(u64, String)> {
            es.iter()
                .map(|e| (e.info.commit_ts.wall_us, e.key.to_string()))
                .collect()
        };
        let start = ChangePosition::default();
        assert_eq!(
            keys(feed.changes(b"s/", &start, CommitTs::new(25, 0), 10)),
            [(10, "s/a".to_string()), (20, "s/b".to_string())]
        );
        assert_eq!(
            feed.changes(b"s/", &start, CommitTs::new(99, 0), 1).len(),
            1
        );
        let first = ChangePosition::of(&feed_events[1]);
        assert!(feed.covers(&first, CommitTs::default()));
        feed.forget_through(&first);
        assert_eq!(feed.held(), 2);
        // A cursor behind what was let go, or behind the start, is not served here.
        assert!(!feed.covers(&start, CommitTs::new(6, 0)));
        let early = feed_of(&[], 50);
        assert!(!early.covers(&first, CommitTs::default()));
        assert!(early.covers(&first, CommitTs::new(50, 0)));
    }

    #[test]
    fn a_feed_that_fell_behind_breaks_and_covers_nothing() {
        let (sender, receiver) = broadcast::channel(2);
        let mut feed = Feed {
            prefixes: vec![Bytes::from_static(b"s/")],
            since: CommitTs::default(),
            forgotten: ChangePosition::default(),
            receiver,
            versions: BTreeMap::new(),
            broken: false,
        };
        for v in 1..=5 {
            sender.send(event(v, "s/a", v)).unwrap();
        }
        assert!(!feed.pull());
        assert!(!feed.covers(&ChangePosition::default(), CommitTs::new(9, 0)));
        assert!(!feed.serves(&[Bytes::from_static(b"s/")]));
    }
}
