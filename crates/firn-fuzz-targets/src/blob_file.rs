//! A large value's file on a node's disk (`<data dir>/blobs/<shard>/<id>`), as the node reads
//! it back — a file a crash, a full disk or another process may have left in any state: its
//! header (magic, key length, key) read as the sweeper and a restart's repair read it
//! ([`BlobFiles::key_of`], [`BlobFiles::list`]), its data as a peer's chunk read reads it
//! ([`BlobFiles::read`]), and the same bytes as an unsealed part file taken up again by a
//! fetch ([`BlobFiles::begin`]: the header checked against the key, whole chunks kept).
//!
//! The first two bytes pick a peer read's offset and length; the rest is the file.

use firn_model::BlobRef;
use firn_node::blob::files::BlobFiles;

const SHARD: u32 = 2;
const ID: u128 = 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10;
/// The key the seeds' files are written for.
pub const KEY: &[u8] = b"big/photo";

pub fn blob_file(data: &[u8]) {
    let Some((&[offset, len], file)) = data.split_first_chunk::<2>() else {
        return;
    };
    let root = crate::folder();
    let files = BlobFiles::new(root.path().to_path_buf());
    let sealed = files.path(SHARD, ID);
    std::fs::create_dir_all(sealed.parent().expect("a shard's folder")).expect("a folder");
    std::fs::write(&sealed, file).expect("writing a blob file");

    let _ = files.shards();
    for found in files.list(SHARD) {
        let _ = files.key_of(SHARD, found.id);
    }
    let _ = files.read(SHARD, ID, u64::from(offset), usize::from(len) * 16);
    let _ = files.read(SHARD, ID, u64::MAX - u64::from(offset), usize::from(len));

    // The same bytes as a part file a fetch takes up: at most one chunk's worth here, so no
    // chunk is whole and the file is cut back to its header when that matches.
    std::fs::rename(&sealed, files.part_path(SHARD, ID)).expect("renaming a blob file");
    let blob = BlobRef {
        shard: SHARD,
        id: ID,
        size: 1,
        chunk_bytes: firn_model::blob::BLOB_CHUNK_BYTES as u32,
        digests: vec![[0; 32]],
    };
    let _ = files.key_of(SHARD, ID);
    let _ = files.begin(&blob, KEY);
    files.close(SHARD, ID);
}
