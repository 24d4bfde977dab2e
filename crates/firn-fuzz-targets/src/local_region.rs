//! A node's shared-memory region as a process on its host maps it (`firn_local`): the file
//! checked when it is opened (magic, layout version, sizes, retired), its header read, then
//! reads of a few keys — those the seeds publish, so that mutations reach the entries'
//! lengths, flags and the shard rows' stamps.

use firn_local::RegionReader;
use firn_model::CommitTs;

/// The keys the seeds publish (`tests/seeds.rs`), and one they do not.
pub const KEYS: [&[u8]; 4] = [b"a", b"key", b"local/temperature", b"absent"];

pub fn local_region(data: &[u8]) {
    let file = crate::file_of(data);
    let Ok(region) = RegionReader::open(file.path(), None) else {
        return;
    };
    let _ = region.header();
    let mut buf = Vec::new();
    for key in KEYS {
        let _ = region.get(key, None);
        let _ = region.get_into(key, Some(CommitTs::new(u64::MAX >> 1, 0)), &mut buf);
    }
}
