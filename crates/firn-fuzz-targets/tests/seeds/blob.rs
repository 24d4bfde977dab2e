use firn_model::BlobRef;

use crate::{seed, seeds};

const BLOB_ID: u128 = 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10;

/// A sealed blob file as the node writes one, after a peer read's two bytes.
fn blob_file(read: [u8; 2], key: &[u8], data: &[u8]) -> Vec<u8> {
    use firn_node::blob::files::{BlobFiles, digest};
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let (shard, id) = (2, BLOB_ID);
    files.write_chunk(shard, id, key, 0, data).unwrap();
    files
        .seal(&BlobRef {
            shard,
            id,
            size: data.len() as u64,
            chunk_bytes: firn_model::blob::BLOB_CHUNK_BYTES as u32,
            digests: vec![digest(data)],
        })
        .unwrap();
    let mut seed = read.to_vec();
    seed.extend(std::fs::read(files.path(shard, id)).unwrap());
    seed
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_blob_file_seeds() {
    let key = firn_fuzz_targets::BLOB_FILE_KEY;
    seed(
        "blob_file",
        "small",
        &blob_file([0, 4], key, b"a large value's first bytes"),
    );
    seed(
        "blob_file",
        "read-past-end",
        &blob_file([200, 255], key, &[7; 1000]),
    );
    seed(
        "blob_file",
        "other-key",
        &blob_file([3, 1], b"cams/cam3", &[1; 64]),
    );
}

#[test]
fn the_blob_file_seeds_are_read() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in seeds("blob_file") {
        let files = firn_node::blob::files::BlobFiles::new(dir.path().join(&name));
        let path = files.path(2, BLOB_ID);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes[2..]).unwrap();
        let key = files.key_of(2, BLOB_ID).unwrap();
        let expected: &[u8] = match name.as_str() {
            "other-key" => b"cams/cam3",
            _ => firn_fuzz_targets::BLOB_FILE_KEY,
        };
        assert_eq!(key, expected, "blob_file/{name}");
        assert!(files.read(2, BLOB_ID, 0, 1).is_ok(), "blob_file/{name}");
    }
}
