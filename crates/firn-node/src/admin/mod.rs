//! Admin requests: keyspace definitions. Their home is the layout in the meta group: a
//! definition is decided there first, then written to every shard's log (whose apply needs
//! it), and the list is read from there. The steward finishes a fan-out that fails
//! part-way.

use bytes::Bytes;
use firn_model::{
    AdminRequest, Answer, Durability, FirnError, KeyspaceDef, KeyspaceSpec, KvRead, KvRequest,
    ReadAt, ReadConsistency, Response,
};
use firn_store::Op;
use firn_store::SystemOp;

use std::sync::Arc;

use crate::cluster::layout::keyspace_among;
use crate::exec::Kernel;
use crate::rpc::{MetaChange, ShardPart};

/// Longest a keyspace definition waits for this node to follow it (the layout is polled
/// every 200 ms); past it the answer goes out anyway — the definition stands.
const PLACEMENT_FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Longest a definition waits for a shard to take it (memory shards added by it elect
/// their first leaders meanwhile); past it the steward finishes the fan-out.
const SHARD_START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Admin requests: keyspace definitions and this node's local-read region.
pub struct Admin {
    kernel: Arc<Kernel>,
}

impl Admin {
    pub fn new(kernel: Arc<Kernel>) -> Self {
        Admin { kernel }
    }

    pub async fn run(&self, request: AdminRequest) -> Result<Answer, FirnError> {
        let name = request.name();
        metrics::counter!("firn_requests_total", "op" => name).increment(1);
        let result = match request {
            AdminRequest::KeyspaceList => self
                .kernel
                .meta()
                .keyspaces()
                .await
                .map(|defs| Answer::new(Response::KeyspaceDefs(defs))),
            AdminRequest::KeyspaceCreate(def) => {
                def.spec.validate()?;
                self.check_pin(&def)?;
                let op = Op::System(SystemOp::KeyspaceCreate(def.spec.clone()));
                self.define(def, false, op).await
            }
            AdminRequest::Watermark(request) => self.kernel.watermark(request).await,
            AdminRequest::LocalRegion => match self.kernel.replicas().local_region() {
                Some(region) => Ok(Answer::new(Response::LocalRegion(region.info()))),
                None => Err(FirnError::Refused(
                    "local reads are off on this node (it was started with --local-region off)"
                        .into(),
                )),
            },
            AdminRequest::KeyspaceDrop { prefix } => {
                let spec = KeyspaceSpec {
                    prefix: prefix.clone(),
                    ..KeyspaceSpec::default_keyspace()
                };
                self.define(
                    KeyspaceDef::new(spec),
                    true,
                    Op::System(SystemOp::KeyspaceDrop { prefix }),
                )
                .await
            }
        };
        if result.is_err() {
            metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
        }
        result
    }

    /// Refuses `FOLLOW n` for a node the cluster does not have: its leaders would have
    /// nowhere to go.
    fn check_pin(&self, def: &KeyspaceDef) -> Result<(), FirnError> {
        let firn_model::Follow::Pin(node) = def.placement.follow else {
            return Ok(());
        };
        let layout = self.kernel.routable_layout()?;
        if layout.nodes.contains_key(&node) {
            return Ok(());
        }
        let nodes: Vec<String> = layout.nodes.keys().map(|n| n.to_string()).collect();
        Err(FirnError::BadArgument(format!(
            "FOLLOW {node}: the cluster has no node {node} (its nodes: {})",
            nodes.join(", ")
        )))
    }

    /// Records a definition in the layout, then has every shard apply it.
    async fn define(&self, def: KeyspaceDef, drop: bool, op: Op) -> Result<Answer, FirnError> {
        self.kernel.routable_layout()?;
        self.refuse_stranding(&def.spec, drop).await?;
        let (spec, placement) = (def.spec.clone(), def.placement);
        let memory = !drop && def.spec.durability == Durability::Memory;
        self.kernel
            .meta()
            .change(MetaChange::Keyspace { def, drop })
            .await?;
        // This node follows the new layout before it answers (others within a layout poll):
        // its next request sees the definition, a client's next write here is published if
        // the keyspace is now local, and goes to the memory shards if it is now in memory.
        let mut followed = self.kernel.layout_watch();
        let _ = tokio::time::timeout(
            PLACEMENT_FOLLOW_WAIT,
            followed.wait_for(|l| {
                let mut specs = l.keyspaces.iter().flatten();
                let listed = if drop {
                    specs.any(|s| s.prefix == spec.prefix)
                } else {
                    specs.any(|s| s == &spec)
                };
                let placed = drop || l.placement_of(&spec.prefix) == placement;
                listed != drop && placed && (!memory || l.has_memory_shards())
            }),
        )
        .await;
        let layout = self.kernel.routable_layout()?;
        let ctx = firn_model::CallContext::default();
        let deadline = tokio::time::Instant::now() + SHARD_START_WAIT;
        let started = futures::future::join_all(layout.shard_ids().map(|shard| {
            let (op, ctx) = (op.clone(), ctx.clone());
            async move {
                loop {
                    let part = ShardPart::Write(op.clone());
                    match self
                        .kernel
                        .on_shard(shard, part, ctx.clone(), 0)
                        .await
                        .await
                    {
                        // A memory shard just added may still be electing its first leader.
                        Err(FirnError::TryAgain(_) | FirnError::Unavailable(_))
                            if tokio::time::Instant::now() < deadline =>
                        {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                        r => return settled(r, drop),
                    }
                }
            }
        }))
        .await;
        started.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(Answer::new(Response::Done))
    }

    /// Refuses a definition that would move keys that exist to shards of another
    /// durability (where they would not be found): creating, redefining or dropping a
    /// keyspace that changes the durability its prefix is under needs the prefix to hold no
    /// keys, live or deleted. Judged by the definitions the meta group holds now, and
    /// checked once, before the definition: a key written under the prefix while it is
    /// being decided can still be left behind.
    async fn refuse_stranding(&self, spec: &KeyspaceSpec, drop: bool) -> Result<(), FirnError> {
        let before: Vec<KeyspaceSpec> = self
            .kernel
            .meta()
            .keyspaces()
            .await?
            .into_iter()
            .map(|d| d.spec)
            .collect();
        let mut after = before.clone();
        after.retain(|s| s.prefix != spec.prefix);
        if !drop {
            after.push(spec.clone());
        }
        let key = spec.prefix.as_bytes();
        let durability = |specs: &[KeyspaceSpec]| {
            keyspace_among(specs, key).map_or(Durability::Disk, |s| s.durability)
        };
        let (was, will_be) = (durability(&before), durability(&after));
        if was == will_be {
            return Ok(());
        }
        // One key (a deleted one too: its history would be left behind) is enough.
        let scan = KvRead::Scan {
            prefix: Bytes::copy_from_slice(key),
            cursor: None,
            limit: 1,
            pattern: None,
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        };
        let ctx = firn_model::CallContext::default();
        match self
            .kernel
            .submit_kv(&ctx, KvRequest::Read(scan))
            .await
            .await?
            .response
        {
            Response::Scan { keys, next_cursor } if keys.is_empty() && next_cursor.is_none() => {
                Ok(())
            }
            _ => Err(FirnError::Refused(format!(
                "keys with the prefix '{}' exist under {was} durability; a keyspace that \
                 changes the durability of existing keys is refused (delete them first, or \
                 choose a new prefix)",
                spec.prefix
            ))),
        }
    }
}

/// A shard's answer to a definition the layout already records. A drop that finds no such
/// keyspace on a shard found it done: the steward, which brings every shard's keyspaces in
/// line with the layout, got there first (the layout changed a moment before this write).
fn settled(answer: Result<Answer, FirnError>, drop: bool) -> Result<Answer, FirnError> {
    match answer {
        Err(FirnError::KeyspaceNotFound(_)) if drop => Ok(Answer::new(Response::Done)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_the_steward_already_made_on_a_shard_is_done_but_nothing_else_is() {
        let gone = || Err(FirnError::KeyspaceNotFound("p/".into()));
        assert!(settled(gone(), true).is_ok());
        assert!(matches!(
            settled(gone(), false),
            Err(FirnError::KeyspaceNotFound(_))
        ));
        let refused = Err(FirnError::Refused("no".into()));
        assert!(matches!(settled(refused, true), Err(FirnError::Refused(_))));
    }
}
