//! Admin requests: keyspace definitions. Their home is the layout in the meta group: a
//! definition is decided there first, then written to every shard's log (whose apply needs
//! it), and the list is read from there. The steward finishes a fan-out that fails
//! part-way.

use firn_model::{AdminRequest, Answer, FirnError, KeyspaceDef, KeyspaceSpec, Response};
use firn_store::Op;

use super::Router;
use super::merge::Merge;
use crate::rpc::{MetaChange, ShardPart};

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
        self.meta.change(MetaChange::Keyspace { def, drop }).await?;
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
