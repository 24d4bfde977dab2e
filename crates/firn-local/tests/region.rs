//! The region's contract, one property at a time: what a publish makes a reader see, what
//! makes it go remote, which files a reader refuses, and who may open one.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use firn_local::{
    Bound, LocalRead, Published, RegionConfig, RegionReader, RegionReaders, RegionWriter,
    RemoteReason, ShardState, now_mono_ns,
};
use firn_model::CommitTs;

const CLUSTER: [u8; 16] = [7; 16];

fn small() -> RegionConfig {
    RegionConfig {
        entries: 64,
        key_bytes_max: 32,
        value_bytes_max: 64,
        shards_max: 4,
    }
}

fn ts(wall_us: u64) -> CommitTs {
    CommitTs::new(wall_us, 0)
}

/// A writer with shard 0 open and a reader of it.
fn pair(dir: &tempfile::TempDir) -> (RegionWriter, RegionReader) {
    let path = dir.path().join("r.region");
    let mut w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    w.set_cluster_id(CLUSTER);
    w.open_shard(0);
    let r = RegionReader::open(&path, Some(CLUSTER)).unwrap();
    (w, r)
}

fn state(applied: u64, lease_until_mono_ns: u64) -> ShardState {
    ShardState {
        applied: ts(applied),
        closed: ts(applied),
        lease_until_mono_ns,
    }
}

fn hit(read: LocalRead) -> firn_local::LocalValue {
    match read {
        LocalRead::Hit(v) => v,
        other => panic!("expected a hit, got {other:?}"),
    }
}

#[test]
fn a_published_value_reads_back_with_its_version_stamp_and_a_stale_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, r) = pair(&dir);
    assert_eq!(
        w.publish(0, b"k", Some(b"v1"), 1, ts(10)),
        Published::Stored
    );
    w.set_shard_state(0, state(10, 0));
    let v = hit(r.get(b"k", None));
    assert_eq!(v.value.as_deref(), Some(&b"v1"[..]));
    assert_eq!((v.version, v.commit_ts), (1, ts(10)));
    match v.bound {
        Bound::Stale {
            at_least,
            staleness_us_max,
        } => {
            assert_eq!(at_least, ts(10));
            assert!(staleness_us_max > 1_000_000, "time 10 µs is long past");
        }
        other => panic!("no lease: {other:?}"),
    }
    // Overwritten in place, then deleted.
    w.publish(0, b"k", Some(b"v2, longer than before"), 2, ts(20));
    let v = hit(r.get(b"k", None));
    assert_eq!(v.value.as_deref(), Some(&b"v2, longer than before"[..]));
    w.publish(0, b"k", None, 3, ts(30));
    let v = hit(r.get(b"k", None));
    assert_eq!((v.value, v.version), (None, 3));
    assert_eq!(
        r.get(b"other", None),
        LocalRead::Remote(RemoteReason::NotPublished)
    );
}

#[test]
fn under_a_lease_a_read_is_linearizable_and_after_it_stale() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, r) = pair(&dir);
    w.publish(0, b"k", Some(b"v"), 1, ts(10));
    w.set_shard_state(0, state(10, now_mono_ns() + 5_000_000_000));
    assert!(matches!(
        hit(r.get(b"k", None)).bound,
        Bound::Linearizable { lease_left_ns } if lease_left_ns > 4_000_000_000
    ));
    w.set_shard_state(0, state(10, now_mono_ns() - 1));
    assert!(matches!(hit(r.get(b"k", None)).bound, Bound::Stale { .. }));
}

#[test]
fn a_token_ahead_of_the_replica_goes_remote_and_one_behind_is_met() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, r) = pair(&dir);
    w.publish(0, b"k", Some(b"v"), 1, ts(10));
    w.set_shard_state(0, state(10, now_mono_ns() + 5_000_000_000));
    assert_eq!(
        r.get(b"k", Some(ts(11))),
        LocalRead::Remote(RemoteReason::BehindToken { has: ts(10) })
    );
    hit(r.get(b"k", Some(ts(10))));
}

#[test]
fn too_large_values_withdraw_the_key_and_closed_or_reset_shards_go_remote() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, r) = pair(&dir);
    let big = [b'x'; 65];
    assert_eq!(
        w.publish(0, b"new", Some(&big), 1, ts(1)),
        Published::Skipped
    );
    w.publish(0, b"k", Some(b"small"), 1, ts(1));
    assert_eq!(
        w.publish(0, b"k", Some(&big), 2, ts(2)),
        Published::Invalidated
    );
    assert_eq!(r.get(b"k", None), LocalRead::Remote(RemoteReason::NotLocal));
    w.publish(0, b"k", Some(b"small again"), 3, ts(3));
    hit(r.get(b"k", None));

    w.invalidate_shard(0);
    assert_eq!(r.get(b"k", None), LocalRead::Remote(RemoteReason::Stale));
    w.publish(0, b"k", Some(b"fresh"), 4, ts(4));
    assert_eq!(hit(r.get(b"k", None)).version, 4);
    w.close_shard(0);
    assert_eq!(
        r.get(b"k", None),
        LocalRead::Remote(RemoteReason::ShardNotHere)
    );
    assert_eq!(w.publish(0, b"k", Some(b"x"), 5, ts(5)), Published::Skipped);
}

#[test]
fn a_full_table_refuses_new_keys_and_reuses_stale_slots() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, r) = pair(&dir);
    w.open_shard(1);
    let mut stored = 0;
    let mut full = 0;
    for i in 0..200 {
        match w.publish(1, format!("key{i}").as_bytes(), Some(b"v"), 1, ts(1)) {
            Published::Stored => stored += 1,
            Published::Full => full += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(stored, 64, "every slot is used before a key is refused");
    assert_eq!(full, 136);
    let refused = (0..200)
        .map(|i| r.get(format!("key{i}").as_bytes(), None))
        .filter(|x| *x == LocalRead::Remote(RemoteReason::NotPublished))
        .count();
    assert_eq!(
        refused, 136,
        "a key that found no slot reads as not published"
    );
    // Shard 1's entries go stale: their slots serve shard 0's keys.
    w.close_shard(1);
    let reused: Vec<String> = (0..64)
        .map(|i| format!("other{i}"))
        .filter(|k| w.publish(0, k.as_bytes(), Some(b"w"), 1, ts(1)) == Published::Stored)
        .collect();
    // Every slot is stale; a key is refused only once its whole window holds new keys.
    assert!(
        reused.len() > 32,
        "{} keys reused stale slots",
        reused.len()
    );
    for k in &reused {
        assert_eq!(
            hit(r.get(k.as_bytes(), None)).value.as_deref(),
            Some(&b"w"[..])
        );
    }
}

#[test]
fn reopening_the_writer_reuses_the_file_and_trusts_nothing_published_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let (mut w, r) = pair(&dir);
    w.publish(0, b"k", Some(b"v"), 1, ts(1));
    let before = r.header().incarnation;
    drop(w);
    let mut w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    assert_eq!(
        r.header().incarnation,
        before + 1,
        "the same file, in place"
    );
    assert_eq!(
        r.get(b"k", None),
        LocalRead::Remote(RemoteReason::ShardNotHere)
    );
    w.open_shard(0);
    assert_eq!(r.get(b"k", None), LocalRead::Remote(RemoteReason::Stale));
    w.publish(0, b"k", Some(b"v2"), 2, ts(2));
    assert_eq!(hit(r.get(b"k", None)).version, 2);
}

#[test]
fn a_reader_refuses_other_clusters_other_layouts_and_retired_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let (w, _r) = pair(&dir);
    assert!(matches!(
        RegionReader::open(&path, Some([8; 16])),
        Err(firn_local::RegionError::OtherCluster { .. })
    ));
    // Another size: the old file is retired and replaced.
    let old = RegionReader::open(&path, None).unwrap();
    let bigger = RegionConfig {
        entries: 128,
        ..small()
    };
    drop(w);
    let _w2 = RegionWriter::open(&path, bigger, 1, RegionReaders::Owner).unwrap();
    assert_eq!(
        old.get(b"k", None),
        LocalRead::Remote(RemoteReason::Retired)
    );
    assert_eq!(
        RegionReader::open(&path, None)
            .unwrap()
            .header()
            .config
            .entries,
        128
    );
    // Not a region at all, or another layout version.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0u8; 4096]).unwrap();
    assert!(matches!(
        RegionReader::open(&junk, None),
        Err(firn_local::RegionError::NotARegion { .. })
    ));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = 99; // the layout version word
    let other = dir.path().join("other.region");
    std::fs::write(&other, bytes).unwrap();
    assert!(matches!(
        RegionReader::open(&other, None),
        Err(firn_local::RegionError::LayoutVersion { found: 99, .. })
    ));
}

#[test]
fn a_second_writer_is_refused_and_a_stopped_one_leaves_nothing_to_trust() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let (mut w, r) = pair(&dir);
    w.publish(0, b"k", Some(b"v"), 1, ts(1));
    assert!(matches!(
        RegionWriter::open(&path, small(), 2, RegionReaders::Owner),
        Err(firn_local::RegionError::InUse { .. })
    ));
    drop(w);
    assert_eq!(
        r.get(b"k", None),
        LocalRead::Remote(RemoteReason::ShardNotHere)
    );
    RegionWriter::open(&path, small(), 2, RegionReaders::Owner)
        .expect("free again once the first is gone");
}

#[test]
fn a_bad_config_is_refused_with_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let e = RegionWriter::open(
        &dir.path().join("r"),
        RegionConfig {
            entries: 100,
            ..small()
        },
        1,
        RegionReaders::Owner,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("power of two"), "{e}");
}

// Who may open a region: the node's user alone unless a group is named, and a file that
// others could read (left by an older build, or changed by hand) is replaced at the
// writer's start, so that a reader who mapped it stops seeing new values.

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// This process's own group: one it may always give its files to.
fn own_gid() -> u32 {
    // SAFETY: getgid has no preconditions and cannot fail.
    unsafe { libc::getgid() }
}

#[test]
fn a_new_region_and_its_lock_are_readable_by_the_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let _w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&path.with_extension("region-lock")), 0o600);
}

#[test]
fn a_region_for_a_group_is_readable_by_the_group_and_no_one_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let _w = RegionWriter::open(&path, small(), 1, RegionReaders::Group(own_gid())).unwrap();
    assert_eq!(mode(&path), 0o640);
    assert_eq!(std::fs::metadata(&path).unwrap().gid(), own_gid());
}

#[test]
fn a_region_others_could_read_is_replaced_and_its_old_readers_retired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    drop(w);
    // As an older build left it, or as a hand's chmod made it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::metadata(&path).unwrap().ino();
    let old = RegionReader::open(&path, None).unwrap();

    let _w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_ne!(
        std::fs::metadata(&path).unwrap().ino(),
        before,
        "a new file"
    );
    assert_eq!(
        old.get(b"k", None),
        LocalRead::Remote(RemoteReason::Retired)
    );
}

#[test]
fn a_group_region_is_made_owner_only_again_when_the_group_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    drop(RegionWriter::open(&path, small(), 1, RegionReaders::Group(own_gid())).unwrap());
    let _w = RegionWriter::open(&path, small(), 1, RegionReaders::Owner).unwrap();
    assert_eq!(mode(&path), 0o600);
}
