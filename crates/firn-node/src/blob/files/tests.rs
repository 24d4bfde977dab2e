//! The blob files' unit tests.

use super::*;

fn blob(data: &[&[u8]], id: u128) -> BlobRef {
    BlobRef {
        shard: 3,
        id,
        size: data.iter().map(|d| d.len() as u64).sum(),
        chunk_bytes: BLOB_CHUNK_BYTES as u32,
        digests: data.iter().map(|d| digest(d)).collect(),
    }
}

/// A fetch of `whole` (two full chunks and `end`) that finds the two chunks held: it takes
/// the part file up, appends the last chunk and seals; the sealed bytes.
fn fetch_the_rest(files: &BlobFiles, whole: &BlobRef) -> Bytes {
    files.begin(whole, b"k").unwrap();
    assert_eq!(
        files.chunks_held(whole),
        2,
        "the chunks on disk were not taken up"
    );
    let (shard, id) = (whole.shard, whole.id);
    files
        .write_chunk(shard, id, b"", 2 * BLOB_CHUNK_BYTES as u64, b"end")
        .unwrap();
    files.seal(whole).unwrap();
    files.read(shard, id, 0, 2 * BLOB_CHUNK_BYTES + 3).unwrap()
}

#[test]
fn a_blob_wanted_here_gets_an_empty_part_file_unless_it_has_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let data = vec![5u8; 10];
    let wanted = blob(&[&data], 4);
    assert!(files.want(&wanted, b"k").unwrap());
    let found = files.list(3);
    assert_eq!((found.len(), found[0].id, found[0].part), (1, 4, true));
    assert_eq!(files.key_of(3, 4).unwrap(), b"k");
    assert_eq!(files.chunks_held(&wanted), 0);
    assert!(
        !files.want(&wanted, b"k").unwrap(),
        "one part file is enough"
    );
    // A fetch takes it up and seals it; wanting it then makes nothing.
    files.begin(&wanted, b"k").unwrap();
    files.write_chunk(3, 4, b"k", 0, &data).unwrap();
    files.seal(&wanted).unwrap();
    assert!(!files.want(&wanted, b"k").unwrap());
    assert_eq!(files.list(3).len(), 1);
    assert!(!files.list(3)[0].part);
}

#[test]
fn a_sealed_blob_reads_back_and_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let first = vec![7u8; BLOB_CHUNK_BYTES];
    files.write_chunk(3, 9, b"big/key", 0, &first).unwrap();
    files
        .write_chunk(3, 9, b"", BLOB_CHUNK_BYTES as u64, b"tail")
        .unwrap();
    assert!(!files.has(3, 9), "not visible before it is sealed");
    files.seal(&blob(&[&first, b"tail"], 9)).unwrap();
    assert!(files.has(3, 9));
    let back = files.read(3, 9, BLOB_CHUNK_BYTES as u64 - 2, 6).unwrap();
    assert_eq!(&back[..], &[7, 7, b't', b'a', b'i', b'l']);
    assert_eq!(files.key_of(3, 9).unwrap(), b"big/key");
    assert_eq!(files.list(3).len(), 1);
    assert_eq!(files.shards(), vec![3]);
}

#[test]
fn a_part_file_being_sealed_is_left_alone_by_a_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let first = vec![7u8; BLOB_CHUNK_BYTES];
    let whole = blob(&[&first, b"tail"], 9);
    files.write_chunk(3, 9, b"k", 0, &first).unwrap();
    files
        .write_chunk(3, 9, b"", BLOB_CHUNK_BYTES as u64, b"tail")
        .unwrap();
    // The seal is under way (its fsync can take seconds on a loaded disk) when a fetch
    // of the same blob starts: it must neither take the part file up (which would cut
    // it back to its whole chunks) nor start it again.
    let upload = files.take_for_seal(&whole).unwrap().unwrap();
    assert!(
        files.uploading(3, 9, std::time::Duration::ZERO),
        "not swept"
    );
    let fetch = files.begin(&whole, b"k");
    let restart = files.write_chunk(3, 9, b"k", 0, &first);
    assert!(files.seal(&whole).is_err(), "one seal at a time");
    files.finish_seal(&whole, upload).unwrap();
    files.seal(&whole).unwrap();
    let back = files
        .read(3, 9, 0, BLOB_CHUNK_BYTES + 4)
        .expect("sealed whole");
    assert_eq!(&back[BLOB_CHUNK_BYTES..], b"tail");
    assert!(matches!(fetch, Err(FirnError::TryAgain(_))), "{fetch:?}");
    assert!(
        matches!(restart, Err(FirnError::TryAgain(_))),
        "{restart:?}"
    );
    // A fetch now finds nothing to take up.
    files.begin(&whole, b"k").unwrap();
    assert_eq!(files.chunks_held(&whole), 0);
    assert!(files.has(3, 9));
}

#[test]
fn a_part_file_a_chunk_is_being_appended_to_is_left_alone_by_a_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let (a, b) = (vec![1u8; BLOB_CHUNK_BYTES], vec![2u8; BLOB_CHUNK_BYTES]);
    let whole = blob(&[&a, &b, b"end"], 7);
    files.write_chunk(3, 7, b"k", 0, &a).unwrap();
    // A dropped holder thaws with its second chunk half written when a fetch of the blob
    // starts: the fetch must not take the part file up (cutting the half chunk off under
    // the writer would leave a hole in the sealed blob).
    let mut upload = files.claim(3, 7).unwrap().expect("open");
    upload.file.write_all(&b[..BLOB_CHUNK_BYTES / 2]).unwrap();
    let part = files.part_path(3, 7);
    let written = fs::metadata(&part).unwrap().len();
    let fetch = files.begin(&whole, b"k");
    assert_eq!(
        fs::metadata(&part).unwrap().len(),
        written,
        "cut under the writer"
    );
    assert!(matches!(fetch, Err(FirnError::TryAgain(_))), "{fetch:?}");
    for other in [
        files.write_chunk(3, 7, b"", BLOB_CHUNK_BYTES as u64, &b),
        files.write_chunk(3, 7, b"k", 0, &a),
        files.seal(&whole),
    ] {
        assert!(matches!(other, Err(FirnError::TryAgain(_))), "{other:?}");
    }
    upload.file.write_all(&b[BLOB_CHUNK_BYTES / 2..]).unwrap();
    upload.digests.push(digest(&b));
    upload.len += BLOB_CHUNK_BYTES as u64;
    files.release(3, 7, Some(upload));
    // Then the fetch goes on from the chunks the file holds.
    let back = fetch_the_rest(&files, &whole);
    assert_eq!(
        digest(&back[BLOB_CHUNK_BYTES..2 * BLOB_CHUNK_BYTES]),
        digest(&b)
    );
}

#[test]
fn a_seal_that_does_not_match_the_manifest_is_refused_and_the_file_removed() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    files.write_chunk(3, 1, b"k", 0, b"abc").unwrap();
    assert!(files.seal(&blob(&[b"abd"], 1)).is_err());
    assert!(!files.has(3, 1));
    assert!(files.list(3).is_empty());
}

#[test]
fn an_upload_cut_short_is_held_as_far_as_it_matches_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let (a, b) = (vec![1u8; BLOB_CHUNK_BYTES], vec![2u8; BLOB_CHUNK_BYTES]);
    let whole = blob(&[&a, &b, b"end"], 5);
    assert_eq!(files.chunks_held(&whole), 0, "no upload");
    files.write_chunk(3, 5, b"k", 0, &a).unwrap();
    files
        .write_chunk(3, 5, b"", BLOB_CHUNK_BYTES as u64, &b)
        .unwrap();
    assert_eq!(files.chunks_held(&whole), 2);
    // Going on from there seals it.
    files
        .write_chunk(3, 5, b"", 2 * BLOB_CHUNK_BYTES as u64, b"end")
        .unwrap();
    assert_eq!(
        files.chunks_held(&whole),
        0,
        "a short last chunk: not resumable"
    );
    files.seal(&whole).unwrap();
    assert!(files.has(3, 5));
    // Chunks that differ from the manifest's are not kept.
    files.write_chunk(3, 6, b"k", 0, &b).unwrap();
    assert_eq!(files.chunks_held(&blob(&[&a, &b], 6)), 0);
}

#[test]
fn a_part_file_left_by_an_earlier_run_is_taken_up_as_far_as_it_matches() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (vec![1u8; BLOB_CHUNK_BYTES], vec![2u8; BLOB_CHUNK_BYTES]);
    let whole = blob(&[&a, &b, b"end"], 5);
    let before = BlobFiles::new(dir.path().to_path_buf());
    before.write_chunk(3, 5, b"k", 0, &a).unwrap();
    before
        .write_chunk(3, 5, b"", BLOB_CHUNK_BYTES as u64, &b)
        .unwrap();
    drop(before);
    // A new run of the process: nothing open, the part file on disk.
    let files = BlobFiles::new(dir.path().to_path_buf());
    assert_eq!(files.chunks_held(&whole), 0);
    files.begin(&whole, b"k").unwrap();
    assert_eq!(
        files.chunks_held(&whole),
        2,
        "the chunks on disk were not taken up"
    );
    // A fetch that fails closes its upload; the next one takes the file up again.
    files.close(3, 5);
    assert_eq!(files.chunks_held(&whole), 0, "still open");
    let back = fetch_the_rest(&files, &whole);
    assert!(back[..BLOB_CHUNK_BYTES] == a[..] && &back[2 * BLOB_CHUNK_BYTES..] == b"end");

    // A part file whose second chunk differs from the manifest keeps its first only (and
    // drops the rest); one for another key is started again.
    let files = BlobFiles::new(dir.path().to_path_buf());
    files.write_chunk(3, 6, b"k", 0, &a).unwrap();
    files
        .write_chunk(3, 6, b"", BLOB_CHUNK_BYTES as u64, &a)
        .unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let other = blob(&[&a, &b], 6);
    files.begin(&other, b"k").unwrap();
    assert_eq!(files.chunks_held(&other), 1);
    let files = BlobFiles::new(dir.path().to_path_buf());
    files.begin(&other, b"another key").unwrap();
    assert_eq!(files.chunks_held(&other), 0);
    assert_eq!(files.key_of(3, 6).unwrap(), b"another key");
}

#[test]
fn chunks_out_of_order_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    files.write_chunk(3, 1, b"k", 0, b"short").unwrap();
    // After a short chunk nothing may follow, and offsets must match.
    assert!(files.write_chunk(3, 1, b"", 5, b"more").is_err());
    assert!(files.write_chunk(3, 2, b"", 10, b"x").is_err());
    assert!(files.write_chunk(3, 2, b"k", 0, b"").is_err());
}
