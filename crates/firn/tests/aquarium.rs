//! The Freeze-Frame File System's "wave in an aquarium", as a test: cameras write frames of a
//! wave into different shards at a steady rate, one camera looks at another's frame before
//! writing its own, and readers take snapshots on random replicas while they write. No
//! snapshot may be torn.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard};
use firn_client::{Client, PutOptions};
use firn_model::{CommitTs, Key, ReadAt, ReadConsistency, SnapshotOf};
use tokio::sync::Mutex;

const CAMERAS: usize = 6;
const RUN: Duration = Duration::from_secs(3);
const FRAME_EVERY: Duration = Duration::from_millis(10);

/// A frame as a camera writes it: its sequence number, the wave's phase it saw, and (for the
/// camera that looks at another) the sequence of the frame it looked at.
fn frame(seq: u64, saw: u64) -> String {
    format!("{seq} {} {saw}", seq % 16)
}

fn parse(v: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(v);
    let parts: Vec<u64> = text.split(' ').map(|p| p.parse().unwrap()).collect();
    (parts[0], parts[2])
}

/// Every acknowledged frame, per camera: (commit_ts, sequence).
type Written = Arc<Mutex<Vec<Vec<(CommitTs, u64)>>>>;

struct Snapshot {
    at: CommitTs,
    /// Per camera: (sequence, saw) of the frame the snapshot holds, if any.
    frames: Vec<Option<(u64, u64)>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_the_aquarium_are_never_torn() {
    let cluster = tokio::task::spawn_blocking(|| {
        let c = Cluster::start(3, &[]);
        c.wait_for_leaders(0, None);
        c
    })
    .await
    .unwrap();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(Client::connect(&cluster.resp_addr(i)).await.unwrap());
    }
    // Two cameras per shard.
    let cams: Vec<String> = (0..CAMERAS)
        .map(|i| key_in_shard((i % 3) as u32, &format!("cam/{i}-")))
        .collect();
    let keys: Vec<Key> = cams
        .iter()
        .map(|c| Key::new(c.clone().into_bytes()).unwrap())
        .collect();

    let written: Written = Arc::new(Mutex::new(vec![Vec::new(); CAMERAS]));
    let started = Instant::now();
    let mut cameras = Vec::new();
    for (i, cam) in cams.iter().enumerate() {
        // Each camera is a session of its own, on the node after the one leading its shard.
        let client = Client::connect(&cluster.resp_addr((i + 1) % 3))
            .await
            .unwrap();
        let (cam, watched, written) = (cam.clone(), cams[0].clone(), written.clone());
        cameras.push(tokio::spawn(async move {
            let mut seq = 0;
            while started.elapsed() < RUN {
                seq += 1;
                // Camera 1 looks at camera 0's newest frame before it writes its own.
                let saw = if i == 1 {
                    client
                        .get(
                            watched.as_bytes(),
                            ReadAt::Latest,
                            ReadConsistency::Linearizable,
                        )
                        .await
                        .unwrap()
                        .and_then(|v| v.value)
                        .map_or(0, |v| parse(&v).0)
                } else {
                    0
                };
                let ack = client
                    .put(
                        cam.as_bytes(),
                        frame(seq, saw).as_bytes(),
                        PutOptions::default(),
                    )
                    .await
                    .unwrap();
                written.lock().await[i].push((ack.commit_ts, seq));
                tokio::time::sleep(FRAME_EVERY).await;
            }
        }));
    }

    // Readers: snapshots now on a random node, and now and then the same time asked of
    // another node, which must agree.
    let mut readers = Vec::new();
    for r in 0..2 {
        let (nodes, keys) = (nodes.clone(), keys.clone());
        readers.push(tokio::spawn(async move {
            let mut taken = Vec::new();
            let (mut lags_us, mut agreed) = (Vec::new(), 0);
            let mut n = r;
            while started.elapsed() < RUN {
                n += 1;
                let asked = firn_model::hlc::system_wall_us();
                let (at, items) = nodes[n % 3]
                    .snapshot(&SnapshotOf::Keys(keys.clone()), None)
                    .await
                    .unwrap();
                lags_us.push(asked.saturating_sub(at.wall_us));
                let frames: Vec<Option<(u64, u64)>> = items
                    .iter()
                    .map(|(_, v)| v.as_ref().and_then(|v| v.value.as_ref()).map(|v| parse(v)))
                    .collect();
                if n % 5 == 0 {
                    let (again, other) = nodes[(n + 1) % 3]
                        .snapshot(&SnapshotOf::Keys(keys.clone()), Some(at))
                        .await
                        .unwrap();
                    let other: Vec<_> = other
                        .iter()
                        .map(|(_, v)| v.as_ref().and_then(|v| v.value.as_ref()).map(|v| parse(v)))
                        .collect();
                    assert_eq!(
                        (again, &other),
                        (at, &frames),
                        "two readers of {at} disagree"
                    );
                    agreed += 1;
                }
                taken.push(Snapshot { at, frames });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (taken, lags_us, agreed)
        }));
    }
    for c in cameras {
        c.await.unwrap();
    }
    let mut snapshots = Vec::new();
    let (mut lags_us, mut agreed) = (Vec::new(), 0);
    for r in readers {
        let (taken, lags, a) = r.await.unwrap();
        snapshots.extend(taken);
        lags_us.extend(lags);
        agreed += a;
    }
    lags_us.sort_unstable();
    let written = written.lock().await;

    let mut violations = Vec::new();
    for s in &snapshots {
        for (c, frames) in written.iter().enumerate() {
            // The newest acknowledged frame at or before T (every write was acknowledged).
            let newest = frames
                .iter()
                .filter(|(ts, _)| *ts <= s.at)
                .map(|(_, seq)| *seq)
                .max();
            let held = s.frames[c].map(|(seq, _)| seq);
            if held != newest {
                violations.push(format!(
                    "{}: camera {c} shows {held:?}, newest is {newest:?}",
                    s.at
                ));
            }
        }
        // Causality: camera 1's frame was written after it saw camera 0's frame `saw`.
        if let (Some((_, saw)), zero) = (s.frames[1], s.frames[0].map_or(0, |(seq, _)| seq))
            && zero < saw
        {
            violations.push(format!(
                "{}: camera 1 saw frame {saw} of camera 0, the snapshot holds {zero}",
                s.at
            ));
        }
    }
    let frames: usize = written.iter().map(Vec::len).sum();
    eprintln!(
        "aquarium: {} snapshots ({agreed} checked by a second reader), {frames} frames, {} violations, snapshot-now lag p50 {:.1} ms",
        snapshots.len(),
        violations.len(),
        lags_us.get(lags_us.len() / 2).copied().unwrap_or(0) as f64 / 1000.0
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(snapshots.len() >= 50, "only {} snapshots", snapshots.len());
    assert!(agreed >= 10, "only {agreed} snapshots checked twice");
    assert!(
        written[1].len() >= 20,
        "camera 1 wrote {} frames",
        written[1].len()
    );
}
