//! One shard's uplink, on its leader: read the hub's cursor for the shard, send the versions
//! after it (under the uplink prefixes, in the shard's commit order) a batch at a time, each
//! batch committed at the hub with the cursor; while the hub cannot be reached, wait and try
//! again — the site's history holds what waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::hlc::system_wall_us;
use firn_model::{KeyKind, WatchEvent};
use firn_raft::ShardReplica;
use firn_store::ChangePosition;
use tokio::sync::watch;

use super::UplinkConfig;
use super::hub::{Change, Hub, HubCursor, Sent};
use crate::router::Router;

/// Versions a batch takes at most.
const BATCH_VERSIONS_MAX: usize = 256;
/// Value bytes a batch takes at most (the hub takes 16 MiB in one transaction).
const BATCH_BYTES_MAX: usize = 8 << 20;
/// How long an idle runner waits before it looks for new versions again.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// How often an idle runner renews its cursor at the hub (its last contact).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// The waits between tries while the hub cannot be reached: doubling up to the most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// What the runner knows of the hub's cursor: its raw value (to compare against) and the
/// position it names.
struct Known {
    raw: Option<Bytes>,
    at: ChangePosition,
}

struct Runner {
    router: Arc<Router>,
    config: Arc<UplinkConfig>,
    replica: Arc<ShardReplica>,
    hub: Option<Hub>,
    known: Option<Known>,
    /// The last position known to be at the hub (kept while the hub cannot be reached, so
    /// that the lag keeps growing).
    sent_through: ChangePosition,
    last_contact: Option<Instant>,
}

/// Follows `replica`'s shard for as long as this node leads it (or until `stop`).
pub async fn follow(
    router: Arc<Router>,
    config: Arc<UplinkConfig>,
    replica: Arc<ShardReplica>,
    mut stop: watch::Receiver<bool>,
) {
    let node = router.kernel().node_id();
    let shard = replica.shard_id().to_string();
    let mut runner = Runner {
        router,
        config,
        replica,
        hub: None,
        known: None,
        sent_through: ChangePosition::default(),
        last_contact: None,
    };
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
                // Whatever was sent may or may not have applied: the hub's cursor says.
                runner.hub = None;
                runner.known = None;
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

impl Runner {
    /// Sends one batch; answers how many versions went up.
    async fn round(&mut self) -> Result<usize, String> {
        let shard = self.replica.shard_id();
        let cursor_key = self.config.cursor_key(shard);
        if self.hub.is_none() {
            let mut hub = Hub::connect(&self.config.hub).await?;
            super::identity::check(&self.router, &self.config, &mut hub).await?;
            self.hub = Some(hub);
        }
        let known = match self.known.take() {
            Some(k) => k,
            None => match self.hub_mut().cursor(&cursor_key).await? {
                Some((raw, cursor)) => Known {
                    raw: Some(raw),
                    at: cursor.position()?,
                },
                None => Known {
                    raw: None,
                    at: ChangePosition::default(),
                },
            },
        };
        self.sent_through = known.at.clone();
        let events = self.changes_after(&known.at).await?;
        let shard_label = shard.to_string();
        let now_us = system_wall_us();
        let lag_ms = self.lag_of(&events, now_us);
        let idle = events.is_empty();
        let heartbeat_due = self
            .last_contact
            .is_none_or(|at| at.elapsed() >= HEARTBEAT_EVERY);
        if idle && !heartbeat_due {
            self.known = Some(known);
            return Ok(0);
        }
        let mut changes = Vec::with_capacity(events.len());
        let mut last = known.at.clone();
        let mut skipped = 0u64;
        for event in &events {
            last = ChangePosition::of(event);
            let too_large = event.info.blob.is_some() && event.info.value.is_none();
            if too_large || event.info.kind != KeyKind::String {
                skipped += 1;
                continue;
            }
            changes.push(Change {
                hub_key: self.config.hub_key(event.key.as_bytes()),
                value: (!event.info.deleted).then(|| event.info.value.clone().unwrap_or_default()),
                event_time_us: event
                    .info
                    .event_time_us
                    .unwrap_or(event.info.commit_ts.wall_us),
            });
        }
        let next = HubCursor::new(&last, now_us / 1_000, lag_ms).encode();
        match self
            .hub_mut()
            .send(&cursor_key, known.raw.as_ref(), &changes, &next)
            .await?
        {
            Sent::Applied { refused } => {
                self.last_contact = Some(Instant::now());
                metrics::gauge!("firn_uplink_last_contact_ms").set((now_us / 1_000) as f64);
                metrics::counter!("firn_uplink_sent_total", "shard" => shard_label.clone())
                    .increment(changes.len() as u64);
                if skipped > 0 {
                    metrics::counter!("firn_uplink_skipped_total").increment(skipped);
                }
                if refused > 0 {
                    tracing::warn!(
                        shard,
                        refused,
                        "the hub refused versions sent up (its keyspace does not take them)"
                    );
                    metrics::counter!("firn_uplink_refused_total").increment(refused as u64);
                }
                self.sent_through = last.clone();
                self.known = Some(Known {
                    raw: Some(next),
                    at: last,
                });
                Ok(events.len())
            }
            // Another runner of this shard (an old leader) moved it, or the batch applied
            // and its answer was lost: read it again.
            Sent::CursorMoved => Ok(0),
        }
    }

    /// How long the oldest of `events` (the versions not yet at the hub) has waited, in
    /// milliseconds; shown as `firn_uplink_lag_ms{shard}`.
    fn lag_of(&self, events: &[WatchEvent], now_us: u64) -> u64 {
        let lag_ms = events.first().map_or(0, |e| {
            now_us.saturating_sub(e.info.commit_ts.wall_us) / 1_000
        });
        let shard = self.replica.shard_id().to_string();
        metrics::gauge!("firn_uplink_lag_ms", "shard" => shard).set(lag_ms as f64);
        lag_ms
    }

    /// The lag while the hub cannot be reached: from the site's own versions.
    async fn note_lag(&self) {
        if let Ok(events) = self.changes_after(&self.sent_through).await {
            self.lag_of(&events, system_wall_us());
        }
    }

    fn hub_mut(&mut self) -> &mut Hub {
        self.hub
            .as_mut()
            .expect("connected at the start of each round")
    }

    /// The shard's versions under the uplink prefixes after `after`, in commit order: at
    /// most a batch, cut where any prefix's read was cut (so nothing is passed over).
    async fn changes_after(&self, after: &ChangePosition) -> Result<Vec<WatchEvent>, String> {
        let store = self.replica.store().clone();
        let prefixes = self.config.prefixes.clone();
        let after = after.clone();
        tokio::task::spawn_blocking(move || {
            let through = store.last_commit_ts();
            let mut all: Vec<WatchEvent> = Vec::new();
            let mut cut: Option<ChangePosition> = None;
            for prefix in &prefixes {
                let found = store
                    .changes(prefix, &after, through, BATCH_VERSIONS_MAX)
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
        })
        .await
        .map_err(|e| format!("reading the shard's versions: {e}"))?
    }
}
