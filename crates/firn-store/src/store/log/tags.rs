//! The listing of what a shard's logs hold: its `LogTags` rows, one per (log, tag), in key
//! order — the log name and the tag each length-prefixed, so a log's tags are contiguous
//! and every shard orders them alike (which lets the router merge the shards' pages).

use std::ops::Bound;

use bytes::Bytes;
use firn_model::{FirnError, Key, TagListing};

use super::{TagMeta, tag_key};
use crate::backend::Table;
use crate::record::decode;
use crate::store::{VersionedStore, io_err};

/// Where a listing continues after `(log, tag)`: the row's key, as [`VersionedStore::log_tags`]
/// pages by it.
pub fn tag_cursor(log: &[u8], tag: &[u8]) -> Bytes {
    Bytes::from(tag_key(log, tag))
}

/// The (log, tag) a `LogTags` row's key names.
fn names_of(row_key: &[u8]) -> Result<(Key, Key), FirnError> {
    let corrupt = || FirnError::Internal("a log tag row with a malformed key".into());
    let take = |rest: &[u8]| -> Result<(Bytes, usize), FirnError> {
        let len = u16::from_be_bytes(
            rest.get(..2)
                .ok_or_else(corrupt)?
                .try_into()
                .unwrap_or_default(),
        );
        let end = 2 + len as usize;
        let name = rest.get(2..end).ok_or_else(corrupt)?;
        Ok((Bytes::copy_from_slice(name), end))
    };
    let (log, used) = take(row_key)?;
    let (tag, rest) = take(&row_key[used..])?;
    if used + rest != row_key.len() {
        return Err(corrupt());
    }
    Ok((
        Key::new(log).map_err(|_| corrupt())?,
        Key::new(tag).map_err(|_| corrupt())?,
    ))
}

impl VersionedStore {
    /// This shard's tags of every log after `after` (a [`tag_cursor`]), in key order, at
    /// most `limit`, with where the next page starts (`None`: none is left). `shard` is this
    /// shard's id, which each row names. A row's trim point counts a trim of its whole log.
    pub fn log_tags(
        &self,
        shard: u32,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<TagListing>, Option<Bytes>), FirnError> {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let rows = self
            .backend
            .range(Table::LogTags, lower, Bound::Unbounded, false, limit)
            .map_err(io_err)?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|(k, _)| Bytes::copy_from_slice(k)))
            .flatten();
        let mut tags = Vec::with_capacity(rows.len());
        // Rows of one log are contiguous: its whole-log trim point is looked up once.
        let mut log_trim: Option<(Key, firn_model::LogSeq)> = None;
        for (k, v) in rows {
            let (log, tag) = names_of(&k)?;
            let meta: TagMeta = decode(&v)?;
            let trimmed = match &log_trim {
                Some((l, t)) if *l == log => *t,
                _ => {
                    let t = self
                        .log_meta(log.as_bytes())?
                        .map(|m| m.trimmed_before)
                        .unwrap_or_default();
                    log_trim = Some((log.clone(), t));
                    t
                }
            };
            tags.push(TagListing {
                log,
                tag,
                len: meta.len,
                last_seq: meta.last,
                first_kept: meta.first_kept.max(trimmed),
                shards: vec![shard],
            });
        }
        Ok((tags, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_key_names_its_log_and_tag_and_a_malformed_one_is_refused() {
        let (log, tag) = names_of(&tag_cursor(b"orders", b"eu/1")).unwrap();
        assert_eq!(
            (log.as_bytes(), tag.as_bytes()),
            (&b"orders"[..], &b"eu/1"[..])
        );
        let mut long = tag_cursor(b"orders", b"eu/1").to_vec();
        long.push(0);
        assert!(names_of(&long).is_err());
        assert!(names_of(&[0, 9, b'x']).is_err());
        assert!(names_of(&[]).is_err());
    }
}
