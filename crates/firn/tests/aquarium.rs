//! The Freeze-Frame File System's "wave in an aquarium" (examples/aquarium), as a test: six
//! cameras in three shards film for 3 s, odd cameras look at the one before, two readers
//! take snapshots on random replicas (and then read the cameras as files through `firn mount`
//! directories, one a node). No snapshot may break a promise of a consistent cut;
//! reading the cameras one by one instead must be caught torn by the same check.

mod common;

use std::time::Duration;

use common::{Cluster, key_in_shard};
use firn_aquarium::{Config, Reads, check, render_png, run, shards_spanned};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_the_aquarium_are_never_torn() {
    let cluster = Cluster::ready(3, &[]).await;
    let nodes: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let mut config = Config::new(nodes, 6, Duration::from_secs(3));
    // Two cameras per shard; each odd camera's neighbour is in another shard.
    config.cameras = (0..6)
        .map(|i| key_in_shard((i % 3) as u32, &format!("cam/{i}-")))
        .collect();
    let first = firn_client::Client::connect(&config.nodes[0])
        .await
        .unwrap();
    assert_eq!(shards_spanned(&first, &config.cameras).await.unwrap(), 3);

    let report = run(&config).await.unwrap();
    let violations = check(&report);
    eprintln!(
        "aquarium: {} snapshots ({} asked again), {} frames, {} violations, snapshot-now lag p50 {:.1} ms",
        report.snapshots.len(),
        report.rechecked(),
        report.frames_written(),
        violations.len(),
        report.lag_ms(0.5)
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        report.snapshots.len() >= 50,
        "only {} snapshots",
        report.snapshots.len()
    );
    assert!(
        report.rechecked() >= 10,
        "only {} rechecked",
        report.rechecked()
    );
    // Enough frames to matter: how many a camera writes in the run follows the machine's
    // load (the claim is that no snapshot is torn, not the rate).
    assert!(
        report.written[1].len() >= 10 && report.written[1].iter().any(|(_, f)| f.saw > 0),
        "camera 1 wrote {} frames, none after seeing one",
        report.written[1].len()
    );
    // Snapshots hold frames (not only empty cuts).
    assert!(
        report
            .snapshots
            .iter()
            .filter(|s| s.frames.iter().all(Option::is_some))
            .count()
            >= report.snapshots.len() / 2
    );
    // Through the file view: every camera's file at one time under `firn mount`
    // directories (one a node), held to the same check.
    let mounts = tempfile::tempdir().unwrap();
    let mut mounted = Vec::new();
    for i in 0..3 {
        let dir = mounts.path().join(format!("node{i}"));
        std::fs::create_dir(&dir).unwrap();
        let child = common::mount::mount(&cluster.http_addr(i), &dir, &[]);
        mounted.push((child, dir));
    }
    config.reads = Reads::Files(mounted.iter().map(|(_, d)| d.clone()).collect());
    config.run_for = Duration::from_secs(3);
    let files = run(&config).await.unwrap();
    let violations = check(&files);
    eprintln!(
        "aquarium, as files: {} snapshots ({} read again through another node's mount), {} frames, {} violations",
        files.snapshots.len(),
        files.rechecked(),
        files.frames_written(),
        violations.len()
    );
    for (child, dir) in mounted {
        common::mount::stop(child, &dir);
    }
    assert!(violations.is_empty(), "{violations:#?}");
    // Each file is a lookup and a read through FUSE, each a read at T: slower than one
    // snapshot call, so fewer rows (about 35 in 3 s on 2 cores, debug build).
    assert!(
        files.snapshots.len() >= 10,
        "only {} snapshots",
        files.snapshots.len()
    );
    assert!(
        files.rechecked() >= 2,
        "only {} rechecked",
        files.rechecked()
    );
    assert!(
        files
            .snapshots
            .iter()
            .filter(|s| s.frames.iter().all(Option::is_some))
            .count()
            >= files.snapshots.len() / 2
    );

    // The control: the same cameras read one by one (each read linearizable, but not one
    // cut) are caught torn by the same check.
    config.reads = Reads::OneByOne;
    config.run_for = Duration::from_millis(1500);
    let control = run(&config).await.unwrap();
    let torn = check(&control);
    eprintln!(
        "aquarium, one by one: {} reads of every camera, {} violations",
        control.snapshots.len(),
        torn.len()
    );
    assert!(
        torn.iter().any(|v| v.what.contains("the newest at T")),
        "{} one-by-one reads and none torn",
        control.snapshots.len()
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wave.png");
    render_png(&report, &violations, std::fs::File::create(&path).unwrap()).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 100);
}
