//! Reads of the log: a tag's page from its shard, merged with its other homes' at one closed
//! time; the local index in front; blocking reads; XREAD; a tag's info.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firn_model::log::LOG_BLOCK_MS_MAX;
use firn_model::{
    Answer, CallContext, CommitTs, FirnError, Key, LogPage, LogQuery, LogRead, LogRecord, LogSeq,
    ReadConsistency, Response, Staleness, TagInfo,
};
use firn_raft::ShardId;

use futures::future::BoxFuture;

use super::Log;
use super::index::{Finality, Lookup, TierAnswer};
use crate::exec::check_page;
use crate::rpc::{LogShardRead, ShardPart};

/// How often a blocked read whose tag's shard is held elsewhere asks again.
const BLOCK_POLL: Duration = Duration::from_millis(20);
/// Longest a blocked read waits on a local shard before it reads again anyway.
const BLOCK_WAKE: Duration = Duration::from_millis(200);

impl Log {
    pub(super) async fn log_read(
        &self,
        ctx: &CallContext,
        read: LogRead,
    ) -> Result<Answer, FirnError> {
        match read {
            LogRead::Query(q) => {
                check_query(&q)?;
                let staleness = self.log_staleness(&q);
                let records = self.query_blocking(ctx, &q).await?;
                let mut answer = Answer::new(Response::Records(records));
                answer.staleness = staleness;
                Ok(answer)
            }
            LogRead::Streams {
                after,
                limit,
                block_ms,
            } => {
                check_page(limit)?;
                check_block(block_ms)?;
                self.read_streams(ctx, after, limit, block_ms).await
            }
            LogRead::Info {
                log,
                tag,
                consistency,
            } => {
                let read = |r: LogShardRead| LogShardRead {
                    limit: 0,
                    ends: true,
                    consistency,
                    ..r
                };
                let (pages, _) = self.tag_pages(ctx, &log, &tag, read, None).await?;
                Ok(Answer::new(Response::TagInfo(merge_info(
                    pages.into_iter().filter_map(|(_, p)| p.info),
                ))))
            }
            LogRead::Tags { cursor, limit, at } => {
                check_page(limit)?;
                self.log_tags(ctx, cursor, limit, at).await
            }
        }
    }

    /// How stale a `local` query may be: the tag's replica here had applied everything up
    /// to its newest stamp before the read (measured before it reads). A shard held
    /// elsewhere is read on its leader; a read at a time is not stale.
    fn log_staleness(&self, q: &LogQuery) -> Option<Staleness> {
        if q.consistency != ReadConsistency::Local || q.at.is_some() {
            return None;
        }
        let shard = self.kernel.layout().shard_of_name(q.tag.as_bytes());
        let applied_through = self.kernel.replicas().get(shard)?.store().last_commit_ts();
        let now = firn_model::hlc::system_wall_us();
        Some(Staleness {
            applied_through,
            at_most_us: now.saturating_sub(applied_through.wall_us),
        })
    }

    /// A query, waiting (as its `block_ms` says) for a record when none matches yet.
    async fn query_blocking(
        &self,
        ctx: &CallContext,
        q: &LogQuery,
    ) -> Result<Vec<LogRecord>, FirnError> {
        let deadline = deadline(q.block_ms);
        let shard = self
            .kernel
            .routable_layout()?
            .shard_of_name(q.tag.as_bytes());
        loop {
            let mut applied = self
                .kernel
                .replicas()
                .get(shard)
                .map(|r| r.store().applied_watch());
            let records = self.query(ctx, q).await?;
            if !records.is_empty()
                || deadline.is_none_or(|d| d.is_some_and(|d| Instant::now() >= d))
            {
                return Ok(records);
            }
            wait_for_more(applied.as_mut(), deadline.flatten()).await;
        }
    }

    /// One query: from this node's log index when it knows the answer, else the tag's
    /// shard and every home its directory names, merged (and the index learns from it).
    pub(crate) async fn query(
        &self,
        ctx: &CallContext,
        q: &LogQuery,
    ) -> Result<Vec<LogRecord>, FirnError> {
        let ticket = match self.index.lookup(q) {
            Lookup::Hit(records) => return Ok(records),
            Lookup::Miss(ticket) => Some(ticket),
            Lookup::Bypass => None,
        };
        let read = |r: LogShardRead| r;
        let (pages, closed_at) = self.tag_pages(ctx, &q.log, &q.tag, read, Some(q)).await?;
        let finality = Finality::of(closed_at, pages[0].1.info.as_ref());
        let first_kept = pages
            .iter()
            .filter_map(|(_, p)| p.info.as_ref().map(|i| i.first_kept))
            .max()
            .unwrap_or_default();
        let tag_known = pages.iter().any(|(_, p)| p.info.is_some());
        let mut records: Vec<LogRecord> = pages.into_iter().flat_map(|(_, p)| p.records).collect();
        if q.reverse {
            records.sort_by_key(|r| std::cmp::Reverse(r.seq));
        } else {
            records.sort_by_key(|r| r.seq);
        }
        records.truncate(q.limit);
        if q.stream {
            return Ok(records);
        }
        // Below the trim point the answer is unknowable: say so, and where the log starts.
        let below = if q.reverse {
            q.to < first_kept && q.to != LogSeq::MAX
        } else {
            q.from < first_kept && !q.from_start
        };
        if first_kept > LogSeq::ZERO && below {
            return Err(FirnError::Trimmed { first_kept });
        }
        if records.is_empty() && !tag_known && !self.log_known(ctx, &q.log).await? {
            return Err(FirnError::LogNotFound(q.log.to_string()));
        }
        if let (Some(ticket), Some(finality)) = (ticket, finality) {
            let answer = TierAnswer {
                records: &records,
                first_kept,
                finality,
            };
            self.index.learn(ticket, q, answer);
        }
        Ok(records)
    }

    /// Reads one page of `tag` from the tag's shard and from every other home its directory
    /// names. With other homes, every page is read at one closed time (`q.at`, or now), so
    /// that no record can still arrive below the merged answer's newest seq; that time is
    /// returned with the pages (`None`: the tag's shard alone, read as `shape` asked).
    pub(super) async fn tag_pages(
        &self,
        ctx: &CallContext,
        log: &Key,
        tag: &Key,
        shape: impl Fn(LogShardRead) -> LogShardRead,
        q: Option<&LogQuery>,
    ) -> Result<(Vec<(ShardId, LogPage)>, Option<CommitTs>), FirnError> {
        let layout = self.kernel.routable_layout()?;
        let primary = layout.shard_of_name(tag.as_bytes());
        let base = shape(LogShardRead {
            log: log.clone(),
            tag: tag.clone(),
            from: q.map_or(LogSeq::ZERO, |q| q.from),
            to: q.map_or(LogSeq::MAX, |q| q.to),
            limit: q.map_or(0, |q| q.limit),
            reverse: q.is_some_and(|q| q.reverse),
            at: q.and_then(|q| q.at),
            consistency: q.map_or(ReadConsistency::Linearizable, |q| q.consistency),
            ends: false,
            close: false,
        });
        let first = self.log_page(primary, base.clone(), ctx).await?;
        let mut homes: Vec<ShardId> = others(&first, primary);
        let mut pages = vec![(primary, first)];
        if homes.is_empty() {
            return Ok((pages, None));
        }
        // Other homes: one closed time for every page, the tag's shard's again included
        // (its directory read at that time may name more homes; read those too).
        let now = self.kernel.read_now()?;
        let at = base
            .at
            .unwrap_or_else(|| now.max(ctx.after.unwrap_or_default()));
        loop {
            let mut shards = vec![primary];
            shards.extend(homes.iter().copied());
            // A linearizable read at now asks each leader to close now, rather than wait
            // up to the close interval (and a follower's heartbeat) for it.
            let read = LogShardRead {
                at: Some(at),
                close: base.at.is_none() && base.consistency != ReadConsistency::Local,
                ..base.clone()
            };
            let results = futures::future::join_all(
                shards.iter().map(|s| self.log_page(*s, read.clone(), ctx)),
            )
            .await;
            pages = shards
                .into_iter()
                .zip(results)
                .map(|(s, r)| r.map(|p| (s, p)))
                .collect::<Result<_, _>>()?;
            let named = others(&pages[0].1, primary);
            if named.iter().all(|h| homes.contains(h)) {
                return Ok((pages, Some(at)));
            }
            homes = named;
        }
    }

    /// Whether anything was ever appended to `log` (its name's shard knows).
    /// Whether the stream `key` exists (its tag has an entry count, an empty stream's too).
    pub(crate) async fn stream_exists(
        &self,
        ctx: &CallContext,
        key: &Key,
    ) -> Result<bool, FirnError> {
        Ok(self.look_at(ctx, key).await?.info.is_some())
    }

    pub(super) async fn log_known(&self, ctx: &CallContext, log: &Key) -> Result<bool, FirnError> {
        Ok(self.look_at(ctx, log).await?.log_known)
    }

    /// An empty page of `log` under its own name as tag (a stream's key): what the shard of
    /// its name knows of the log and of that tag.
    async fn look_at(&self, ctx: &CallContext, log: &Key) -> Result<LogPage, FirnError> {
        let shard = self.kernel.routable_layout()?.shard_of_name(log.as_bytes());
        let probe = LogShardRead {
            log: log.clone(),
            tag: log.clone(),
            from: LogSeq::ZERO,
            to: LogSeq::ZERO,
            limit: 0,
            reverse: false,
            at: None,
            consistency: ReadConsistency::Linearizable,
            ends: false,
            close: false,
        };
        self.log_page(shard, probe, ctx).await
    }

    /// One shard's page, read here or where the shard is held.
    async fn log_page(
        &self,
        shard: ShardId,
        read: LogShardRead,
        ctx: &CallContext,
    ) -> Result<LogPage, FirnError> {
        let answer = self
            .kernel
            .on_shard(shard, ShardPart::LogRead(read), ctx.clone(), 0)
            .await
            .await?;
        match answer.response {
            Response::LogPage(page) => Ok(page),
            other => Err(FirnError::Internal(format!(
                "a log read answered {other:?}"
            ))),
        }
    }

    /// Serves a page of a tag on this node's replica (see [`Log::serve_page`]); a read
    /// that closes its time runs on the shard's leader: the part goes back to be forwarded.
    pub(crate) fn page_here<'a>(
        &'a self,
        replica: &'a Arc<firn_raft::ShardReplica>,
        read: LogShardRead,
        ctx: &'a CallContext,
    ) -> Result<BoxFuture<'a, Result<Answer, FirnError>>, Box<ShardPart>> {
        if read.close && replica.leader() != Some(self.kernel.node_id()) {
            return Err(Box::new(ShardPart::LogRead(read)));
        }
        Ok(Box::pin(self.serve_page(replica, read, ctx)))
    }

    /// Serves a page of a tag on this node's replica: at a closed time with no barrier, or
    /// after the barrier its consistency asks for.
    async fn serve_page(
        &self,
        replica: &Arc<firn_raft::ShardReplica>,
        read: LogShardRead,
        ctx: &CallContext,
    ) -> Result<Answer, FirnError> {
        match read.at {
            Some(t) => {
                if read.close {
                    replica.close_through(t).await?;
                }
                self.kernel.wait_closed(replica, t).await?
            }
            None => {
                if let Some(t) = ctx.after
                    && read.consistency == ReadConsistency::Local
                {
                    self.kernel.wait_closed(replica, t).await?;
                }
                self.kernel
                    .barrier_for(replica.shard_id(), read.consistency)
                    .await?;
            }
        }
        let replica = replica.clone();
        let page = tokio::task::spawn_blocking(move || {
            replica.store().log_page(
                read.log.as_bytes(),
                read.tag.as_bytes(),
                read.from,
                read.to,
                read.limit,
                read.reverse,
                read.at,
                read.ends,
            )
        })
        .await
        .map_err(|e| FirnError::Internal(format!("a log read stopped: {e}")))??;
        Ok(Answer::new(Response::LogPage(page)))
    }

    /// XREAD: every stream's entries after its id; blocks until one has any.
    async fn read_streams(
        &self,
        ctx: &CallContext,
        after: Vec<(Key, Option<LogSeq>)>,
        limit: usize,
        block_ms: Option<u64>,
    ) -> Result<Answer, FirnError> {
        // `$` is the stream's last id when the read begins.
        let mut from = Vec::with_capacity(after.len());
        for (key, id) in after {
            let id = match id {
                Some(id) => id,
                None => {
                    let read = |r: LogShardRead| LogShardRead { limit: 0, ..r };
                    let (pages, _) = self.tag_pages(ctx, &key, &key, read, None).await?;
                    merge_info(pages.into_iter().filter_map(|(_, p)| p.info))
                        .map(|i| i.last_seq)
                        .unwrap_or_default()
                }
            };
            from.push((key, id));
        }
        let deadline = deadline(block_ms);
        let layout = self.kernel.routable_layout()?;
        loop {
            // Wake on the first local shard among them; others are polled.
            let mut applied = self
                .kernel
                .first_local_applied(&layout, from.iter().map(|(k, _)| k));
            let mut found = Vec::new();
            for (key, id) in &from {
                let Some(start) = id.successor() else {
                    continue;
                };
                let q = LogQuery::stream(key.clone(), start, LogSeq::MAX, limit, false);
                let records = self.query(ctx, &q).await?;
                if !records.is_empty() {
                    found.push((key.clone(), records));
                }
            }
            if !found.is_empty() || deadline.is_none_or(|d| d.is_some_and(|d| Instant::now() >= d))
            {
                return Ok(Answer::new(Response::Streams(found)));
            }
            wait_for_more(applied.as_mut(), deadline.flatten()).await;
        }
    }
}

/// The homes a page's directory names besides the tag's own shard.
fn others(page: &LogPage, primary: ShardId) -> Vec<ShardId> {
    page.homes
        .iter()
        .copied()
        .filter(|h| *h != primary)
        .collect()
}

/// `None`: do not block; `Some(None)`: block without end; `Some(Some(t))`: until `t`.
pub(crate) fn deadline(block_ms: Option<u64>) -> Option<Option<Instant>> {
    block_ms.map(|ms| (ms > 0).then(|| Instant::now() + Duration::from_millis(ms)))
}

/// Waits until a local shard applies something (or a poll interval for remote ones), never
/// past `deadline`.
pub(crate) async fn wait_for_more(
    applied: Option<&mut tokio::sync::watch::Receiver<CommitTs>>,
    deadline: Option<Instant>,
) {
    let pause = match applied {
        Some(_) => BLOCK_WAKE,
        None => BLOCK_POLL,
    };
    let until = deadline.map_or(Instant::now() + pause, |d| d.min(Instant::now() + pause));
    let until = tokio::time::Instant::from_std(until);
    match applied {
        Some(rx) => {
            let _ = tokio::time::timeout_at(until, rx.changed()).await;
        }
        None => tokio::time::sleep_until(until).await,
    }
}

pub(crate) fn check_block(block_ms: Option<u64>) -> Result<(), FirnError> {
    if block_ms.is_some_and(|ms| ms > LOG_BLOCK_MS_MAX) {
        return Err(FirnError::BadArgument(format!(
            "BLOCK is at most {LOG_BLOCK_MS_MAX} ms (0 waits without end)"
        )));
    }
    Ok(())
}

fn check_query(q: &LogQuery) -> Result<(), FirnError> {
    check_page(q.limit)?;
    check_block(q.block_ms)?;
    if q.block_ms.is_some() && q.at.is_some() {
        return Err(FirnError::BadArgument(
            "a read at a time cannot block: nothing new arrives in the past".into(),
        ));
    }
    Ok(())
}

/// The tag as a whole, from each home's account of it.
fn merge_info(infos: impl Iterator<Item = TagInfo>) -> Option<TagInfo> {
    infos.reduce(|a, b| TagInfo {
        len: a.len + b.len,
        first: match (a.first, b.first) {
            (Some(x), Some(y)) => Some(if x.seq <= y.seq { x } else { y }),
            (x, y) => x.or(y),
        },
        last: match (a.last, b.last) {
            (Some(x), Some(y)) => Some(if x.seq >= y.seq { x } else { y }),
            (x, y) => x.or(y),
        },
        last_seq: a.last_seq.max(b.last_seq),
        added: a.added + b.added,
        groups: a.groups.max(b.groups),
        max_deleted: a.max_deleted.max(b.max_deleted),
        first_kept: a.first_kept.max(b.first_kept),
    })
}
