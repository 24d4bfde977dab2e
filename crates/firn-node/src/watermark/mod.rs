//! Event-time watermarks (docs/architecture.md, "Watermarks, late data and corrections"):
//! `FIRN.WATERMARK` and `/v1/watermarks` read, wait for, advance and set the policy of a
//! keyspace's watermark; a read by event time with `COMPLETE` waits for it. A watermark's
//! state lives in every shard (`firn_store` `store/watermark.rs`), changed by entries in
//! each shard's log, so that every replica judges a write late or not alike.

use std::time::Duration;

use firn_model::{
    Answer, CallContext, CommitTs, FirnError, KvRead, KvRequest, ReadAt, Response, WatermarkInfo,
    WatermarkPolicy, WatermarkRequest,
};
use firn_store::{Op, SystemOp, WatermarkOp};
use tokio::time::Instant;

use crate::exec::Kernel;
use crate::rpc::ShardPart;

/// How often a wait for a watermark looks again.
const WAIT_POLL: Duration = Duration::from_millis(50);
/// The longest a read with `COMPLETE` waits for its key's watermark.
pub const COMPLETE_WAIT_MAX: Duration = Duration::from_secs(10);
/// The longest `FIRN.WATERMARK … WAIT` may ask to wait.
pub const WAIT_MS_MAX: u64 = 60_000;

impl Kernel {
    pub(crate) async fn watermark(&self, request: WatermarkRequest) -> Result<Answer, FirnError> {
        self.require_keyspace(request.prefix()).await?;
        match request {
            WatermarkRequest::Get {
                prefix,
                wait_for,
                timeout_ms,
            } => {
                let deadline = Instant::now() + Duration::from_millis(timeout_ms.min(WAIT_MS_MAX));
                loop {
                    let info = self.keyspace_watermark(&prefix).await?;
                    match wait_for {
                        Some(e) if info.watermark_us.is_none_or(|w| w < e) => {
                            if Instant::now() >= deadline {
                                return Err(not_complete(&info, e));
                            }
                            tokio::time::sleep(WAIT_POLL).await;
                        }
                        _ => return Ok(Answer::new(Response::Watermark(info))),
                    }
                }
            }
            WatermarkRequest::Advance { prefix, to_us } => {
                // Refused before anything is written: no shard may hold a higher one.
                let highest = self
                    .shard_watermarks(prefix.as_bytes(), false, None)
                    .await?
                    .iter()
                    .filter_map(|i| i.state.advanced_us)
                    .max();
                if let Some(w) = highest.filter(|w| to_us < *w) {
                    return Err(FirnError::BadArgument(format!(
                        "the watermark of keyspace '{prefix}' is {w}; it never moves back \
                         (asked: {to_us})"
                    )));
                }
                self.on_every_shard(WatermarkOp::Advance { prefix, to_us })
                    .await
            }
            WatermarkRequest::Policy { prefix, policy } => {
                check_policy(&policy)?;
                self.on_every_shard(WatermarkOp::Policy { prefix, policy })
                    .await
            }
        }
    }

    /// `request` with a read by event time that waits for completeness (`COMPLETE`) turned
    /// into the bitemporal read it stands for: `EVENTTIME e ASOF t`, t the first stamp at
    /// which the key's keyspace watermark had reached e — by a writer's advance, or by the
    /// allowed lateness (e + L). Waits for the watermark at most [`COMPLETE_WAIT_MAX`].
    pub(crate) async fn complete_read(&self, request: KvRequest) -> Result<KvRequest, FirnError> {
        let KvRequest::Read(KvRead::Get {
            key,
            at: ReadAt::EventTimeComplete(e),
            consistency,
        }) = request
        else {
            return Ok(request);
        };
        let deadline = Instant::now() + COMPLETE_WAIT_MAX;
        let as_of = loop {
            let info = self
                .shard_watermarks(key.as_bytes(), true, Some(e))
                .await?
                .pop()
                .expect("one shard's answer");
            // A write stamped in microsecond e + L or later is late (e ≤ t − L): the last
            // stamp before it is where the answer is final, once the clock has passed it.
            let now = firn_model::hlc::system_wall_us();
            let by_lateness = info
                .state
                .policy
                .lateness_us
                .map(|l| CommitTs::end_of_micros(e.saturating_add(l).saturating_sub(1)))
                .filter(|t| t.wall_us < now);
            if let Some(t) = [info.reached_at, by_lateness].into_iter().flatten().min() {
                break t;
            }
            if Instant::now() >= deadline {
                return Err(not_complete(&info, e));
            }
            tokio::time::sleep(WAIT_POLL).await;
        };
        Ok(KvRequest::Read(KvRead::Get {
            key,
            at: ReadAt::EventTimeAsOf { event_us: e, as_of },
            consistency,
        }))
    }

    /// The keyspace's watermark over every shard: each shard's advance (the lowest, where a
    /// fan-out is still on its way), the policy, and the bound of the allowed lateness at
    /// this node's clock.
    async fn keyspace_watermark(&self, prefix: &str) -> Result<WatermarkInfo, FirnError> {
        let parts = self
            .shard_watermarks(prefix.as_bytes(), false, None)
            .await?;
        let advanced = parts.iter().map(|i| i.state.advanced_us).min().flatten();
        let mut info = parts.into_iter().next().unwrap_or_default();
        info.state.advanced_us = advanced;
        let now = CommitTs::end_of_micros(firn_model::hlc::system_wall_us());
        info.watermark_us = info.state.at(now);
        info.reached_at = None;
        Ok(info)
    }

    /// Each shard's watermark state of the keyspace `prefix` (or, `of_key`, of the key
    /// `prefix`'s keyspace on its shard alone), read after a barrier.
    async fn shard_watermarks(
        &self,
        prefix: &[u8],
        of_key: bool,
        reach: Option<u64>,
    ) -> Result<Vec<WatermarkInfo>, FirnError> {
        let layout = self.routable_layout()?;
        let shards: Vec<_> = if of_key {
            vec![layout.shard_of_key(prefix)]
        } else {
            layout.shard_ids().collect()
        };
        let ctx = CallContext::default();
        let asked = shards.into_iter().map(|shard| {
            let part = ShardPart::Watermark {
                prefix: bytes::Bytes::copy_from_slice(prefix),
                of_key,
                reach,
            };
            let ctx = ctx.clone();
            async move { self.on_shard(shard, part, ctx, 0).await.await }
        });
        futures::future::join_all(asked)
            .await
            .into_iter()
            .map(|answer| match answer?.response {
                Response::Watermark(info) => Ok(info),
                other => Err(FirnError::Internal(format!(
                    "a shard answered a watermark read with {other:?}"
                ))),
            })
            .collect()
    }

    /// Has every shard apply `op`, in its log.
    async fn on_every_shard(&self, op: WatermarkOp) -> Result<Answer, FirnError> {
        let layout = self.routable_layout()?;
        let ctx = CallContext::default();
        let op = Op::System(SystemOp::Watermark(op));
        let applied = layout.shard_ids().map(|shard| {
            let (part, ctx) = (ShardPart::Write(op.clone()), ctx.clone());
            async move { self.on_shard(shard, part, ctx, 0).await.await }
        });
        futures::future::join_all(applied)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Answer::new(Response::Done))
    }

    /// Refuses a prefix that is no keyspace (`""`, the default one, always is).
    async fn require_keyspace(&self, prefix: &str) -> Result<(), FirnError> {
        if prefix.is_empty()
            || self
                .meta()
                .keyspaces()
                .await?
                .iter()
                .any(|d| d.spec.prefix == prefix)
        {
            return Ok(());
        }
        Err(FirnError::KeyspaceNotFound(prefix.to_owned()))
    }
}

fn check_policy(policy: &WatermarkPolicy) -> Result<(), FirnError> {
    match policy.lateness_us {
        Some(0) => Err(FirnError::BadArgument(
            "an allowed lateness is greater than 0 (OFF: none)".into(),
        )),
        Some(l) if l > firn_model::limits::LATENESS_US_MAX => Err(FirnError::BadArgument(format!(
            "an allowed lateness is at most {} µs (a year)",
            firn_model::limits::LATENESS_US_MAX
        ))),
        _ => Ok(()),
    }
}

fn not_complete(info: &WatermarkInfo, e: u64) -> FirnError {
    FirnError::NotComplete(format!(
        "the watermark of keyspace '{}' has not reached event time {e} (it is {})",
        info.prefix,
        info.watermark_us
            .map_or_else(|| "not set".to_owned(), |w| w.to_string())
    ))
}
