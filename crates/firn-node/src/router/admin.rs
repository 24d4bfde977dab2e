//! Admin requests: keyspace definitions. Their home is the layout in the meta group: a
//! definition is decided there first, then written to every shard's log (whose apply needs
//! it), and the list is read from there. The steward finishes a fan-out that fails
//! part-way.

use firn_model::{AdminRequest, Answer, FirnError, KeyspaceDef, KeyspaceSpec, Response};
use firn_store::Op;

use super::Router;
use super::merge::Merge;
use crate::rpc::{MetaChange, ShardPart};

/// Longest a keyspace definition waits for this node to follow its placement (the layout
/// is polled every 200 ms); past it the answer goes out anyway — the definition stands.
const PLACEMENT_FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Router {
    pub(super) async fn admin(&self, request: AdminRequest) -> Result<Answer, FirnError> {
        let name = request.name();
        metrics::counter!("firn_requests_total", "op" => name).increment(1);
        let result = match request {
            AdminRequest::KeyspaceList => self
                .meta
                .keyspaces()
                .await
                .map(|defs| Answer::new(Response::KeyspaceDefs(defs))),
            AdminRequest::KeyspaceCreate(def) => {
                def.spec.validate()?;
                let op = Op::KeyspaceCreate(def.spec.clone());
                self.define(def, false, op).await
            }
            AdminRequest::LocalRegion => match self.replicas.local_region() {
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
                self.define(KeyspaceDef::new(spec), true, Op::KeyspaceDrop { prefix })
                    .await
            }
        };
        if result.is_err() {
            metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
        }
        result
    }

    /// Records a definition in the layout, then has every shard apply it.
    async fn define(&self, def: KeyspaceDef, drop: bool, op: Op) -> Result<Answer, FirnError> {
        let layout = self.routable_layout()?;
        let (prefix, placement) = (def.spec.prefix.clone(), def.placement);
        self.meta.change(MetaChange::Keyspace { def, drop }).await?;
        // This node follows the new placement before it answers (others within a layout
        // poll), so a client's next write here is published if the keyspace is now local.
        let mut followed = self.layout.clone();
        let _ = tokio::time::timeout(
            PLACEMENT_FOLLOW_WAIT,
            followed.wait_for(|l| l.placement_of(&prefix) == placement),
        )
        .await;
        let ctx = firn_model::CallContext::default();
        let started = futures::future::join_all(
            layout
                .shard_ids()
                .map(|shard| self.on_shard(shard, ShardPart::Write(op.clone()), ctx.clone(), 0)),
        )
        .await;
        Merge::Truncated.all(started).await?;
        Ok(Answer::new(Response::Done))
    }
}
