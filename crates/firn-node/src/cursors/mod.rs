//! Redis `SCAN` cursors. Redis hands out integers; Firn pages by key. A node keeps a table
//! from the numbers it issued to the key each scan continues after, and a number it did not
//! issue is looked up at the other nodes: a client may continue a scan on any node, as it
//! may on any Redis replica.
//!
//! Numbers are unique across the cluster and across restarts: each process starts at a
//! random place in [1, 2^52), so no node ever reads another node's (or its own earlier
//! life's) cursor as one of its own — which would continue some other scan and skip keys.
//! They stay below 2^53, which every client holds exactly (JavaScript's numbers too).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use firn_model::FirnError;
use serde::{Deserialize, Serialize};

use crate::exec::Kernel;
use crate::rpc::rpc;

/// Most live cursors a node remembers; the oldest is forgotten first.
pub const SCAN_CURSORS_MAX: usize = 65_536;

/// How long a node waits for the others to say whose cursor a number is.
const CURSOR_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Cursors stay below this: exact in every client's numbers.
const CURSOR_END: u64 = 1 << 53;

/// Where a process starts numbering: anywhere below half the space.
const CURSOR_START_SPAN: u64 = 1 << 52;

/// This node's cursors, and the way to the others'.
pub struct ScanCursors {
    kernel: Arc<Kernel>,
    table: Mutex<CursorTable>,
}

/// "Which key does cursor N continue after?", asked of the node that may have issued it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScanCursor(pub u64);

rpc! {
    ScanCursor => Option<Bytes>;
}

impl ScanCursors {
    pub fn new(kernel: Arc<Kernel>) -> Self {
        ScanCursors {
            kernel,
            table: Mutex::new(CursorTable::starting_at(random_start())),
        }
    }

    /// A new cursor for a scan that continues after `key`.
    pub fn issue(&self, key: Bytes) -> u64 {
        self.table().insert(key)
    }

    /// The key a cursor this node issued continues after, if it still remembers it.
    pub fn local(&self, cursor: u64) -> Option<Bytes> {
        self.table().by_id.get(&cursor).cloned()
    }

    /// The key `cursor` continues after, wherever it was issued; `invalid cursor` when no
    /// node that answers remembers it.
    pub async fn resolve(&self, cursor: u64) -> Result<Bytes, FirnError> {
        if let Some(key) = self.local(cursor) {
            return Ok(key);
        }
        let me = self.kernel.node_id();
        let layout = self.kernel.layout();
        let asks = layout.nodes.keys().filter(|&&id| id != me).map(|&id| {
            let peers = self.kernel.peers();
            async move {
                peers
                    .call_within(id, ScanCursor(cursor), CURSOR_LOOKUP_TIMEOUT)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::debug!(node = id, "a SCAN cursor lookup went unanswered: {e}");
                        None
                    })
            }
        });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .next()
            .ok_or_else(|| FirnError::BadArgument("invalid cursor".into()))
    }

    fn table(&self) -> std::sync::MutexGuard<'_, CursorTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A random first cursor number in [1, 2^52).
fn random_start() -> u64 {
    let mut bytes = [0u8; 8];
    if let Err(e) = getrandom::fill(&mut bytes) {
        tracing::warn!("no randomness for SCAN cursors, numbering from the clock: {e}");
        bytes = firn_model::hlc::system_wall_us().to_le_bytes();
    }
    u64::from_le_bytes(bytes) % (CURSOR_START_SPAN - 1) + 1
}

/// Cursor numbers and the keys they stand for, the newest [`SCAN_CURSORS_MAX`].
struct CursorTable {
    next: u64,
    by_id: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
}

impl CursorTable {
    fn starting_at(next: u64) -> Self {
        CursorTable {
            next,
            by_id: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn insert(&mut self, key: Bytes) -> u64 {
        let id = self.next;
        self.next = if id + 1 >= CURSOR_END { 1 } else { id + 1 };
        self.by_id.insert(id, key);
        self.order.push_back(id);
        while self.order.len() > SCAN_CURSORS_MAX {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_nonzero_below_half_the_space_and_differ() {
        let starts: Vec<u64> = (0..64).map(|_| random_start()).collect();
        assert!(starts.iter().all(|&s| (1..CURSOR_START_SPAN).contains(&s)));
        let mut distinct = starts.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), starts.len(), "{starts:?}");
    }

    #[test]
    fn numbers_are_never_zero_and_the_oldest_is_forgotten() {
        let mut t = CursorTable::starting_at(CURSOR_END - 1);
        let a = t.insert(Bytes::from_static(b"a"));
        let b = t.insert(Bytes::from_static(b"b"));
        assert_eq!((a, b), (CURSOR_END - 1, 1), "wraps to 1, never 0");
        for i in 0..SCAN_CURSORS_MAX {
            t.insert(Bytes::from(i.to_string()));
        }
        assert!(!t.by_id.contains_key(&a) && !t.by_id.contains_key(&b));
        assert_eq!(t.by_id.len(), SCAN_CURSORS_MAX);
    }
}
