//! What a shard's versions say about blobs: whether a blob is still some version's value
//! (the node's sweeper asks before deleting a file; a replica resuming a fetch after a
//! restart asks for its manifest), and every blob the shard names (a
//! replica that installed a snapshot fetches the ones it lacks).

use std::ops::Bound;

use firn_model::{BlobRef, FirnError, Key};

use super::{VersionedStore, io_err};
use crate::backend::Table;
use crate::record::{VersionRecord, decode};

/// Versions read from storage at a time while listing blobs.
const LIST_PAGE: usize = 1_024;

impl VersionedStore {
    /// Whether a stored version of `key` has blob `id` as its value.
    pub fn blob_referenced(&self, key: &[u8], id: u128) -> Result<bool, FirnError> {
        self.blob_named(key, id).map(|named| named.is_some())
    }

    /// Blob `id` (its manifest) if a stored version of `key` has it as its value.
    pub fn blob_named(&self, key: &[u8], id: u128) -> Result<Option<BlobRef>, FirnError> {
        let Some(meta) = self.meta(key)? else {
            return Ok(None);
        };
        let mut found = None;
        self.walk_records(key, meta.oldest, meta.latest, false, |info| {
            found = info.blob.filter(|b| b.id == id);
            Ok(found.is_none())
        })?;
        Ok(found)
    }

    /// Every blob a stored version of this shard names, with its key.
    pub fn blobs(&self) -> Result<Vec<(Key, BlobRef)>, FirnError> {
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lo = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let page = self
                .backend
                .range(Table::Versions, lo, Bound::Unbounded, false, LIST_PAGE)
                .map_err(io_err)?;
            for (table_key, bytes) in &page {
                if let Some(blob) = decode::<VersionRecord>(bytes)?.blob() {
                    // A versions-table key is the key's length (u16), the key, the version.
                    let key = &table_key[2..table_key.len() - 8];
                    out.push((Key::new(bytes::Bytes::copy_from_slice(key))?, blob.clone()));
                }
            }
            if page.len() < LIST_PAGE {
                return Ok(out);
            }
            after = page.last().map(|(k, _)| k.clone());
        }
    }
}
