//! The Freeze-Frame File System's "wave in an aquarium", on Firn.
//!
//! Cameras film a wave: each writes frames (`cam/<i>`, the frame's sequence and the phase of
//! the wave it saw) at a steady rate, into different shards. Every odd camera looks at the
//! camera before it and names the frame it saw in its own (a causal dependency). Readers take
//! snapshots — one read of every camera at one time T — on random replicas while the
//! cameras film, and now and then ask another replica for the same T.
//!
//! [`check`] then holds every snapshot to the three promises of a consistent cut:
//! - each camera's frame is the newest one acknowledged at or before T (nothing torn, nothing
//!   missing, nothing from after T);
//! - no frame is there without the frame it saw (causal);
//! - two replicas asked for the same T answer the same (repeatable), and a reader's
//!   snapshots never go back in time (monotone).
//!
//! [`render_png`] draws each snapshot as a row of an image: a consistent cut is a smooth
//! wave, a torn one a visible break.

use std::io::Write;
use std::time::{Duration, Instant};

use firn_client::{Client, PutOptions, retry_transient};
use firn_model::hlc::system_wall_us;
use firn_model::{CommitTs, Key, ReadAt, ReadConsistency, SnapshotOf};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The key a run writes first; every session of the run starts after it.
pub const START_KEY: &str = "aquarium/start";

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// RESP addresses of the nodes; cameras and readers spread over them.
    pub nodes: Vec<String>,
    /// The cameras' keys. The run deletes them first.
    pub cameras: Vec<String>,
    pub run_for: Duration,
    pub frame_every: Duration,
    pub readers: usize,
    pub snapshot_every: Duration,
    /// Every n-th snapshot of a reader is asked again, of another replica (0: never).
    pub recheck_every: usize,
    /// One period of the filmed wave.
    pub wave_period: Duration,
    /// How readers read the cameras.
    pub reads: Reads,
}

/// How a reader reads the cameras.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Reads {
    /// One snapshot: every camera as of one time T, on one replica.
    #[default]
    Snapshot,
    /// Through the file view, as any program reads files: each camera's file at one time T
    /// (`DIR/@T/<camera>`, T this machine's clock now, never before the reader's last) under
    /// one of these `firn mount` directories (one a node), picked at random; a recheck reads
    /// the same T under another.
    Files(Vec<std::path::PathBuf>),
    /// The control: each camera with its own linearizable read, one after another, on
    /// random nodes. The row claims the time of the newest frame it got, and the cameras
    /// read before that frame was written show older frames: torn.
    OneByOne,
}

impl Config {
    /// `cameras` cameras named `cam/0…` on `nodes`, filming for `run_for`, with the defaults:
    /// a frame every 10 ms, 2 readers taking a snapshot every 5 ms, every 5th asked again.
    pub fn new(nodes: Vec<String>, cameras: usize, run_for: Duration) -> Config {
        Config {
            nodes,
            cameras: (0..cameras).map(|i| format!("cam/{i}")).collect(),
            run_for,
            frame_every: Duration::from_millis(10),
            readers: 2,
            snapshot_every: Duration::from_millis(5),
            recheck_every: 5,
            wave_period: Duration::from_secs(1),
            reads: Reads::Snapshot,
        }
    }
}

/// One frame as a camera writes it: `"<seq> <phase> <saw>"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// 1, 2, 3 … per camera.
    pub seq: u64,
    /// The wave's phase when the frame was taken, in thousandths of a period.
    pub phase: u16,
    /// For a camera that looks at another: the sequence of the other's newest frame it saw
    /// before writing this one (0: none yet, or a camera that looks at nothing).
    pub saw: u64,
}

impl Frame {
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.seq, self.phase, self.saw)
    }

    pub fn decode(value: &[u8]) -> Result<Frame, Error> {
        let text = std::str::from_utf8(value)?;
        let mut parts = text.split(' ');
        let mut next = || -> Result<u64, Error> {
            Ok(parts
                .next()
                .ok_or_else(|| format!("frame '{text}' has too few parts"))?
                .parse()?)
        };
        let (seq, phase, saw) = (next()?, next()?, next()?);
        Ok(Frame {
            seq,
            phase: u16::try_from(phase).map_err(|_| format!("frame '{text}': phase > 65535"))?,
            saw,
        })
    }
}

/// The camera a camera looks at before each frame, if any: every odd camera at the one
/// before it.
pub fn watched(camera: usize) -> Option<usize> {
    (camera % 2 == 1).then(|| camera - 1)
}

/// One camera's frame in a snapshot (`None`: no frame at T).
pub type Frames = Vec<Option<Frame>>;

#[derive(Clone, Debug)]
pub struct Snapshot {
    pub reader: usize,
    /// The replica's node index that answered.
    pub node: usize,
    pub at: CommitTs,
    pub frames: Frames,
    /// The same T asked of another node: (node, time it answered for, frames).
    pub again: Option<(usize, CommitTs, Frames)>,
    /// How far T was behind the reader's clock when it asked, in µs.
    pub lag_us: u64,
}

/// Everything a run saw: every acknowledged frame and every snapshot.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub cameras: Vec<String>,
    /// Per camera, each acknowledged frame with its commit stamp, in the order written.
    pub written: Vec<Vec<(CommitTs, Frame)>>,
    /// Per reader, in the order taken.
    pub snapshots: Vec<Snapshot>,
    pub elapsed: Duration,
}

impl Report {
    pub fn frames_written(&self) -> usize {
        self.written.iter().map(Vec::len).sum()
    }

    pub fn rechecked(&self) -> usize {
        self.snapshots.iter().filter(|s| s.again.is_some()).count()
    }

    /// The lag of `snapshot now` behind real time at quantile `q` (0..=1), in ms.
    pub fn lag_ms(&self, q: f64) -> f64 {
        let mut lags: Vec<u64> = self.snapshots.iter().map(|s| s.lag_us).collect();
        if lags.is_empty() {
            return 0.0;
        }
        lags.sort_unstable();
        let i = ((lags.len() - 1) as f64 * q).round() as usize;
        lags[i] as f64 / 1000.0
    }
}

/// A broken promise: which snapshot (index into [`Report::snapshots`]) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub snapshot: usize,
    /// The camera whose frame is wrong, when it is one camera's.
    pub camera: Option<usize>,
    pub what: String,
}

/// The wave's phase now, in thousandths of a period.
fn phase_now(period: Duration) -> u16 {
    let period_us = period.as_micros().max(1) as u64;
    ((system_wall_us() % period_us) * 1000 / period_us) as u16
}

fn frames_of(items: &[(bytes::Bytes, Option<firn_model::VersionInfo>)]) -> Result<Frames, Error> {
    items
        .iter()
        .map(|(_, found)| {
            found
                .as_ref()
                .and_then(|v| v.value.as_ref())
                .map(|v| Frame::decode(v))
                .transpose()
        })
        .collect()
}

/// Films the wave and takes snapshots for `config.run_for`; the cameras' keys are deleted
/// first, and every session starts after those deletes.
pub async fn run(config: &Config) -> Result<Report, Error> {
    if config.nodes.is_empty() || config.cameras.is_empty() {
        return Err("give at least one node and one camera".into());
    }
    let n = config.nodes.len();
    let mut nodes = Vec::with_capacity(n);
    for addr in &config.nodes {
        nodes.push(
            Client::connect(addr)
                .await
                .map_err(|e| format!("{addr}: {e}"))?,
        );
    }
    // A clean slate: earlier frames would otherwise count as this run's. Then a start
    // mark, so every session below starts after the deletes (deleting a key that never
    // existed writes nothing and carries no stamp).
    for cam in &config.cameras {
        retry_transient(|| nodes[0].delete(cam.as_bytes())).await?;
    }
    let start_token =
        retry_transient(|| nodes[0].put(START_KEY.as_bytes(), b"started", PutOptions::default()))
            .await?
            .commit_ts;
    let keys: Vec<Key> = config
        .cameras
        .iter()
        .map(|c| Key::new(c.clone().into_bytes()))
        .collect::<Result<_, _>>()?;

    let started = Instant::now();
    let mut cameras = Vec::new();
    for (i, cam) in config.cameras.iter().enumerate() {
        // Each camera is a session of its own, spread over the nodes.
        let client = Client::connect(&config.nodes[(i + 1) % n]).await?;
        client.after(start_token).await?;
        let cam = cam.clone();
        let looks_at = watched(i).map(|w| config.cameras[w].clone());
        let config = config.clone();
        cameras.push(tokio::spawn(async move {
            let mut frames = Vec::new();
            let mut tick = tokio::time::interval(config.frame_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seq = 0;
            while started.elapsed() < config.run_for {
                tick.tick().await;
                seq += 1;
                let saw = match &looks_at {
                    Some(other) => retry_transient(|| {
                        client.get(
                            other.as_bytes(),
                            ReadAt::Latest,
                            ReadConsistency::Linearizable,
                        )
                    })
                    .await?
                    .and_then(|v| v.value)
                    .map(|v| Frame::decode(&v))
                    .transpose()?
                    .map_or(0, |f| f.seq),
                    None => 0,
                };
                let frame = Frame {
                    seq,
                    phase: phase_now(config.wave_period),
                    saw,
                };
                let encoded = frame.encode();
                let ack = retry_transient(|| {
                    client.put(cam.as_bytes(), encoded.as_bytes(), PutOptions::default())
                })
                .await?;
                frames.push((ack.commit_ts, frame));
            }
            Ok::<_, Error>(frames)
        }));
    }

    let mut readers = Vec::new();
    for reader in 0..config.readers {
        let (nodes, keys, config) = (nodes.clone(), keys.clone(), config.clone());
        readers.push(tokio::spawn(async move {
            let of = SnapshotOf::Keys(keys);
            let mut taken = Vec::new();
            // A reader is one session over every node: it hands its token to the node it
            // asks next, so its snapshots never go back in time.
            let mut token = start_token;
            while started.elapsed() < config.run_for {
                let node = fastrand::usize(..n);
                let asked = system_wall_us();
                let (at, frames, again) = match &config.reads {
                    Reads::Files(mounts) => {
                        let at = CommitTs::end_of_micros(system_wall_us()).max(token);
                        token = at;
                        let m = fastrand::usize(..mounts.len());
                        let frames = read_files(&mounts[m], &config.cameras, at).await?;
                        let recheck = config.recheck_every > 0
                            && (taken.len() + 1) % config.recheck_every == 0;
                        let again = if recheck && mounts.len() > 1 {
                            let other =
                                (m + 1 + fastrand::usize(..mounts.len() - 1)) % mounts.len();
                            let frames = read_files(&mounts[other], &config.cameras, at).await?;
                            Some((other, at, frames))
                        } else {
                            None
                        };
                        (at, frames, again)
                    }
                    Reads::OneByOne => {
                        let (at, frames) = one_by_one(&nodes, &of).await?;
                        (at, frames, None)
                    }
                    Reads::Snapshot => {
                        nodes[node].after(token).await?;
                        let (at, items) =
                            retry_transient(|| nodes[node].snapshot(&of, None)).await?;
                        token = token.max(at);
                        let recheck = config.recheck_every > 0
                            && (taken.len() + 1) % config.recheck_every == 0;
                        let again = if recheck {
                            let other = if n > 1 {
                                (node + 1 + fastrand::usize(..n - 1)) % n
                            } else {
                                node
                            };
                            let (at2, items2) =
                                retry_transient(|| nodes[other].snapshot(&of, Some(at))).await?;
                            Some((other, at2, frames_of(&items2)?))
                        } else {
                            None
                        };
                        (at, frames_of(&items)?, again)
                    }
                };
                taken.push(Snapshot {
                    reader,
                    node,
                    at,
                    frames,
                    again,
                    lag_us: asked.saturating_sub(at.wall_us),
                });
                tokio::time::sleep(config.snapshot_every).await;
            }
            Ok::<_, Error>(taken)
        }));
    }

    let mut report = Report {
        cameras: config.cameras.clone(),
        ..Report::default()
    };
    for c in cameras {
        report.written.push(c.await??);
    }
    for r in readers {
        report.snapshots.extend(r.await??);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Every camera's frame at `at` read as a file under the mount `root`: `root/@T/<camera>`
/// (absent: no frame then), off the async workers.
async fn read_files(
    root: &std::path::Path,
    cameras: &[String],
    at: CommitTs,
) -> Result<Frames, Error> {
    let dir = root.join(format!("@{at}"));
    let cameras = cameras.to_vec();
    tokio::task::spawn_blocking(move || {
        cameras
            .iter()
            .map(|cam| match std::fs::read(dir.join(cam)) {
                Ok(bytes) => Frame::decode(&bytes).map(Some),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", dir.join(cam).display()).into()),
            })
            .collect()
    })
    .await
    .map_err(|e| Error::from(e.to_string()))?
}

/// The control reader: each camera read on its own, latest and linearizable, on a random
/// node; the time claimed is that of the newest frame read.
async fn one_by_one(nodes: &[Client], of: &SnapshotOf) -> Result<(CommitTs, Frames), Error> {
    let SnapshotOf::Keys(keys) = of else {
        return Err("one-by-one reads take keys".into());
    };
    let (mut at, mut frames) = (CommitTs::ZERO, Vec::with_capacity(keys.len()));
    for key in keys {
        let node = &nodes[fastrand::usize(..nodes.len())];
        let found = retry_transient(|| {
            node.get(
                key.as_bytes(),
                ReadAt::Latest,
                ReadConsistency::Linearizable,
            )
        })
        .await?;
        if let Some(v) = &found {
            at = at.max(v.commit_ts);
        }
        frames.push(
            found
                .and_then(|v| v.value)
                .map(|v| Frame::decode(&v))
                .transpose()?,
        );
    }
    Ok((at, frames))
}

/// Holds every snapshot to the promises of a consistent cut; empty when all are kept.
pub fn check(report: &Report) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut flag = |snapshot: usize, camera: Option<usize>, what: String| {
        violations.push(Violation {
            snapshot,
            camera,
            what,
        })
    };
    for (i, s) in report.snapshots.iter().enumerate() {
        if s.frames.len() != report.written.len() {
            flag(
                i,
                None,
                format!(
                    "{}: {} frames for {} cameras",
                    s.at,
                    s.frames.len(),
                    report.written.len()
                ),
            );
            continue;
        }
        for (c, frames) in report.written.iter().enumerate() {
            // The newest acknowledged at or before T (every frame written was acknowledged).
            let newest = frames
                .iter()
                .filter(|(ts, _)| *ts <= s.at)
                .map(|(_, f)| f.seq)
                .max();
            let held = s.frames[c].map(|f| f.seq);
            if held != newest {
                flag(
                    i,
                    Some(c),
                    format!(
                        "{}: camera {c} shows frame {held:?}, the newest at T is {newest:?}",
                        s.at
                    ),
                );
            }
            if let (Some(w), Some(frame)) = (watched(c), s.frames[c]) {
                let there = s.frames[w].map_or(0, |f| f.seq);
                if there < frame.saw {
                    flag(
                        i,
                        Some(c),
                        format!(
                            "{}: camera {c}'s frame {} saw frame {} of camera {w}, the snapshot holds {there}",
                            s.at, frame.seq, frame.saw
                        ),
                    );
                }
            }
        }
        if let Some((node, at, frames)) = &s.again
            && (*at != s.at || *frames != s.frames)
        {
            flag(
                i,
                None,
                format!(
                    "{}: node {} and node {node} disagree ({:?} against {:?} at {at})",
                    s.at, s.node, s.frames, frames
                ),
            );
        }
    }
    // Monotone: a reader (one session) never sees time go back, nor any camera.
    for (i, pair) in report.snapshots.windows(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        if a.reader != b.reader {
            continue;
        }
        let went_back = b.at < a.at
            || a.frames
                .iter()
                .zip(&b.frames)
                .any(|(x, y)| x.map(|f| f.seq) > y.map(|f| f.seq));
        if went_back {
            flag(
                i + 1,
                None,
                format!(
                    "reader {}: the snapshot at {} went back from the one at {}",
                    b.reader, b.at, a.at
                ),
            );
        }
    }
    violations
}

/// How many shards the cameras' keys fall in (from `CLUSTER KEYSLOT` and `CLUSTER SLOTS`).
pub async fn shards_spanned(client: &Client, cameras: &[String]) -> Result<usize, Error> {
    let slots = client
        .raw(&redis::cmd("CLUSTER").arg("SLOTS").clone())
        .await?;
    let ranges: Vec<(i64, i64)> = match slots {
        redis::Value::Array(shards) => shards
            .iter()
            .filter_map(|s| match s {
                redis::Value::Array(items) => match (items.first(), items.get(1)) {
                    (Some(redis::Value::Int(a)), Some(redis::Value::Int(b))) => Some((*a, *b)),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        other => return Err(format!("CLUSTER SLOTS answered {other:?}").into()),
    };
    let mut spanned = std::collections::BTreeSet::new();
    for cam in cameras {
        let slot = match client
            .raw(&redis::cmd("CLUSTER").arg("KEYSLOT").arg(cam).clone())
            .await?
        {
            redis::Value::Int(s) => s,
            other => return Err(format!("CLUSTER KEYSLOT answered {other:?}").into()),
        };
        if let Some(r) = ranges.iter().position(|(a, b)| (*a..=*b).contains(&slot)) {
            spanned.insert(r);
        }
    }
    Ok(spanned.len())
}

/// Width of one camera's band and of the pass/fail margin, in pixels.
const BAND: usize = 16;
const MARGIN: usize = 6;
/// A camera's band where its frame broke a promise, and the margin of such a row.
const TORN: [u8; 3] = [220, 30, 30];

/// The image's (width, height): one band per camera plus a margin, one row per snapshot.
pub fn image_size(report: &Report) -> (u32, u32) {
    (
        (MARGIN + BAND * report.cameras.len()) as u32,
        report.snapshots.len().max(1) as u32,
    )
}

/// Draws the snapshots as rows of an image, in the order of their times: each camera's band
/// is the height of the wave in the frame the snapshot holds (dark blue trough, light crest,
/// black: no frame). A consistent cut is a smooth wave across the row; a camera whose frame
/// broke a promise is red. The margin is green for a snapshot that kept every promise, red
/// for one that broke any.
pub fn render_png<W: Write>(
    report: &Report,
    violations: &[Violation],
    out: W,
) -> Result<(), Error> {
    let (width, height) = image_size(report);
    let cameras = report.cameras.len().max(1);
    let broken: std::collections::HashSet<usize> = violations.iter().map(|v| v.snapshot).collect();
    let torn: std::collections::HashSet<(usize, usize)> = violations
        .iter()
        .filter_map(|v| Some((v.snapshot, v.camera?)))
        .collect();
    let mut order: Vec<usize> = (0..report.snapshots.len()).collect();
    order.sort_by_key(|&i| (report.snapshots[i].at, i));
    let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
    for &i in &order {
        let s = &report.snapshots[i];
        let margin = if broken.contains(&i) {
            TORN
        } else {
            [30, 180, 60]
        };
        for _ in 0..MARGIN {
            pixels.extend_from_slice(&margin);
        }
        for c in 0..report.cameras.len() {
            let color = match s.frames.get(c).copied().flatten() {
                _ if torn.contains(&(i, c)) => TORN,
                None => [0, 0, 0],
                Some(f) => {
                    let angle = 2.0
                        * std::f64::consts::PI
                        * (f64::from(f.phase) / 1000.0 - c as f64 / cameras as f64);
                    let h = 0.5 + 0.5 * angle.sin();
                    [
                        (20.0 + 200.0 * h * h) as u8,
                        (60.0 + 170.0 * h) as u8,
                        (110.0 + 145.0 * h) as u8,
                    ]
                }
            };
            for _ in 0..BAND {
                pixels.extend_from_slice(&color);
            }
        }
    }
    if order.is_empty() {
        pixels.resize(width as usize * 3, 0);
    }
    let mut encoder = png::Encoder::new(out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests;
