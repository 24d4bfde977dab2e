//! The node's reply slots for request/response: a requester waiting in `FIRN.REQUEST` (or
//! `POST /v1/services/…`) holds a slot under a token; the worker's `FIRN.REPLY` reaches this
//! node (here, or by the `ServiceReply` peer call) and completes it. A slot lives only
//! while its requester waits: it is removed when the reply comes, and by its [`ReplySlot`]
//! guard when the requester stops waiting (timeout, or its connection went away). A slot
//! belongs to the service it asked: a reply completes it only when it comes for that
//! service, so a worker allowed to reply for one service cannot answer another's requester
//! by naming its own service with the other's reply address (tokens are not secret: they
//! count up). Nothing here is replicated: a node that dies loses its slots with their
//! requesters.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use firn_model::FirnError;
use tokio::sync::oneshot;

/// Most requests one node lets wait for a reply at once. Each holds a slot (a few dozen
/// bytes) and a client connection or HTTP request; past this a request is refused with
/// `TRYAGAIN` rather than letting memory grow with a backlog of waiters.
pub const WAITING_REQUESTS_MAX: usize = 100_000;

/// A waiting request: the service it asked, and where its reply goes.
struct Waiting {
    service: Bytes,
    reply: oneshot::Sender<Bytes>,
}

/// The tokens of waiting requests and where their replies go.
pub struct ReplySlots {
    waiting: Mutex<HashMap<u64, Waiting>>,
    next: AtomicU64,
}

impl Default for ReplySlots {
    fn default() -> Self {
        // Tokens start from the clock, so a late reply meant for a slot of this node's
        // previous run does not complete a new request that got the same counter value.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        ReplySlots {
            waiting: Mutex::new(HashMap::new()),
            next: AtomicU64::new(start),
        }
    }
}

/// A waiting request's slot: its token and the receiving end. Dropping it (the requester
/// stopped waiting) removes the slot, so a reply that comes later is dropped.
pub struct ReplySlot<'a> {
    slots: &'a ReplySlots,
    pub token: u64,
    pub reply: oneshot::Receiver<Bytes>,
}

impl Drop for ReplySlot<'_> {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.token);
    }
}

impl ReplySlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new slot for a request to `service`, or `TRYAGAIN` when [`WAITING_REQUESTS_MAX`]
    /// requests wait already.
    pub fn open(&self, service: Bytes) -> Result<ReplySlot<'_>, FirnError> {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.lock();
        if waiting.len() >= WAITING_REQUESTS_MAX {
            return Err(FirnError::Busy(format!(
                "{WAITING_REQUESTS_MAX} requests already wait for replies on this node; \
                 the limit is {WAITING_REQUESTS_MAX}"
            )));
        }
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        waiting.insert(token, Waiting { service, reply: tx });
        Ok(ReplySlot {
            slots: self,
            token,
            reply: rx,
        })
    }

    /// Hands `payload` to the request to `service` waiting under `token`: true if one was
    /// waiting (a second reply, one after the requester gave up, or one for another service
    /// finds none and is dropped; the last leaves the slot waiting for its own reply).
    pub fn complete(&self, token: u64, service: &[u8], payload: Bytes) -> bool {
        let mut waiting = self.lock();
        if waiting.get(&token).is_none_or(|w| w.service != service) {
            return false;
        }
        waiting
            .remove(&token)
            .is_some_and(|w| w.reply.send(payload).is_ok())
    }

    /// How many requests wait now.
    pub fn waiting(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: Bytes = Bytes::from_static(b"billing");

    #[tokio::test]
    async fn a_reply_completes_its_slot_once() {
        let slots = ReplySlots::default();
        let mut slot = slots.open(SVC).unwrap();
        assert!(slots.complete(slot.token, &SVC, Bytes::from_static(b"a")));
        assert!(!slots.complete(slot.token, &SVC, Bytes::from_static(b"b")));
        assert_eq!((&mut slot.reply).await.unwrap(), Bytes::from_static(b"a"));
    }

    #[tokio::test]
    async fn a_reply_for_another_service_leaves_the_slot_waiting() {
        let slots = ReplySlots::default();
        let mut slot = slots.open(SVC).unwrap();
        assert!(!slots.complete(slot.token, b"shipping", Bytes::from_static(b"forged")));
        assert_eq!(slots.waiting(), 1);
        assert!(slots.complete(slot.token, &SVC, Bytes::from_static(b"real")));
        assert_eq!(
            (&mut slot.reply).await.unwrap(),
            Bytes::from_static(b"real")
        );
    }

    #[test]
    fn a_slot_dropped_is_gone_and_its_reply_dropped() {
        let slots = ReplySlots::default();
        let token = slots.open(SVC).unwrap().token;
        assert_eq!(slots.waiting(), 0);
        assert!(!slots.complete(token, &SVC, Bytes::new()));
    }

    #[test]
    fn slots_are_bounded() {
        let slots = ReplySlots::default();
        let held: Vec<_> = (0..WAITING_REQUESTS_MAX)
            .map(|_| slots.open(SVC).unwrap())
            .collect();
        assert!(matches!(slots.open(SVC), Err(FirnError::Busy(_))));
        drop(held);
        assert!(slots.open(SVC).is_ok());
    }
}
