//! A watch: the replayed versions, then live ones, each exactly once; in commit order per
//! key (and overall, within one shard).
//!
//! Each shard the watch covers is one feed, whose events come in commit order. A version
//! both replayed and received live (the subscription starts before the replay reads), or
//! polled twice from a remote shard after a failover, is recognised by its feed's newest
//! delivered stamp (and the keys delivered at that stamp: one log entry, an MSET or a
//! multi-key DEL, writes several keys with one stamp). The bookkeeping is one stamp per feed
//! and at most one entry's keys, however many keys a prefix watch sees.

use std::collections::{HashSet, VecDeque};

use firn_model::limits::WATCH_BUFFER_EVENTS;
use firn_model::{CommitTs, FirnError, Key, WatchEvent, WatchFrom, WatchRequest};
use tokio::sync::{broadcast, mpsc};

/// What a shard's forwarding task hands the watcher.
enum Live {
    Event(usize, WatchEvent),
    Lagged(u64),
}

pub struct WatchStream {
    request: WatchRequest,
    /// Replayed events, in commit order, each with its feed.
    replay: VecDeque<(usize, WatchEvent)>,
    live: mpsc::Receiver<Live>,
    /// The newest stamp delivered from each feed, with the keys delivered at it.
    delivered: Vec<Option<(CommitTs, HashSet<Key>)>>,
    ended: bool,
}

impl WatchStream {
    /// `live` holds one subscription per feed (shard) the watch covers; each is forwarded
    /// into one queue by its own task, which ends when the watch is dropped. `replay` holds
    /// each event with the index of its feed in `live`.
    pub fn new(
        request: WatchRequest,
        mut replay: Vec<(usize, WatchEvent)>,
        live: Vec<broadcast::Receiver<WatchEvent>>,
    ) -> Self {
        replay.sort_by(|(_, a), (_, b)| {
            a.info
                .commit_ts
                .cmp(&b.info.commit_ts)
                .then(a.key.cmp(&b.key))
        });
        let (tx, rx) = mpsc::channel(WATCH_BUFFER_EVENTS);
        let feeds = live.len();
        for (feed, mut sub) in live.into_iter().enumerate() {
            let tx = tx.clone();
            let target = request.target.clone();
            tokio::spawn(async move {
                loop {
                    let item = match sub.recv().await {
                        Ok(e) if !target.contains(e.key.as_bytes()) => continue,
                        Ok(e) => Live::Event(feed, e),
                        Err(broadcast::error::RecvError::Lagged(n)) => Live::Lagged(n),
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    let lagged = matches!(item, Live::Lagged(_));
                    if tx.send(item).await.is_err() || lagged {
                        return;
                    }
                }
            });
        }
        WatchStream {
            request,
            replay: replay.into(),
            live: rx,
            delivered: vec![None; feeds],
            ended: false,
        }
    }

    /// How many keys the watch remembers to deliver each version once: those of the newest
    /// entry of each feed.
    pub fn bookkeeping_len(&self) -> usize {
        self.delivered
            .iter()
            .flatten()
            .map(|(_, keys)| keys.len())
            .sum()
    }

    fn wanted(&self, feed: usize, event: &WatchEvent) -> bool {
        if !self.request.target.contains(event.key.as_bytes()) {
            return false;
        }
        if let Some(Some((newest, keys))) = self.delivered.get(feed) {
            let ts = event.info.commit_ts;
            if ts < *newest || (ts == *newest && keys.contains(&event.key)) {
                return false;
            }
        }
        match self.request.from {
            WatchFrom::Now => true,
            WatchFrom::Version(v) => event.info.version >= v,
            WatchFrom::Time(t) => event.info.commit_ts >= t,
        }
    }

    /// The next event; `None` once the watch has ended. A watcher more than
    /// [`WATCH_BUFFER_EVENTS`] behind gets an error and the watch ends.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, FirnError>> {
        if self.ended {
            return None;
        }
        loop {
            let (feed, event) = match self.replay.pop_front() {
                Some(e) => e,
                None => match self.live.recv().await {
                    Some(Live::Event(feed, e)) => (feed, e),
                    Some(Live::Lagged(n)) => {
                        self.ended = true;
                        return Some(Err(FirnError::TryAgain(format!(
                            "the watcher fell {n} events behind (the buffer holds {WATCH_BUFFER_EVENTS}); \
                             restart the watch from the last version received"
                        ))));
                    }
                    None => {
                        self.ended = true;
                        return None;
                    }
                },
            };
            if self.wanted(feed, &event) {
                if let Some(slot) = self.delivered.get_mut(feed) {
                    let ts = event.info.commit_ts;
                    match slot {
                        Some((newest, keys)) if *newest == ts => {
                            keys.insert(event.key.clone());
                        }
                        _ => *slot = Some((ts, HashSet::from([event.key.clone()]))),
                    }
                }
                return Some(Ok(event));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use firn_model::{KeyRange, VersionInfo};

    use super::*;

    fn event(key: &str, version: u64, wall_us: u64) -> WatchEvent {
        WatchEvent {
            key: Key::new(Bytes::copy_from_slice(key.as_bytes())).unwrap(),
            info: VersionInfo {
                version,
                commit_ts: CommitTs::new(wall_us, 0),
                event_time_us: None,
                deleted: false,
                value: None,
                blob: None,
                kind: firn_model::KeyKind::String,
            },
        }
    }

    #[tokio::test]
    async fn each_version_is_delivered_once_and_the_bookkeeping_stays_one_entry_wide() {
        let request = WatchRequest {
            target: KeyRange::Prefix(Bytes::from_static(b"k/")),
            from: WatchFrom::Version(1),
        };
        let (tx, rx) = broadcast::channel(4_096);
        // Replayed: two versions; the live feed repeats the second (the subscription began
        // before the replay read), then an MSET writes two keys with one stamp, twice over
        // (a remote poll after a failover), then a thousand distinct keys.
        let replay = vec![(0, event("k/a", 1, 10)), (0, event("k/a", 2, 20))];
        let mut live = vec![
            event("k/a", 2, 20),
            event("k/x", 1, 30),
            event("k/y", 1, 30),
            event("k/x", 1, 30),
            event("k/y", 1, 30),
        ];
        live.extend((0..1_000).map(|i| event(&format!("k/{i:04}"), 1, 100 + i)));
        let mut stream = WatchStream::new(request, replay, vec![rx]);
        for e in &live {
            tx.send(e.clone()).unwrap();
        }
        drop(tx);
        let mut seen = Vec::new();
        let mut widest = 0;
        while let Some(e) = stream.next().await {
            let e = e.unwrap();
            seen.push((e.key.to_string(), e.info.version));
            widest = widest.max(stream.bookkeeping_len());
        }
        assert_eq!(
            seen.len(),
            2 + 2 + 1_000,
            "each version once: {:?}",
            &seen[..6]
        );
        assert_eq!(
            &seen[..4],
            &[
                ("k/a".to_string(), 1),
                ("k/a".to_string(), 2),
                ("k/x".to_string(), 1),
                ("k/y".to_string(), 1)
            ]
        );
        assert!(
            widest <= 2,
            "the watch remembered {widest} keys; one entry's keys at most"
        );
    }
}
