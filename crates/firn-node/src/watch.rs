//! A watch: the replayed versions, then live ones, each exactly once; in commit order per
//! key (and overall, within one shard).

use std::collections::{HashMap, VecDeque};

use firn_model::limits::WATCH_BUFFER_EVENTS;
use firn_model::{FirnError, Key, Version, WatchEvent, WatchFrom, WatchRequest};
use tokio::sync::{broadcast, mpsc};

/// What a shard's forwarding task hands the watcher.
enum Live {
    Event(WatchEvent),
    Lagged(u64),
}

pub struct WatchStream {
    request: WatchRequest,
    replay: VecDeque<WatchEvent>,
    live: mpsc::Receiver<Live>,
    /// Newest version delivered per key, so a version both replayed and received live is
    /// delivered once.
    delivered: HashMap<Key, Version>,
    ended: bool,
}

impl WatchStream {
    /// `live` holds one subscription per shard the watch covers; each is forwarded into one
    /// queue by its own task, which ends when the watch is dropped.
    pub fn new(
        request: WatchRequest,
        replay: Vec<WatchEvent>,
        live: Vec<broadcast::Receiver<WatchEvent>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER_EVENTS);
        for mut sub in live {
            let tx = tx.clone();
            let target = request.target.clone();
            tokio::spawn(async move {
                loop {
                    let item = match sub.recv().await {
                        Ok(e) if !target.contains(e.key.as_bytes()) => continue,
                        Ok(e) => Live::Event(e),
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
            delivered: HashMap::new(),
            ended: false,
        }
    }

    fn wanted(&self, event: &WatchEvent) -> bool {
        if !self.request.target.contains(event.key.as_bytes()) {
            return false;
        }
        if self
            .delivered
            .get(&event.key)
            .is_some_and(|v| *v >= event.info.version)
        {
            return false;
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
            let event = match self.replay.pop_front() {
                Some(e) => e,
                None => match self.live.recv().await {
                    Some(Live::Event(e)) => e,
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
            if self.wanted(&event) {
                self.delivered.insert(event.key.clone(), event.info.version);
                return Some(Ok(event));
            }
        }
    }
}
