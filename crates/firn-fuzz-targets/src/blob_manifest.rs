//! A large value's manifest ([`BlobRef`]): decoded as a stored version holds it (the store
//! reads these from its tables, which a snapshot from a peer fills) and bare, as a peer's
//! seal carries one; then checked as the node checks a manifest before it proposes it, and
//! a manifest that passes walked chunk by chunk as a read or a fetch walks it — the chunks
//! must cover its size exactly.

use firn_model::BlobRef;
use firn_store::record::{self, VersionRecord};

pub fn blob_manifest(data: &[u8]) {
    if let Ok(version) = record::decode::<VersionRecord>(data) {
        if let Some(blob) = version.blob() {
            walk(blob);
        }
        let _ = version.into_info(1);
    }
    if let Ok(blob) = postcard::from_bytes::<BlobRef>(data) {
        walk(&blob);
    }
}

fn walk(blob: &BlobRef) {
    let _ = blob.name();
    if !blob.is_consistent() {
        return;
    }
    let mut covered = 0u64;
    for (offset, len) in blob.chunks() {
        assert_eq!(offset, covered, "chunks follow one another");
        assert!(len > 0 && len as u64 <= u64::from(blob.chunk_bytes));
        covered += len as u64;
    }
    assert_eq!(covered, blob.size, "the chunks cover the manifest's size");
}
