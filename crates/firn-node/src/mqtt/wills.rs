//! Wills waiting out their delay on this node (5.0's Will Delay Interval, 3.1.3.2.2): a
//! will is published once its delay has passed, unless its client id connects again first —
//! here, or on another node, which tells this one (`super::takeover`). A CONNECT that takes
//! the session up again means the client is back: the will is not published. A clean one
//! ends the session: the will is published at once. Held in memory only — a node that
//! stops forgets the wills it was holding (none is published).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

/// Wills a node holds for their delay, at most: one more is published at once. As many as
/// the persistent sessions a node keeps, since a will waits only while its session lasts.
pub const DELAYED_WILLS_MAX: usize = super::SESSIONS_MAX;

/// What ends a will's wait before its delay has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconnect {
    /// The client took its session up again: the will is not published.
    Resumed,
    /// The client started clean, so its session ended: the will is published now.
    Clean,
}

/// The wills this node holds, by client id.
#[derive(Default)]
pub struct DelayedWills {
    by_client: Mutex<HashMap<String, Waiting>>,
    next: AtomicU64,
}

/// A will waiting: which one (a newer will of the client replaces it), and how to end its
/// wait.
struct Waiting {
    will: u64,
    reconnect: oneshot::Sender<Reconnect>,
}

impl DelayedWills {
    /// Holds `client`'s will for `delay`, then runs `publish`; not if the client reconnects
    /// first (see [`DelayedWills::reconnected`]) or the node stops. `Err(publish)`: this
    /// node holds [`DELAYED_WILLS_MAX`] already and took none (the caller publishes it now).
    pub fn hold<F>(
        self: &Arc<Self>,
        client: &str,
        delay: Duration,
        publish: F,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (reconnect, reconnected) = oneshot::channel();
        let will = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
            if by_client.len() >= DELAYED_WILLS_MAX && !by_client.contains_key(client) {
                return Err(publish);
            }
            // An older will of this client (its wait not yet ended) is replaced: dropping
            // its sender ends it unpublished.
            by_client.insert(client.to_owned(), Waiting { will, reconnect });
        }
        super::counted("will_delayed");
        let (wills, client) = (self.clone(), client.to_owned());
        tokio::spawn(async move {
            let publish_now = tokio::select! {
                _ = tokio::time::sleep(delay) => true,
                ended = reconnected => ended == Ok(Reconnect::Clean),
                // A stopping node publishes no wills (nor do its connections).
                _ = stop.changed() => false,
            };
            wills.release(&client, will);
            if publish_now {
                publish.await;
            }
        });
        Ok(())
    }

    /// `client` connected again: the will held for it, if any, is published at once
    /// (`Clean`) or not at all (`Resumed`).
    pub fn reconnected(&self, client: &str, how: Reconnect) {
        let waiting = self
            .by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(client);
        if let Some(w) = waiting {
            let _ = w.reconnect.send(how);
        }
    }

    /// How many wills are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Forgets will `will` of `client` once its wait is over (a newer one stays).
    fn release(&self, client: &str, will: u64) {
        let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if by_client.get(client).is_some_and(|w| w.will == will) {
            by_client.remove(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A will that counts its publications in `published`.
    fn counting(published: &Arc<AtomicUsize>) -> impl Future<Output = ()> + Send + 'static {
        let published = published.clone();
        async move {
            published.fetch_add(1, Ordering::SeqCst);
        }
    }

    const DELAY: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn a_will_is_published_once_its_delay_has_passed() {
        let (wills, published) = (Arc::new(DelayedWills::default()), Arc::default());
        let (_stop_tx, stop) = watch::channel(false);
        assert!(wills.hold("dev", DELAY, counting(&published), stop).is_ok());
        tokio::time::sleep(DELAY / 2).await;
        assert_eq!(published.load(Ordering::SeqCst), 0, "not before its delay");
        assert_eq!(wills.len(), 1);
        tokio::time::sleep(DELAY).await;
        assert_eq!(published.load(Ordering::SeqCst), 1);
        assert_eq!(wills.len(), 0);
    }

    #[tokio::test]
    async fn a_resumed_session_cancels_the_will_and_a_clean_start_publishes_it_now() {
        let (wills, published) = (Arc::new(DelayedWills::default()), Arc::default());
        let (_stop_tx, stop) = watch::channel(false);
        let _ = wills.hold("back", DELAY, counting(&published), stop.clone());
        let _ = wills.hold("anew", DELAY, counting(&published), stop.clone());
        wills.reconnected("back", Reconnect::Resumed);
        wills.reconnected("anew", Reconnect::Clean);
        // Another client's reconnect touches neither.
        wills.reconnected("other", Reconnect::Clean);
        tokio::time::sleep(DELAY / 4).await;
        assert_eq!(
            published.load(Ordering::SeqCst),
            1,
            "the clean start's, at once"
        );
        tokio::time::sleep(DELAY * 2).await;
        assert_eq!(
            published.load(Ordering::SeqCst),
            1,
            "the resumed one's, never"
        );
        assert_eq!(wills.len(), 0);
    }

    #[tokio::test]
    async fn a_stopping_node_forgets_its_wills_and_a_newer_will_replaces_an_older() {
        let (wills, published) = (Arc::new(DelayedWills::default()), Arc::default());
        let (stop_tx, stop) = watch::channel(false);
        let _ = wills.hold("dev", DELAY, counting(&published), stop.clone());
        let _ = wills.hold("dev", DELAY * 2, counting(&published), stop.clone());
        tokio::time::sleep(DELAY * 3 / 2).await;
        assert_eq!(published.load(Ordering::SeqCst), 0, "the older one never");
        assert_eq!(wills.len(), 1, "the newer one still waits");
        let _ = wills.hold("other", DELAY, counting(&published), stop);
        stop_tx.send(true).unwrap();
        tokio::time::sleep(DELAY * 2).await;
        assert_eq!(published.load(Ordering::SeqCst), 0);
        assert_eq!(wills.len(), 0);
    }
}
