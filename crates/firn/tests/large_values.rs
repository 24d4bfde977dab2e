//! Large values on a 3-node cluster: the blob is on every replica of its shard and reads
//! the same through every node; a replica that was down while a large value was written
//! fetches the blob from the others once it is back, byte for byte, and tries again a fetch
//! that failed, also after a restart.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Cluster, firn_bin, wait_until};

/// `len` bytes that differ from chunk to chunk.
fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(0x9E37_79B9)
                .wrapping_add(seed as u64) as u8
                ^ (i >> 22) as u8
        })
        .collect()
}

/// The sealed blob files in node `dir`'s data (no `.part`, no note such as `.rescan`).
fn sealed(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(dir.join("blobs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if f.path().extension().is_none() && !f.file_name().to_string_lossy().starts_with('.') {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

/// Waits (60 s at most) until node `dir` holds exactly one sealed blob, and checks that its
/// data is `value`; `what` says what failed to happen.
fn wait_for_the_blob(dir: &Path, value: &[u8], what: &str) {
    assert!(
        wait_until(Duration::from_secs(60), || sealed(dir).len() == 1),
        "{what}"
    );
    assert!(
        file_data(&sealed(dir)[0]) == value,
        "the blob differs from the value written"
    );
}

/// A blob file's data: after its header (magic, key length, key).
fn file_data(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let key_len = u16::from_be_bytes([bytes[8], bytes[9]]) as usize;
    bytes[10 + key_len..].to_vec()
}

fn put(cluster: &Cluster, i: usize, key: &str, body: &[u8]) -> u16 {
    match ureq::put(&format!("http://{}/v1/kv/{key}", cluster.http_addr(i)))
        .timeout(Duration::from_secs(60))
        .send_bytes(body)
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, r)) => panic!("{code}: {}", r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    }
}

fn get(cluster: &Cluster, i: usize, key: &str) -> Vec<u8> {
    let r = ureq::get(&format!("http://{}/v1/kv/{key}", cluster.http_addr(i)))
        .timeout(Duration::from_secs(60))
        .call()
        .unwrap();
    let mut body = Vec::new();
    std::io::copy(&mut r.into_reader(), &mut body).unwrap();
    body
}

#[test]
fn a_replica_that_missed_a_large_value_fetches_it_from_the_others() {
    let mut cluster = Cluster::start(3, &["--shards", "1", "--max-value-bytes", "65536"]);
    cluster.wait_for_leaders(0, None);
    let first = value(9 * 1024 * 1024 + 7, 1);
    assert_eq!(put(&cluster, 0, "film/1", &first), 200);
    for i in 0..3 {
        assert!(
            get(&cluster, i, "film/1") == first,
            "node {i} reads another value"
        );
        let files = sealed(cluster.dirs[i].path());
        assert_eq!(files.len(), 1, "node {i} holds {files:?}");
        assert!(
            file_data(&files[0]) == first,
            "node {i}'s blob file differs"
        );
    }

    // Node 3 is down while the next large value is written by a majority.
    cluster.kill_9(2);
    let second = value(6 * 1024 * 1024, 2);
    put_by_majority(&cluster, "film/2", &second);
    assert_eq!(sealed(cluster.dirs[2].path()).len(), 1);

    // Back, it learns the version through the log and fetches the blob it names.
    cluster.restart(2);
    assert!(
        wait_until(Duration::from_secs(60), || sealed(cluster.dirs[2].path())
            .len()
            == 2),
        "the restarted replica never fetched the blob it missed"
    );
    let fetched: Vec<Vec<u8>> = sealed(cluster.dirs[2].path())
        .iter()
        .map(|p| file_data(p))
        .collect();
    assert!(
        fetched.contains(&second),
        "the fetched blob differs from the value written"
    );
    assert!(get(&cluster, 2, "film/2") == second);
}

#[test]
fn a_frozen_replica_does_not_hold_a_large_value_back() {
    let cluster = Cluster::start(3, &["--shards", "1", "--max-value-bytes", "65536"]);
    let leader = cluster.wait_for_leaders(0, None)[0] as usize - 1;
    let frozen = (leader + 1) % 3;
    let through = (leader + 2) % 3;
    cluster.signal(frozen, "-STOP");
    let film = value(20 * 1024 * 1024 + 5, 4);
    let started = std::time::Instant::now();
    let status = put(&cluster, through, "film/frozen", &film);
    let took = started.elapsed();
    cluster.signal(frozen, "-CONT");
    assert_eq!(status, 200);
    // A chunk call to the frozen node would wait 60 s; it may hold the upload back 2 s.
    assert!(took < Duration::from_secs(20), "the upload took {took:?}");
    assert!(get(&cluster, through, "film/frozen") == film);
    // Thawed, it gets the value it was dropped from.
    wait_for_the_blob(
        cluster.dirs[frozen].path(),
        &film,
        "the thawed replica never got the blob",
    );
}

/// Shard 0 as node `i` reports it in `/v1/cluster`.
fn shard0(cluster: &Cluster, i: usize) -> serde_json::Value {
    cluster.cluster_json(i).unwrap_or_default()["shards"][0].clone()
}

#[test]
fn a_replica_sent_a_snapshot_fetches_the_blobs_it_names() {
    let mut cluster = Cluster::start(
        3,
        &[
            "--shards",
            "1",
            "--max-value-bytes",
            "65536",
            "--snapshot-every",
            "100",
            "--snapshot-catchup-entries",
            "0",
        ],
    );
    cluster.wait_for_leaders(0, None);
    assert_eq!(put(&cluster, 0, "small/first", b"x"), 200);
    let mut applied = 0;
    assert!(
        wait_until(Duration::from_secs(30), || {
            applied = shard0(&cluster, 2)["last_applied_index"]
                .as_u64()
                .unwrap_or(0);
            applied > 0
        }),
        "node 3 applied nothing"
    );

    // Node 3 is down while a large value and enough small ones for a snapshot are written,
    // and the log behind it is purged: it can only catch up from a snapshot.
    cluster.kill_9(2);
    let film = value(5 * 1024 * 1024 + 3, 3);
    put_by_majority(&cluster, "film/1", &film);
    for i in 0..300 {
        assert_eq!(put(&cluster, 0, &format!("small/{i}"), b"x"), 200);
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            shard0(&cluster, 0)["purged_index"].as_u64().unwrap_or(0) > applied
        }),
        "the others did not purge their logs past node 3"
    );

    cluster.restart(2);
    wait_for_the_blob(
        cluster.dirs[2].path(),
        &film,
        "the replica that installed a snapshot never fetched the blob it names",
    );
    assert!(get(&cluster, 2, "film/1") == film);
    // The note that the shard's blobs were to be looked for is gone once they were.
    let note = cluster.dirs[2].path().join("blobs/0/.rescan");
    assert!(
        wait_until(Duration::from_secs(10), || !note.exists()),
        "the rescan note stayed"
    );

    // A note left by a run stopped before the listing: the replica lists its blobs when it
    // opens (here its file is gone too, and no part file says it is wanted).
    cluster.stop(2);
    std::fs::remove_file(&sealed(cluster.dirs[2].path())[0]).unwrap();
    std::fs::write(&note, b"").unwrap();
    cluster.restart(2);
    wait_for_the_blob(
        cluster.dirs[2].path(),
        &film,
        "the replica did not look for its blobs with the note there",
    );
    assert!(wait_until(Duration::from_secs(10), || !note.exists()));
}

/// Puts `body` at `key` through node 1 while a node is down: retried until a majority
/// takes it (the leader may change as the node went down).
fn put_by_majority(cluster: &Cluster, key: &str, body: &[u8]) {
    let mut status = 0;
    assert!(
        wait_until(Duration::from_secs(30), || {
            status = match ureq::put(&format!("http://{}/v1/kv/{key}", cluster.http_addr(0)))
                .timeout(Duration::from_secs(60))
                .send_bytes(body)
            {
                Ok(r) => r.status(),
                Err(ureq::Error::Status(code, _)) => code,
                Err(_) => 0,
            };
            status == 200
        }),
        "a majority did not take the value: {status}"
    );
}

/// Files moved aside, to put back.
type Moved = Vec<(PathBuf, PathBuf)>;

/// A 3-node cluster where node 3 missed a large value (down while it was written) and, back,
/// failed to fetch it: the holders' files were moved aside. Returns the value and the moves.
fn a_fetch_that_failed() -> (Cluster, Vec<u8>, Moved) {
    let mut cluster = Cluster::start(3, &["--shards", "1", "--max-value-bytes", "65536"]);
    cluster.wait_for_leaders(0, None);
    cluster.kill_9(2);
    let missed = value(5 * 1024 * 1024 + 3, 3);
    put_by_majority(&cluster, "film/3", &missed);

    // The holders' files are moved aside: the restarted replica's fetch finds no copy.
    let moved: Moved = (0..2)
        .map(|i| {
            let files = sealed(cluster.dirs[i].path());
            assert_eq!(files.len(), 1, "node {i} holds {files:?}");
            let aside = cluster.dirs[i].path().join("aside");
            std::fs::rename(&files[0], &aside).unwrap();
            (files[0].clone(), aside)
        })
        .collect();
    cluster.restart(2);
    let failed = r#"firn_blob_repairs_total{outcome="failed"}"#;
    assert!(
        wait_until(Duration::from_secs(60), || cluster.counter(2, failed)
            >= 1.0),
        "the restarted replica never tried to fetch the blob"
    );
    assert!(sealed(cluster.dirs[2].path()).is_empty());
    (cluster, missed, moved)
}

/// Node 3 of `cluster` holds the blob of `missed` (within a minute), and reads it back.
fn fetched_in_the_end(cluster: &Cluster, missed: &[u8], moved: &Moved) {
    for (place, aside) in moved {
        std::fs::rename(aside, place).unwrap();
    }
    wait_for_the_blob(
        cluster.dirs[2].path(),
        missed,
        "the replica did not fetch the blob again",
    );
    assert!(get(cluster, 2, "film/3") == missed);
}

/// A replica whose fetch of a value it missed fails (no holder could serve it then) tries
/// again later, and has the blob once a holder can serve it: the value gets back its third
/// copy without a snapshot or another write.
#[test]
fn a_replica_tries_again_a_fetch_that_failed() {
    let (cluster, missed, moved) = a_fetch_that_failed();
    // Back in place, the next try (within a few seconds) fetches it.
    fetched_in_the_end(&cluster, &missed, &moved);
}

/// A fetch still failing when its node stops goes on after the restart: the version that
/// names the blob was applied before (an orderly stop flushes the state, so no entry brings
/// it again), and only the fetch's own `.part` file tells the replica it lacks the blob.
#[test]
fn a_fetch_cut_short_by_a_restart_goes_on_after_it() {
    let (mut cluster, missed, moved) = a_fetch_that_failed();
    let parts = std::fs::read_dir(cluster.dirs[2].path().join("blobs/0"))
        .unwrap()
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|e| e == "part"))
        .count();
    assert_eq!(parts, 1, "the fetch under way left no part file");
    cluster.stop(2);
    cluster.restart(2);
    cluster.wait_for_leaders(2, None);
    fetched_in_the_end(&cluster, &missed, &moved);
}

/// `firn put --file` and `firn get --output` stream a file through a node's HTTP API.
#[test]
fn the_cli_puts_a_file_and_gets_it_back() {
    let cluster = Cluster::start(1, &["--max-value-bytes", "65536"]);
    cluster.wait_for_leaders(0, None);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    let data = value(5 * 1024 * 1024 + 3, 9);
    std::fs::write(&input, &data).unwrap();
    let firn = |args: &[&str]| {
        let out = std::process::Command::new(firn_bin())
            .args(args)
            .args(["--http-addr", &cluster.http_addr(0)])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, said) = firn(&["put", "files/one two", "--file", input.to_str().unwrap()]);
    assert!(ok && said.starts_with("version 1"), "{said}");
    let (ok, said) = firn(&["get", "files/one two", "--output", output.to_str().unwrap()]);
    assert!(ok, "{said}");
    assert!(
        std::fs::read(&output).unwrap() == data,
        "the file read back differs"
    );
    // Without --output, over RESP, the value is written as its exact bytes (it is not UTF-8).
    assert!(std::str::from_utf8(&data).is_err());
    let printed = std::process::Command::new(firn_bin())
        .args(["get", "files/one two", "--addr", &cluster.resp_addr(0)])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    assert!(
        printed.stdout == data,
        "firn get printed {} bytes for a value of {}",
        printed.stdout.len(),
        data.len()
    );
    // A failed condition is reported and changes nothing.
    let (ok, said) = firn(&[
        "put",
        "files/one two",
        "--file",
        input.to_str().unwrap(),
        "--if-version",
        "9",
    ]);
    assert!(!ok && said.contains("409"), "{said}");
    let (ok, said) = firn(&["get", "files/absent", "--output", output.to_str().unwrap()]);
    assert!(!ok && said.contains("not found"), "{said}");
}

/// A replica whose disk is below its reserve does not fetch the large values it missed (the
/// fetch would fill the disk, and the next write of its databases would then stop the node):
/// each try stops before the first chunk and is tried again later, and once it has room the
/// blob arrives.
#[test]
fn a_replica_low_on_disk_fetches_a_missed_large_value_only_once_it_has_room() {
    let mut cluster = Cluster::start(3, &["--shards", "1", "--max-value-bytes", "65536"]);
    cluster.wait_for_leaders(0, None);
    cluster.kill_9(2);
    let missed = value(5 * 1024 * 1024 + 5, 4);
    put_by_majority(&cluster, "film/low", &missed);

    // Back with a reserve no disk has: it learns the version and tries, but fetches nothing.
    cluster.restart_with(2, &["--disk-reserve-bytes", "1000000000000000000"]);
    let failed = r#"firn_blob_repairs_total{outcome="failed"}"#;
    assert!(
        wait_until(Duration::from_secs(30), || cluster.counter(2, failed)
            >= 2.0),
        "the low replica never tried (twice) to fetch the blob"
    );
    assert!(
        sealed(cluster.dirs[2].path()).is_empty(),
        "a replica low on disk fetched a large value"
    );

    // Room again: it fetches the blob.
    cluster.stop(2);
    cluster.restart(2);
    wait_for_the_blob(
        cluster.dirs[2].path(),
        &missed,
        "the replica never fetched the blob once it had room",
    );
}
