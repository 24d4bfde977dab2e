//! Large values: a value above the inline limit is stored beside the log, as a blob file on
//! each replica of its shard, and only its [`BlobRef`] (the manifest) goes through consensus.

use serde::{Deserialize, Serialize};

/// Bytes per chunk: the unit of upload, digest and fetch.
pub const BLOB_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// A blob's manifest: where it lives, how big it is, and each chunk's SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// The shard whose replicas hold the blob's file.
    pub shard: u32,
    /// Unique in the cluster: the uploading node, its clock, a counter (see [`BlobRef::name`]).
    pub id: u128,
    pub size: u64,
    pub chunk_bytes: u32,
    /// SHA-256 of each chunk, in order.
    pub digests: Vec<[u8; 32]>,
}

impl BlobRef {
    /// The blob's file name: its id in hex.
    pub fn name(&self) -> String {
        blob_name(self.id)
    }

    /// The chunks `[offset, offset + len)` of each, in order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let step = self.chunk_bytes as u64;
        (0..self.digests.len() as u64).map(move |i| {
            let offset = i * step;
            (offset, (self.size - offset).min(step) as usize)
        })
    }

    /// Whether the digests cover exactly `size` bytes in chunks of `chunk_bytes`.
    pub fn is_consistent(&self) -> bool {
        self.chunk_bytes > 0
            && self.digests.len() as u64 == self.size.div_ceil(self.chunk_bytes as u64)
    }
}

/// A blob id as its file is named.
pub fn blob_name(id: u128) -> String {
    format!("{id:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_size_with_a_short_last_chunk() {
        let blob = BlobRef {
            shard: 0,
            id: 1,
            size: 10,
            chunk_bytes: 4,
            digests: vec![[0; 32]; 3],
        };
        assert!(blob.is_consistent());
        assert_eq!(
            blob.chunks().collect::<Vec<_>>(),
            vec![(0, 4), (4, 4), (8, 2)]
        );
        assert!(
            !BlobRef {
                digests: vec![[0; 32]; 2],
                ..blob
            }
            .is_consistent()
        );
    }
}
