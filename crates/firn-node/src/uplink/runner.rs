//! One shard's uplink, on its leader. The shard's *lanes* — its versions under the uplink
//! prefixes, its records of each uplink log, each uplink stream it holds — each have a
//! cursor at the hub: the runner reads it, sends what the shard has after it (in the
//! shard's commit order, in seq order, in id order) a batch at a time, each batch
//! committed at the hub with the lane's cursor; while the hub cannot be reached, it waits
//! and tries again — the site's history holds what waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::hlc::system_wall_us;
use firn_model::{KeyKind, LogSeq, WatchEvent};
use firn_raft::ShardReplica;
use firn_store::ChangePosition;
use tokio::sync::watch;

use super::UplinkConfig;
use super::hub::{Hub, HubCursor, HubStep, Sent};
use super::records::{self, BATCH_BYTES_MAX, BATCH_RECORDS_MAX};
use crate::router::Router;

/// Versions a batch takes at most.
const BATCH_VERSIONS_MAX: usize = BATCH_RECORDS_MAX;
/// How long an idle runner waits before it looks for new versions again.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// How often an idle lane renews its cursor at the hub (its last contact).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How often a lane the site cannot read (a log with too many tags in the shard) says so.
const SITE_ERROR_WARN_EVERY: Duration = Duration::from_secs(60);
/// The waits between tries while the hub cannot be reached: doubling up to the most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// What goes up from one shard with one cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Lane {
    /// The shard's versions under the uplink prefixes.
    Keys,
    /// The shard's records of a log (those whose home it is).
    Log(Bytes),
    /// A stream's entries, from the shard that holds it.
    Stream(Bytes),
}

/// Where a lane's cursor stands: a version (keys) or a seq (records, entries).
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    Change(ChangePosition),
    Seq(LogSeq),
}

impl At {
    fn of(cursor: &HubCursor, lane: &Lane) -> Result<At, String> {
        match lane {
            Lane::Keys => cursor.position().map(At::Change),
            Lane::Log(_) | Lane::Stream(_) => cursor.position().map(At::Seq),
        }
    }

    fn start(lane: &Lane) -> At {
        match lane {
            Lane::Keys => At::Change(ChangePosition::default()),
            Lane::Log(_) | Lane::Stream(_) => At::Seq(LogSeq::ZERO),
        }
    }

    fn encode(&self, sent_unix_ms: u64, lag_ms: u64) -> Bytes {
        match self {
            At::Change(p) => HubCursor::new(p, sent_unix_ms, lag_ms),
            At::Seq(s) => HubCursor::new(s, sent_unix_ms, lag_ms),
        }
        .encode()
    }

    fn seq(&self) -> LogSeq {
        match self {
            At::Seq(s) => *s,
            At::Change(_) => LogSeq::ZERO,
        }
    }

    fn change(&self) -> ChangePosition {
        match self {
            At::Change(p) => p.clone(),
            At::Seq(_) => ChangePosition::default(),
        }
    }
}

/// What the runner knows of a lane's cursor at the hub: its raw value (to compare against)
/// and the position it names.
struct Known {
    raw: Option<Bytes>,
    at: At,
}

/// One lane's state on the runner.
struct LaneState {
    lane: Lane,
    cursor_key: Vec<u8>,
    known: Option<Known>,
    /// The last position known to be at the hub (kept while the hub cannot be reached, so
    /// that the lag keeps growing).
    sent_through: At,
    /// When the lane's cursor was last written at the hub.
    renewed: Option<Instant>,
    /// When the lane last warned that the site's own read of it failed.
    warned: Option<Instant>,
}

/// What one lane has after its cursor: the steps to send, how many versions or records
/// were read (sent or skipped), the position after them, and the oldest one's stamp.
struct Batch {
    steps: Vec<HubStep>,
    read: usize,
    skipped: u64,
    last: At,
    oldest_wall_us: Option<u64>,
}

struct Runner {
    router: Arc<Router>,
    config: Arc<UplinkConfig>,
    replica: Arc<ShardReplica>,
    hub: Option<Hub>,
    lanes: Vec<LaneState>,
}

/// Follows `replica`'s shard for as long as this node leads it (or until `stop`).
pub async fn follow(
    router: Arc<Router>,
    config: Arc<UplinkConfig>,
    replica: Arc<ShardReplica>,
    mut stop: watch::Receiver<bool>,
) {
    let node = router.kernel().node_id();
    let shard = replica.shard_id();
    let lanes = lanes_of(&config, shard);
    let mut runner = Runner {
        router,
        config,
        replica,
        hub: None,
        lanes,
    };
    let shard = shard.to_string();
    let mut retry = RETRY_FIRST;
    while runner.replica.leader() == Some(node) {
        let wait = match runner.round().await {
            Ok(0) => IDLE_WAIT,
            Ok(_) => {
                retry = RETRY_FIRST;
                Duration::ZERO
            }
            Err(e) => {
                tracing::debug!(shard, "uplink to the hub: {e}");
                metrics::counter!("firn_uplink_errors_total", "shard" => shard.clone())
                    .increment(1);
                // Whatever was sent may or may not have applied: the hub's cursors say.
                runner.hub = None;
                for lane in &mut runner.lanes {
                    lane.known = None;
                }
                runner.note_lag().await;
                let w = retry;
                retry = (retry * 2).min(RETRY_MAX);
                w
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The lanes of shard `shard`: its keys (with uplink prefixes), each uplink log, each
/// uplink stream (sent only while the shard holds it).
fn lanes_of(config: &UplinkConfig, shard: firn_raft::ShardId) -> Vec<LaneState> {
    let keys = (!config.key_prefixes_up().is_empty())
        .then_some((Lane::Keys, config.cursor_key(shard).into_bytes()));
    let logs = config
        .logs
        .iter()
        .map(|l| (Lane::Log(l.clone()), config.log_cursor_key(shard, l)));
    let streams = config
        .streams
        .iter()
        .map(|s| (Lane::Stream(s.clone()), config.stream_cursor_key(shard, s)));
    keys.into_iter()
        .chain(logs)
        .chain(streams)
        .map(|(lane, cursor_key)| LaneState {
            sent_through: At::start(&lane),
            lane,
            cursor_key,
            known: None,
            renewed: None,
            warned: None,
        })
        .collect()
}

impl Runner {
    /// Sends one batch of each lane; answers how many versions and records went up.
    async fn round(&mut self) -> Result<usize, String> {
        if self.hub.is_none() {
            let mut hub = Hub::connect(&self.config).await?;
            super::identity::check(&self.router, &self.config, &mut hub).await?;
            self.hub = Some(hub);
        }
        let mut lanes = std::mem::take(&mut self.lanes);
        let mut sent = 0;
        let mut lag_ms = 0;
        let mut result = Ok(());
        for lane in &mut lanes {
            if !self.holds(&lane.lane) {
                continue;
            }
            match self.lane_round(lane).await {
                Ok((n, lag)) => {
                    sent += n;
                    lag_ms = lag_ms.max(lag);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.lanes = lanes;
        result?;
        self.set_lag(lag_ms);
        Ok(sent)
    }

    /// Whether this shard sends `lane` now: a stream only from the shard that holds it.
    fn holds(&self, lane: &Lane) -> bool {
        match lane {
            Lane::Stream(key) => {
                self.router.kernel().layout().shard_of_name(key) == self.replica.shard_id()
            }
            Lane::Keys | Lane::Log(_) => true,
        }
    }

    /// Sends one batch of `lane`; answers how many versions or records went up, and how
    /// long the oldest of them had waited (ms).
    async fn lane_round(&mut self, lane: &mut LaneState) -> Result<(usize, u64), String> {
        let known = match lane.known.take() {
            Some(k) => k,
            None => match self.hub_mut().cursor(&lane.cursor_key).await? {
                Some((raw, cursor)) => Known {
                    raw: Some(raw),
                    at: At::of(&cursor, &lane.lane)?,
                },
                None => Known {
                    raw: None,
                    at: At::start(&lane.lane),
                },
            },
        };
        lane.sent_through = known.at.clone();
        let batch = match self.batch_after(&lane.lane, &known.at).await {
            Ok(batch) => batch,
            // The site's own read failed: this lane waits, the others and the link go on.
            Err(e) => {
                self.site_error(lane, &e);
                lane.known = Some(known);
                return Ok((0, 0));
            }
        };
        let now_us = system_wall_us();
        let lag_ms = batch
            .oldest_wall_us
            .map_or(0, |t| now_us.saturating_sub(t) / 1_000);
        // Keys renew their cursor from the start (the site's first contact); a log or a
        // stream once it has one (a shard holding none of it leaves no cursor at the hub).
        let heartbeat_due = (lane.lane == Lane::Keys || known.raw.is_some())
            && lane
                .renewed
                .is_none_or(|at| at.elapsed() >= HEARTBEAT_EVERY);
        if batch.read == 0 && !heartbeat_due {
            lane.known = Some(known);
            return Ok((0, lag_ms));
        }
        let next = batch.last.encode(now_us / 1_000, lag_ms);
        let sent = self
            .hub_mut()
            .send(&lane.cursor_key, known.raw.as_ref(), &batch.steps, &next)
            .await?;
        match sent {
            Sent::Applied { refused } => {
                lane.renewed = Some(Instant::now());
                self.note_applied(&batch, refused, now_us);
                lane.sent_through = batch.last.clone();
                lane.known = Some(Known {
                    raw: Some(next),
                    at: batch.last,
                });
                Ok((batch.read, lag_ms))
            }
            // Another runner of this shard (an old leader) moved it, or the batch applied
            // and its answer was lost: read it again.
            Sent::CursorMoved => Ok((0, lag_ms)),
        }
    }

    /// Counts what a batch applied at the hub sent, skipped and had refused there.
    fn note_applied(&self, batch: &Batch, refused: usize, now_us: u64) {
        let shard = self.replica.shard_id();
        metrics::gauge!("firn_uplink_last_contact_ms").set((now_us / 1_000) as f64);
        metrics::counter!("firn_uplink_sent_total", "shard" => shard.to_string())
            .increment(batch.steps.len() as u64);
        if batch.skipped > 0 {
            metrics::counter!("firn_uplink_skipped_total").increment(batch.skipped);
        }
        if refused > 0 {
            tracing::warn!(
                shard,
                refused,
                "the hub refused versions or records sent up (its keyspace or log does not \
                 take them)"
            );
            metrics::counter!("firn_uplink_refused_total").increment(refused as u64);
        }
    }

    /// Counts a failed read of `lane` at the site, and warns of it now and then.
    fn site_error(&self, lane: &mut LaneState, e: &str) {
        let shard = self.replica.shard_id();
        metrics::counter!("firn_uplink_errors_total", "shard" => shard.to_string()).increment(1);
        if lane
            .warned
            .is_none_or(|at| at.elapsed() >= SITE_ERROR_WARN_EVERY)
        {
            lane.warned = Some(Instant::now());
            tracing::warn!(shard, "uplink: reading what goes up: {e}");
        }
    }

    /// Sets `firn_uplink_lag_ms{shard}`: how long the oldest version or record not yet at
    /// the hub has waited.
    fn set_lag(&self, lag_ms: u64) {
        let shard = self.replica.shard_id().to_string();
        metrics::gauge!("firn_uplink_lag_ms", "shard" => shard).set(lag_ms as f64);
    }

    /// The lag while the hub cannot be reached: from the site's own versions and records.
    async fn note_lag(&self) {
        let now_us = system_wall_us();
        let mut lag_ms = 0;
        for lane in &self.lanes {
            if !self.holds(&lane.lane) {
                continue;
            }
            if let Ok(batch) = self.batch_after(&lane.lane, &lane.sent_through).await {
                let lag = batch
                    .oldest_wall_us
                    .map_or(0, |t| now_us.saturating_sub(t) / 1_000);
                lag_ms = lag_ms.max(lag);
            }
        }
        self.set_lag(lag_ms);
    }

    fn hub_mut(&mut self) -> &mut Hub {
        self.hub
            .as_mut()
            .expect("connected at the start of each round")
    }

    /// What `lane` has after `after`, as the next batch.
    async fn batch_after(&self, lane: &Lane, after: &At) -> Result<Batch, String> {
        let store = self.replica.store().clone();
        let config = self.config.clone();
        let shard = self.replica.shard_id();
        let (lane, after) = (lane.clone(), after.clone());
        tokio::task::spawn_blocking(move || {
            let through = store.last_commit_ts();
            match &lane {
                Lane::Keys => {
                    let prefixes = config.key_prefixes_up();
                    let events = changes_after(&store, &prefixes, &after.change())?;
                    Ok(key_batch(&config, events, after))
                }
                Lane::Log(log) => {
                    let found = records::log_after(&store, shard, log, after.seq(), through)?;
                    Ok(record_batch(found, after, |r| {
                        Some(records::log_step(&config, log, r))
                    }))
                }
                Lane::Stream(key) => {
                    let found = records::stream_after(&store, key, after.seq(), through)?;
                    Ok(record_batch(found, after, |r| {
                        records::stream_step(&config, key, r)
                    }))
                }
            }
        })
        .await
        .map_err(|e| format!("reading the shard's versions and records: {e}"))?
    }
}

/// The versions `events` as a batch: puts (with their event time, or their stamp at the
/// site when they had none) and deletes; a large value (kept beside the log) and a key
/// that is not a string are skipped.
fn key_batch(config: &UplinkConfig, events: Vec<WatchEvent>, after: At) -> Batch {
    let mut steps = Vec::with_capacity(events.len());
    let mut skipped = 0u64;
    let mut last = after;
    for event in &events {
        last = At::Change(ChangePosition::of(event));
        if !config.goes_up(event.key.as_bytes()) {
            // A twin's desired document: it comes down, it does not go up.
            continue;
        }
        let too_large = event.info.blob.is_some() && event.info.value.is_none();
        if too_large || event.info.kind != KeyKind::String {
            skipped += 1;
            continue;
        }
        let key = config.hub_key(event.key.as_bytes());
        steps.push(if event.info.deleted {
            HubStep::Delete { key }
        } else {
            HubStep::Put {
                key,
                value: event.info.value.clone().unwrap_or_default(),
                event_time_us: event
                    .info
                    .event_time_us
                    .unwrap_or(event.info.commit_ts.wall_us),
            }
        });
    }
    Batch {
        steps,
        read: events.len(),
        skipped,
        last,
        oldest_wall_us: events.first().map(|e| e.info.commit_ts.wall_us),
    }
}

/// Records or entries read after `after` as a batch, each made a step by `step` (`None`:
/// skipped).
fn record_batch(
    found: Vec<firn_model::LogRecord>,
    after: At,
    step: impl Fn(&firn_model::LogRecord) -> Option<HubStep>,
) -> Batch {
    let steps: Vec<HubStep> = found.iter().filter_map(&step).collect();
    Batch {
        skipped: (found.len() - steps.len()) as u64,
        read: found.len(),
        last: found.last().map_or(after, |r| At::Seq(r.seq)),
        oldest_wall_us: found.first().map(|r| r.commit_ts.wall_us),
        steps,
    }
}

/// The shard's versions under `prefixes` after `after`, in commit order: at most a batch,
/// cut where any prefix's read was cut (so nothing is passed over).
fn changes_after(
    store: &firn_store::VersionedStore,
    prefixes: &[Bytes],
    after: &ChangePosition,
) -> Result<Vec<WatchEvent>, String> {
    let through = store.last_commit_ts();
    let mut all: Vec<WatchEvent> = Vec::new();
    let mut cut: Option<ChangePosition> = None;
    for prefix in prefixes {
        let found = store
            .changes(prefix, after, through, BATCH_VERSIONS_MAX)
            .map_err(|e| e.to_string())?;
        if found.len() == BATCH_VERSIONS_MAX
            && let Some(last) = found.last()
        {
            let at = ChangePosition::of(last);
            cut = Some(cut.map_or(at.clone(), |c| c.min(at)));
        }
        all.extend(found);
    }
    all.sort_by_cached_key(ChangePosition::of);
    all.dedup_by_key(|e| ChangePosition::of(e));
    if let Some(cut) = cut {
        all.retain(|e| ChangePosition::of(e) <= cut);
    }
    let mut bytes = 0usize;
    let mut taken = 0usize;
    for e in &all {
        bytes += e.info.value.as_ref().map_or(0, Bytes::len);
        if taken == BATCH_VERSIONS_MAX || (taken > 0 && bytes > BATCH_BYTES_MAX) {
            break;
        }
        taken += 1;
    }
    all.truncate(taken);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::{CommitTs, Key, LogRecord};

    #[test]
    fn a_shard_has_a_lane_for_its_keys_each_log_and_each_stream() {
        let config = UplinkConfig::parse(
            "s",
            "redis://h:1",
            Some("sensor/,log:events,stream:alarms"),
            None,
        )
        .unwrap();
        let lanes = lanes_of(&config, 2);
        let named: Vec<(Lane, String)> = lanes
            .iter()
            .map(|l| {
                (
                    l.lane.clone(),
                    String::from_utf8(l.cursor_key.clone()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            named,
            [
                (Lane::Keys, "firn.uplink/s/2".to_string()),
                (
                    Lane::Log(Bytes::from("events")),
                    "firn.uplink/s/2/log/events".to_string()
                ),
                (
                    Lane::Stream(Bytes::from("alarms")),
                    "firn.uplink/s/2/stream/alarms".to_string()
                ),
            ]
        );
        let logs_only = UplinkConfig::parse("s", "redis://h:1", Some("log:events"), None).unwrap();
        assert_eq!(lanes_of(&logs_only, 0).len(), 1);
    }

    #[test]
    fn a_record_batch_moves_the_cursor_past_what_it_skipped() {
        let record = |ms: u64| LogRecord {
            seq: LogSeq::new(ms, 0),
            tags: vec![Key::new(Bytes::from("t")).unwrap()],
            payload: Bytes::new(),
            commit_ts: CommitTs::new(ms * 1_000, 0),
        };
        let found = vec![record(1), record(2), record(3)];
        let batch = record_batch(found, At::Seq(LogSeq::ZERO), |r| {
            (r.seq.ms != 2).then(|| HubStep::Delete {
                key: r.seq.ms.to_string().into_bytes(),
            })
        });
        assert_eq!((batch.read, batch.skipped, batch.steps.len()), (3, 1, 2));
        assert_eq!(batch.last, At::Seq(LogSeq::new(3, 0)));
        assert_eq!(batch.oldest_wall_us, Some(1_000));
        // Nothing read: the cursor stays.
        let idle = record_batch(Vec::new(), At::Seq(LogSeq::new(9, 9)), |_| None);
        assert_eq!((idle.read, idle.last), (0, At::Seq(LogSeq::new(9, 9))));
    }
}
