//! The shared log through the router. A record is stored in its *home* shard, the shard of
//! its first tag's slot, once under each of its tags; the shard of a tag's slot keeps the
//! tag's directory: the other shards that hold records of it. Appends go to the home (after
//! noting the home in the directory of each other tag, once per node); a read of a tag asks
//! the tag's shard, and when the directory names other homes, reads all of them at one
//! closed time and merges — closed time is what orders records across shards (see
//! docs/architecture.md, "The shared log"). Writes are here, reads in [`read`].

mod read;
mod tags;

pub(crate) use read::{check_block, deadline, wait_for_more};

pub mod index;

use firn_store::LogOp;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use firn_model::log::{LOG_READ_RECORDS_MAX, LOG_SHARDS_MAX};
use firn_model::{
    Answer, Appended, CallContext, CommitTs, Durability, FirnError, Key, LogRequest, LogSeq,
    LogWrite, NewRecord, Response,
};
use firn_raft::ShardId;
use firn_store::Op;

use self::index::{Forget, LogIndex};
use crate::cluster::layout::ClusterLayout;
use crate::exec::{Kernel, Pending, merge, ready, request_metrics};
use crate::rpc::ShardPart;

/// Most notes a node remembers. Past it the memory is emptied and notes are made again as
/// appends need them: a note is idempotent, so forgetting one costs only a Raft entry.
const LOG_NOTES_MAX: usize = 100_000;

/// Directory entries and logs this node knows are noted (they are never removed), so that
/// an append notes each at most once per node while it remembers them.
#[derive(Default)]
pub struct LogNotes {
    noted: Mutex<HashSet<(Key, Option<Key>, ShardId)>>,
}

impl LogNotes {
    fn contains(&self, note: &(Key, Option<Key>, ShardId)) -> bool {
        self.noted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(note)
    }

    fn insert(&self, note: (Key, Option<Key>, ShardId)) {
        let mut noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        if noted.len() >= LOG_NOTES_MAX {
            noted.clear();
        }
        noted.insert(note);
    }
}

/// The shared log: appends, reads of a tag (through the local index first), trims, the
/// tags' listing, and the Redis streams on top.
pub struct Log {
    kernel: Arc<Kernel>,
    /// The log's notes this node knows are made.
    notes: LogNotes,
    /// The local log index in front of the shards that index tags.
    index: Arc<LogIndex>,
}

impl Log {
    /// The log over `kernel`, with a local index of at most `index_bytes` (0: off).
    pub fn new(kernel: Arc<Kernel>, index_bytes: usize) -> Self {
        Log {
            kernel,
            notes: LogNotes::default(),
            index: Arc::new(LogIndex::new(index_bytes)),
        }
    }

    /// This node's local log index.
    pub fn index(&self) -> &LogIndex {
        &self.index
    }

    pub async fn submit(&self, ctx: &CallContext, request: LogRequest) -> Pending {
        let name = match &request {
            LogRequest::Read(r) => r.name(),
            LogRequest::Write(w) => w.name(),
        };
        let metered = request_metrics::request(name);
        let pending = match request {
            LogRequest::Write(w) => self
                .log_write(ctx, w)
                .await
                .unwrap_or_else(|e| ready(Err(e))),
            LogRequest::Read(r) => ready(self.log_read(ctx, r).await),
        };
        metered.around(pending)
    }

    // ---- writes ------------------------------------------------------------------------

    async fn log_write(&self, ctx: &CallContext, write: LogWrite) -> Result<Pending, FirnError> {
        let layout = self.kernel.routable_layout()?;
        if layout.lane(Durability::Disk).len() as u32 > LOG_SHARDS_MAX {
            return Err(FirnError::Refused(format!(
                "the log supports at most {LOG_SHARDS_MAX} shards"
            )));
        }
        match write {
            LogWrite::Append { log, records } => self.append(ctx, &layout, log, records).await,
            LogWrite::StreamAdd {
                key,
                id,
                payload,
                trim,
                no_create,
            } => {
                self.kernel.limits().check_value(payload.len())?;
                let home = layout.shard_of_name(key.as_bytes());
                let op = LogOp::stream_add(key.clone(), home, id, payload, trim, no_create);
                Ok(self.on_stream_shard(ctx, &layout, &key, op).await)
            }
            LogWrite::StreamTrim { key, trim } => {
                let op = LogOp::StreamTrim {
                    key: key.clone(),
                    trim,
                };
                Ok(self.on_stream_shard(ctx, &layout, &key, op).await)
            }
            LogWrite::StreamDel { key, ids } => {
                if ids.is_empty() || ids.len() > LOG_READ_RECORDS_MAX {
                    return Err(FirnError::BadArgument(format!(
                        "XDEL takes 1 to {LOG_READ_RECORDS_MAX} ids"
                    )));
                }
                let op = LogOp::StreamDel {
                    key: key.clone(),
                    ids,
                };
                Ok(self.on_stream_shard(ctx, &layout, &key, op).await)
            }
            LogWrite::Trim { log, tag, before } => self.trim(ctx, &layout, log, tag, before).await,
        }
    }

    /// A stream's write, on the shard of the stream's key.
    async fn on_stream_shard(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        key: &Key,
        op: LogOp,
    ) -> Pending {
        let home = layout.shard_of_name(key.as_bytes());
        self.kernel
            .on_shard(home, ShardPart::Write(Op::Log(op)), ctx.clone(), 0)
            .await
    }

    /// FIRN.LOG APPEND: the records grouped by home, each home noted in the directory of the
    /// records' other tags first; one append per home, all at once; the seqs back in the
    /// records' order.
    async fn append(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        log: Key,
        records: Vec<NewRecord>,
    ) -> Result<Pending, FirnError> {
        self.kernel.limits().check_records(&records)?;
        let mut ctx = ctx.clone();
        if let Some(at) = self
            .note_appends(layout, [(&log, records.as_slice())])
            .await?
        {
            ctx.after = ctx.after.max(Some(at));
        }
        let mut homes: BTreeMap<ShardId, Vec<(usize, NewRecord)>> = BTreeMap::new();
        for (i, record) in records.into_iter().enumerate() {
            let home = layout.shard_of_name(record.tags[0].as_bytes());
            homes.entry(home).or_default().push((i, record));
        }
        let mut started = Vec::with_capacity(homes.len());
        let mut order = Vec::with_capacity(homes.len());
        for (home, group) in homes {
            let (positions, records): (Vec<usize>, Vec<NewRecord>) = group.into_iter().unzip();
            let op = Op::Log(LogOp::Append {
                log: log.clone(),
                home,
                records,
                stream: None,
            });
            started.push(
                self.kernel
                    .on_shard(home, ShardPart::Write(op), ctx.clone(), 0)
                    .await,
            );
            order.push(positions);
        }
        Ok(Box::pin(async move {
            let answers = futures::future::join_all(started).await;
            let answers = merge::write_parts(answers)?;
            let total = order.iter().map(Vec::len).sum();
            let mut out = vec![None; total];
            for (answer, positions) in answers.into_iter().zip(order) {
                let Response::Appended(appended) = answer.response else {
                    return Err(FirnError::Internal("an append answered no seqs".into()));
                };
                for (p, a) in positions.into_iter().zip(appended) {
                    out[p] = Some(a);
                }
            }
            let out: Option<Vec<Appended>> = out.into_iter().collect();
            out.map(|a| Answer::new(Response::Appended(a)))
                .ok_or_else(|| FirnError::Internal("an append lost a seq".into()))
        }))
    }

    /// FIRN.LOG TRIM: of one tag (checked against its tail) on the shards holding it, or of
    /// every tag on every disk shard; the log index forgets what went, once the trims answer.
    async fn trim(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        log: Key,
        tag: Option<Key>,
        before: LogSeq,
    ) -> Result<Pending, FirnError> {
        // A trim of every tag notes its point in the log's own entry, which would
        // make a log nothing was appended to known: refuse it instead.
        if !self.log_known(ctx, &log).await? {
            return Err(FirnError::LogNotFound(log.to_string()));
        }
        let shards: Vec<ShardId> = match &tag {
            Some(tag) => {
                let (pages, _) = self.tag_pages(ctx, &log, tag, |r| r, None).await?;
                let tail = pages
                    .iter()
                    .filter_map(|(_, p)| p.info.as_ref().map(|i| i.last_seq))
                    .max()
                    .unwrap_or_default();
                check_trim(before, tail)?;
                pages.into_iter().map(|(s, _)| s).collect()
            }
            None => {
                // A whole log's tail is spread over every shard; its bound is now.
                let now = LogSeq::from_stamp(
                    CommitTs::new(firn_model::hlc::system_wall_us(), u32::MAX),
                    LOG_SHARDS_MAX - 1,
                );
                check_trim(before, now)?;
                layout.lane(Durability::Disk).iter().map(|s| s.id).collect()
            }
        };
        let mut started = Vec::with_capacity(shards.len());
        for shard in shards {
            let op = Op::Log(LogOp::Trim {
                log: log.clone(),
                tag: tag.clone(),
                before,
            });
            started.push(
                self.kernel
                    .on_shard(shard, ShardPart::Write(op), ctx.clone(), 0)
                    .await,
            );
        }
        let forgetting = self.forget_everywhere(Forget::Trim { log, tag, before });
        Ok(Box::pin(async move {
            let answers = futures::future::join_all(started).await;
            // Also after a failure: some shard may have trimmed, and forgetting
            // is always safe.
            forgetting.await;
            let mut removed = 0;
            for answer in answers {
                if let Response::Count(n) = answer?.response {
                    removed += n;
                }
            }
            Ok(Answer::new(Response::Count(removed)))
        }))
    }

    /// Makes the notes appends of `records` to their logs need before they are proposed:
    /// the log's own (it exists), and each record's home in the directory of its other
    /// tags — a reader of such a tag then finds the home before any record there is
    /// committed. Answers the newest stamp a note was made at: the appends go after it, so
    /// their records are stamped above their notes. An append inside a transaction needs
    /// them too ([`Self::note_transaction_appends`]).
    pub async fn note_appends<'r>(
        &self,
        layout: &ClusterLayout,
        appends: impl IntoIterator<Item = (&'r Key, &'r [NewRecord])>,
    ) -> Result<Option<CommitTs>, FirnError> {
        let mut notes = Vec::new();
        for (log, records) in appends {
            notes.push((log.clone(), None, layout.shard_of_name(log.as_bytes())));
            for record in records {
                let Some((first, others)) = record.tags.split_first() else {
                    continue;
                };
                let home = layout.shard_of_name(first.as_bytes());
                for tag in others {
                    if layout.shard_of_name(tag.as_bytes()) != home {
                        notes.push((log.clone(), Some(tag.clone()), home));
                    }
                }
            }
        }
        notes.sort();
        notes.dedup();
        let mut newest = None;
        for note in notes {
            newest = newest.max(self.note(layout, note).await?);
        }
        Ok(newest)
    }

    /// [`Self::note_appends`] for the log appends among a transaction's steps.
    pub async fn note_transaction_appends(
        &self,
        layout: &ClusterLayout,
        steps: Vec<&firn_model::TxnStep>,
    ) -> Result<Option<CommitTs>, FirnError> {
        let appends = steps.into_iter().filter_map(|step| match step {
            firn_model::TxnStep::Log(LogWrite::Append { log, records }) => {
                Some((log, records.as_slice()))
            }
            _ => None,
        });
        self.note_appends(layout, appends).await
    }

    /// Makes sure a note is in place: `(log, None, shard)` that the log exists, on the
    /// shard of its name; `(log, Some(tag), home)` that `home` holds records of `tag`, in
    /// the tag's directory. Returns the stamp it was noted at (`None`: known noted).
    async fn note(
        &self,
        layout: &crate::cluster::layout::ClusterLayout,
        note: (Key, Option<Key>, ShardId),
    ) -> Result<Option<CommitTs>, FirnError> {
        if self.notes.contains(&note) {
            return Ok(None);
        }
        let (log, tag, home) = note.clone();
        let (shard, op) = match &tag {
            None => (
                home,
                Op::Log(LogOp::Ensure {
                    log,
                    tag: None,
                    home: None,
                }),
            ),
            Some(t) => (
                layout.shard_of_name(t.as_bytes()),
                Op::Log(LogOp::Ensure {
                    log,
                    tag: tag.clone(),
                    home: Some(home),
                }),
            ),
        };
        let answer = self
            .kernel
            .on_shard(shard, ShardPart::Write(op), CallContext::default(), 0)
            .await
            .await?;
        self.notes.insert(note);
        Ok(answer.response.newest_stamp())
    }

    /// Once a trim or FLUSHALL has committed: every node of the layout forgets in its log
    /// index what the write removed (see [`index`]).
    pub(crate) fn forget_everywhere(
        &self,
        forget: Forget,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let nodes = self.kernel.layout().nodes.keys().copied().collect();
        index::forget_everywhere(
            self.index.clone(),
            self.kernel.peers().clone(),
            self.kernel.node_id(),
            nodes,
            forget,
        )
    }
}

fn check_trim(before: LogSeq, tail: LogSeq) -> Result<(), FirnError> {
    let limit = tail.successor().unwrap_or(LogSeq::MAX);
    if before > limit {
        return Err(FirnError::BadArgument(format!(
            "cannot trim before {before}: it is beyond the tail ({tail})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn note(i: usize) -> (Key, Option<Key>, ShardId) {
        let key = |s: String| Key::new(Bytes::from(s)).unwrap();
        (key("log".into()), Some(key(format!("tag{i}"))), 1)
    }

    #[test]
    fn notes_remembered_stay_within_their_bound() {
        let notes = LogNotes::default();
        for i in 0..=LOG_NOTES_MAX {
            notes.insert(note(i));
        }
        let held = notes.noted.lock().unwrap().len();
        assert!(held <= LOG_NOTES_MAX, "{held} notes held");
        assert!(
            notes.contains(&note(LOG_NOTES_MAX)),
            "the newest note is remembered"
        );
    }
}
