//! The listing of what every log holds (`LogRead::Tags`): each shard of the log's lane
//! lists a page of its (log, tag) rows after one cursor, and the pages are merged the way a
//! scan's are — cut where every shard's page is complete — with a tag held in several
//! shards (its own, and homes of its records) made one row.

use std::sync::Arc;

use bytes::Bytes;
use firn_model::{Answer, CallContext, CommitTs, Durability, FirnError, Response, TagListing};
use firn_store::store::log::tags::tag_cursor;

use super::Log;
use crate::rpc::{LogTagsRead, ShardPart};

impl Log {
    /// A page of every log's tags after `cursor`, at most `limit`, read at `at` (every
    /// shard closed it first) or after a barrier on each shard.
    pub(super) async fn log_tags(
        &self,
        ctx: &CallContext,
        cursor: Option<Bytes>,
        limit: usize,
        at: Option<CommitTs>,
    ) -> Result<Answer, FirnError> {
        let layout = self.kernel.routable_layout()?;
        let read = LogTagsRead {
            after: cursor,
            limit,
            at,
        };
        // Logs live in the disk lane only (a record's home is the shard of its first tag's
        // slot there).
        let shards: Vec<_> = layout.lane(Durability::Disk).iter().map(|s| s.id).collect();
        let pending = futures::future::join_all(shards.iter().map(|s| {
            self.kernel
                .on_shard(*s, ShardPart::LogTags(read.clone()), ctx.clone(), 0)
        }))
        .await;
        let mut pages = Vec::with_capacity(pending.len());
        for answer in futures::future::join_all(pending).await {
            match answer?.response {
                Response::LogTags { tags, next_cursor } => pages.push((tags, next_cursor)),
                other => {
                    return Err(FirnError::Internal(format!(
                        "a log listing answered {other:?}"
                    )));
                }
            }
        }
        let (tags, next_cursor) = merge_pages(pages, limit);
        Ok(Answer::new(Response::LogTags { tags, next_cursor }))
    }

    /// Serves one shard's page of the listing on this node's replica.
    pub(crate) async fn tags_here(
        &self,
        replica: &Arc<firn_raft::ShardReplica>,
        read: LogTagsRead,
    ) -> Result<Answer, FirnError> {
        match read.at {
            Some(t) => self.kernel.wait_closed(replica, t).await?,
            None => self.kernel.barrier(replica.shard_id(), false).await?,
        }
        let replica = replica.clone();
        let (tags, next_cursor) = tokio::task::spawn_blocking(move || {
            replica
                .store()
                .log_tags(replica.shard_id(), read.after.as_deref(), read.limit)
        })
        .await
        .map_err(|e| FirnError::Internal(format!("a log listing stopped: {e}")))??;
        Ok(Answer::new(Response::LogTags { tags, next_cursor }))
    }
}

/// Every shard listed a page after the same cursor. Rows up to the smallest cursor a shard
/// stopped at are complete (a shard that stopped further on, or at its end, listed all of
/// its rows up to there); a tag's rows from several shards become one row; at most `limit`
/// rows go back, and the next page starts after the last.
fn merge_pages(
    pages: Vec<(Vec<TagListing>, Option<Bytes>)>,
    limit: usize,
) -> (Vec<TagListing>, Option<Bytes>) {
    let stop: Option<Bytes> = pages.iter().filter_map(|(_, next)| next.clone()).min();
    let mut rows: Vec<(Bytes, TagListing)> = pages
        .into_iter()
        .flat_map(|(tags, _)| tags)
        .map(|t| (tag_cursor(t.log.as_bytes(), t.tag.as_bytes()), t))
        .filter(|(key, _)| stop.as_ref().is_none_or(|s| key <= s))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut merged: Vec<(Bytes, TagListing)> = Vec::new();
    for (key, row) in rows {
        match merged.last_mut() {
            Some((last, into)) if *last == key => {
                into.len += row.len;
                into.last_seq = into.last_seq.max(row.last_seq);
                into.first_kept = into.first_kept.max(row.first_kept);
                into.shards.extend(row.shards);
                into.shards.sort_unstable();
            }
            _ => merged.push((key, row)),
        }
    }
    if merged.len() > limit {
        merged.truncate(limit);
        let next = merged.last().map(|(k, _)| k.clone());
        return (merged.into_iter().map(|(_, t)| t).collect(), next);
    }
    (merged.into_iter().map(|(_, t)| t).collect(), stop)
}

#[cfg(test)]
mod tests {
    use firn_model::{Key, LogSeq};

    use super::*;

    fn row(log: &str, tag: &str, len: u64, shard: u32) -> TagListing {
        let key = |s: &str| Key::new(Bytes::from(s.to_string())).unwrap();
        TagListing {
            log: key(log),
            tag: key(tag),
            len,
            last_seq: LogSeq::new(len, shard as u64),
            first_kept: LogSeq::ZERO,
            shards: vec![shard],
        }
    }

    #[test]
    fn shards_pages_merge_into_one_row_a_tag_cut_where_every_page_is_complete() {
        // Shard 0 stopped after (l, b); shard 1 listed everything it has.
        let pages = vec![
            (
                vec![row("l", "a", 2, 0), row("l", "b", 1, 0)],
                Some(tag_cursor(b"l", b"b")),
            ),
            (vec![row("l", "b", 3, 1), row("l", "c", 1, 1)], None),
        ];
        let (tags, next) = merge_pages(pages, 100);
        let names: Vec<_> = tags
            .iter()
            .map(|t| (t.tag.to_string(), t.len, t.shards.clone()))
            .collect();
        assert_eq!(
            names,
            vec![("a".into(), 2, vec![0]), ("b".into(), 4, vec![0, 1])]
        );
        assert_eq!(tags[1].last_seq, LogSeq::new(3, 1));
        // (l, c) comes again on the next page, after (l, b).
        assert_eq!(next, Some(tag_cursor(b"l", b"b")));
    }

    #[test]
    fn a_merged_page_holds_at_most_limit_rows_and_continues_after_the_last() {
        let pages = vec![
            (vec![row("l", "a", 1, 0), row("l", "c", 1, 0)], None),
            (vec![row("l", "b", 1, 1)], None),
        ];
        let (tags, next) = merge_pages(pages, 2);
        assert_eq!(tags.len(), 2);
        assert_eq!(next, Some(tag_cursor(b"l", b"b")));
        let (tags, next) = merge_pages(vec![(vec![row("l", "a", 1, 0)], None)], 2);
        assert_eq!((tags.len(), next), (1, None));
    }
}
