//! A watch: the replayed versions, then live ones, each exactly once and in commit order.

use std::collections::{HashMap, VecDeque};

use firn_model::limits::WATCH_BUFFER_EVENTS;
use firn_model::{FirnError, Key, Version, WatchEvent, WatchFrom, WatchRequest};
use tokio::sync::broadcast;

pub struct WatchStream {
    request: WatchRequest,
    replay: VecDeque<WatchEvent>,
    live: broadcast::Receiver<WatchEvent>,
    /// Newest version delivered per key, so a version both replayed and received live is
    /// delivered once.
    delivered: HashMap<Key, Version>,
    ended: bool,
}

impl WatchStream {
    pub fn new(
        request: WatchRequest,
        replay: Vec<WatchEvent>,
        live: broadcast::Receiver<WatchEvent>,
    ) -> Self {
        WatchStream {
            request,
            replay: replay.into(),
            live,
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
                    Ok(e) => e,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        self.ended = true;
                        return Some(Err(FirnError::TryAgain(format!(
                            "the watcher fell {n} events behind (the buffer holds {WATCH_BUFFER_EVENTS}); \
                             restart the watch from the last version received"
                        ))));
                    }
                    Err(broadcast::error::RecvError::Closed) => {
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
