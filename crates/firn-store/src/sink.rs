//! What a store tells an observer as it applies: the versions each batch committed, in log
//! order, and the time the shard is closed through after it. The node's shared-memory
//! publisher is one. A sink is called on the apply path, after the batch is durable and
//! before the batch's proposers are answered — so whatever it publishes is there before any
//! write it shows is acknowledged. It must be quick and must never fail the apply.

use firn_model::{CommitTs, WatchEvent};

use crate::VersionedStore;

pub trait AppliedSink: Send + Sync {
    /// A batch committed: `versions` in log order, then time is closed through `closed`.
    /// With `reset`, the shard's contents changed wholesale (FLUSHALL, a keyspace change, a
    /// snapshot installed): nothing the sink learned before about this store still holds.
    fn applied(
        &self,
        store: &VersionedStore,
        versions: &[WatchEvent],
        closed: CommitTs,
        reset: bool,
    );
}
