//! A stream as a key of the shared log: what makes it (its version, its tag's metadata),
//! what ends it (its entries, trim state and groups), its trims and deletions, and the
//! type check every stream command makes.

use firn_model::{FirnError, Key, KeyKind, LogSeq, Response, StreamTrim};

use super::*;
use crate::record::Stored;

impl Txn<'_> {
    /// Whether the key `key` is a stream now; `WRONGTYPE` when it holds another type.
    pub(in crate::store) fn stream_key(&self, key: &Key) -> Result<bool, FirnError> {
        match self.meta(key.as_bytes())?.live_kind() {
            Some(KeyKind::Stream) => Ok(true),
            Some(_) => Err(FirnError::WrongType),
            None => Ok(false),
        }
    }

    /// Makes `key` a stream: its version saying so, the log of its name noted and its tag's
    /// metadata (kept if records were appended under it before, by `FIRN.LOG`). The key must
    /// not be live (see [`Self::stream_key`]).
    pub(in crate::store) fn make_stream(&mut self, key: &Key) -> Result<TagMeta, FirnError> {
        let durability = self.store.keyspace_durability(key.as_bytes());
        if durability != firn_model::Durability::Disk {
            return Err(FirnError::Refused(format!(
                "the key is in a {durability} keyspace; a stream is kept on disk, so name it outside \
                 every memory keyspace"
            )));
        }
        self.write_version(
            key,
            Stored::Stream,
            None,
            firn_model::WriteCondition::Always,
            false,
            firn_model::Lifetime::Kept,
        )?;
        self.note_log(key)?;
        let k = key.as_bytes();
        let meta = self.tag_meta(k, k)?.unwrap_or_default();
        self.set_tag_meta(k, k, meta.clone());
        Ok(meta)
    }

    /// Ends the stream `key`: its entries (those stored and those queued by earlier
    /// commands of this batch), its tag's metadata, and every consumer group with its
    /// pending entries, consumers and key holders. The log of its name stays known (routers
    /// remember it as made). The caller writes the key's next version.
    pub(in crate::store) fn drop_stream(&mut self, key: &Key) -> Result<(), FirnError> {
        let k = key.as_bytes();
        let tag = tag_key(k, k);
        let store = self.store;
        let mut rows = self.batch.queued_puts_under(Table::LogEntries, &tag);
        store.walk_prefix(Table::LogEntries, &tag, |row, _| {
            rows.push(row);
            Ok(())
        })?;
        for row in rows {
            self.batch.remove(Table::LogEntries, row);
        }
        self.batch.remove(Table::LogTags, tag.clone());
        self.tag_metas.insert(tag, None);
        let stream = log_prefix(k);
        for table in [
            Table::Groups,
            Table::GroupPending,
            Table::GroupConsumers,
            Table::GroupKeys,
        ] {
            store.walk_prefix(table, &stream, |row, _| {
                self.batch.remove(table, row);
                Ok(())
            })?;
        }
        Ok(())
    }

    pub(in crate::store) fn stream_trim(
        &mut self,
        key: &Key,
        trim: StreamTrim,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        self.stream_key(key)?;
        let Some(mut meta) = self.tag_meta(k, k)? else {
            return Ok(Response::Count(0));
        };
        let gone = match trim {
            StreamTrim::MaxLen { len, .. } => {
                let excess = meta.len.saturating_sub(len).min(trim.limit());
                self.remove_entries(k, k, LogSeq::ZERO, LogSeq::MAX, excess)?
            }
            StreamTrim::MinId { id, .. } => {
                self.remove_entries(k, k, LogSeq::ZERO, id, trim.limit())?
            }
        };
        meta.len = meta.len.saturating_sub(gone);
        if self.paged {
            self.make_room(1)?;
        }
        self.set_tag_meta(k, k, meta);
        Ok(Response::Count(gone))
    }

    pub(in crate::store) fn stream_del(
        &mut self,
        key: &Key,
        ids: &[LogSeq],
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        self.stream_key(key)?;
        let Some(mut meta) = self.tag_meta(k, k)? else {
            return Ok(Response::Count(0));
        };
        // An id named twice is one entry: the batch's removal is not visible to the
        // presence check of the second.
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut gone = 0;
        for id in &distinct {
            let ek = entry_key(k, k, *id);
            let present = self
                .store
                .backend
                .get(Table::LogEntries, &ek)
                .map_err(io_err)?
                .is_some();
            if present {
                self.batch.remove(Table::LogEntries, ek);
                gone += 1;
                meta.max_deleted = meta.max_deleted.max(*id);
            }
        }
        meta.len = meta.len.saturating_sub(gone);
        self.set_tag_meta(k, k, meta);
        Ok(Response::Count(gone))
    }
}

impl VersionedStore {
    /// `WRONGTYPE` when the key `key` holds a live value of a type other than a stream.
    pub fn check_stream_type(&self, key: &[u8]) -> Result<(), FirnError> {
        match self.meta(key)?.and_then(|m| m.live_kind()) {
            Some(kind) if kind != KeyKind::Stream => Err(FirnError::WrongType),
            _ => Ok(()),
        }
    }

    /// The id of the stream `key`'s first entry held, if it holds any.
    pub(crate) fn first_entry(&self, key: &[u8]) -> Result<Option<LogSeq>, FirnError> {
        Ok(self
            .entries(key, key, LogSeq::ZERO, LogSeq::MAX, false, 1)?
            .first()
            .map(|r| r.seq))
    }
}
