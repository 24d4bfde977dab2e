use firn_local::{RegionConfig, RegionReaders, RegionWriter, ShardState};
use firn_model::CommitTs;

use crate::{TS, seed, seeds};

/// A region written by the node's `RegionWriter`, small enough to be a seed.
fn region(shape: impl FnOnce(&mut RegionWriter)) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let config = RegionConfig {
        entries: 8,
        key_bytes_max: 24,
        value_bytes_max: 16,
        shards_max: 2,
    };
    let mut writer = RegionWriter::open(&path, config, 1, RegionReaders::Owner).unwrap();
    shape(&mut writer);
    // As a reader sees it while the node runs: a writer closes its shards when dropped.
    let bytes = std::fs::read(&path).unwrap();
    drop(writer);
    bytes
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_local_region_seeds() {
    seed("local_region", "empty", &region(|_| {}));
    let state = |lease_until_mono_ns| ShardState {
        applied: TS,
        closed: CommitTs::new(TS.wall_us - 5_000, 0),
        lease_until_mono_ns,
    };
    let published = |w: &mut RegionWriter| {
        w.set_cluster_id([0xab; 16]);
        w.heartbeat();
        w.open_shard(0);
        w.open_shard(1);
        w.publish(0, b"a", Some(b"1"), 1, TS);
        w.publish(0, b"key", None, 2, TS);
        w.publish(1, b"local/temperature", Some(b"21.5 degrees"), 7, TS);
        w.publish_not_local(1, b"absent-too-big", 3, TS);
    };
    seed(
        "local_region",
        "stale-reads",
        &region(|w| {
            published(w);
            w.set_shard_state(0, state(0));
            w.set_shard_state(1, state(0));
        }),
    );
    seed(
        "local_region",
        "leased",
        &region(|w| {
            published(w);
            w.set_shard_state(0, state(u64::MAX));
            w.set_shard_state(1, state(u64::MAX));
        }),
    );
    seed(
        "local_region",
        "closed-shard",
        &region(|w| {
            published(w);
            w.close_shard(1);
            w.invalidate_shard(0);
        }),
    );
}

#[test]
fn the_region_seeds_answer_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in seeds("local_region") {
        let path = dir.path().join(&name);
        std::fs::write(&path, bytes).unwrap();
        let region = firn_local::RegionReader::open(&path, None).unwrap();
        let read = region.get(b"a", None);
        // Found (and answered) unless nothing is published or its shard is closed.
        let found = ["leased", "stale-reads"].contains(&name.as_str());
        assert_eq!(
            found,
            matches!(read, firn_local::LocalRead::Hit(_)),
            "{name}: {read:?}"
        );
    }
}
