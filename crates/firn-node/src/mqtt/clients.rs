//! This node's MQTT connections by client id. MQTT says a second CONNECT with a client id
//! that is connected takes it over: the first connection is closed. Here the first is told
//! to end, and the second goes on once it has (at most [`TAKEOVER_WAIT`]), so a persistent
//! session's queue is never read by both. A CONNECT on another node ends a connection here
//! the same way ([`Clients::end`], asked through `super::takeover`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// How long a new connection waits for the one it takes over to end.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Clients {
    by_id: Mutex<HashMap<String, Holder>>,
    next: AtomicU64,
}

/// The connection that holds a client id.
struct Holder {
    connection: u64,
    /// Told `true` when another connection takes the client id over.
    take_over: watch::Sender<bool>,
    /// Closed when that connection has ended.
    ended: watch::Receiver<()>,
}

/// A connection's hold on its client id, given up when dropped.
pub struct Held {
    clients: Arc<Clients>,
    client: String,
    connection: u64,
    /// Changes when a newer connection takes the client id over.
    pub taken_over: watch::Receiver<bool>,
    _ended: watch::Sender<()>,
}

impl Clients {
    /// Takes `client` for a new connection: a connection holding it is told to end, and
    /// this waits until it has (bounded).
    pub async fn hold(self: &Arc<Self>, client: &str) -> Held {
        let (take_over, taken_over) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(());
        let connection = self.next.fetch_add(1, Ordering::Relaxed);
        let previous = self.by_id.lock().unwrap_or_else(|e| e.into_inner()).insert(
            client.to_owned(),
            Holder {
                connection,
                take_over,
                ended,
            },
        );
        if let Some(previous) = previous {
            wait_ended(previous.tell_to_end()).await;
        }
        Held {
            clients: self.clone(),
            client: client.to_owned(),
            connection,
            taken_over,
            _ended: ended_tx,
        }
    }
}

impl Clients {
    /// A connection on another node took `client` over: the connection holding it here, if
    /// any, is told to end, and this waits until it has (bounded). True if there was one.
    pub async fn end(&self, client: &str) -> bool {
        match self.tell_to_end(client) {
            Some(ended) => {
                wait_ended(ended).await;
                true
            }
            None => false,
        }
    }

    /// The connection holding `client` here, if any, is told to end; this does not wait
    /// for it. True if there was one.
    pub fn tell(&self, client: &str) -> bool {
        self.tell_to_end(client).is_some()
    }

    fn tell_to_end(&self, client: &str) -> Option<watch::Receiver<()>> {
        let by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.get(client).map(Holder::tell_to_end)
    }
}

impl Holder {
    /// Tells the holding connection to end: what resolves once it has.
    fn tell_to_end(&self) -> watch::Receiver<()> {
        let _ = self.take_over.send(true);
        self.ended.clone()
    }
}

/// Waits until a connection told to end has dropped its hold, at most [`TAKEOVER_WAIT`].
async fn wait_ended(mut ended: watch::Receiver<()>) {
    // Resolves (with an error) once the connection dropped its hold.
    let _ = tokio::time::timeout(TAKEOVER_WAIT, ended.changed()).await;
    super::counted("taken_over");
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut by_id = self.clients.by_id.lock().unwrap_or_else(|e| e.into_inner());
        if by_id
            .get(&self.client)
            .is_some_and(|h| h.connection == self.connection)
        {
            by_id.remove(&self.client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_hold_tells_the_first_and_waits_for_it_to_end() {
        let clients = Arc::new(Clients::default());
        let mut first = clients.hold("dev").await;
        let second = tokio::spawn({
            let clients = clients.clone();
            async move { clients.hold("dev").await }
        });
        first.taken_over.changed().await.unwrap();
        assert!(*first.taken_over.borrow());
        assert!(
            !second.is_finished(),
            "the second waits for the first to end"
        );
        drop(first);
        let second = second.await.unwrap();
        assert!(!*second.taken_over.borrow());
        // The first's end did not remove the second's hold.
        assert_eq!(clients.by_id.lock().unwrap().len(), 1);
        drop(second);
        assert!(clients.by_id.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn ending_a_client_from_elsewhere_tells_its_connection_and_waits_for_it() {
        let clients = Arc::new(Clients::default());
        assert!(!clients.end("dev").await, "no connection: nothing to end");
        let mut held = clients.hold("dev").await;
        let ending = tokio::spawn({
            let clients = clients.clone();
            async move { clients.end("dev").await }
        });
        held.taken_over.changed().await.unwrap();
        assert!(*held.taken_over.borrow());
        assert!(!ending.is_finished(), "it waits for the connection to end");
        drop(held);
        assert!(ending.await.unwrap());
        assert!(clients.by_id.lock().unwrap().is_empty());
    }
}
