//! The hub's view of the sites that send to it: read from the cursors they keep at it
//! (`firn.uplink/<site>/<shard>`, and `…/<shard>/log/<name>`, `…/<shard>/stream/<key>` for
//! logs and streams; see `hub.rs`), for `/v1/cluster`, `/metrics` and the web page. A
//! cluster needs no setting to be a hub: any that holds such cursors shows them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::ReadConsistency;
use firn_model::hlc::system_wall_us;
use serde::Serialize;
use tokio::sync::watch;

use super::HUB_CURSOR_PREFIX;
use super::hub::HubCursor;
use crate::router::Router;

/// Cursors read at most (a site has one a shard): past it the view is cut short.
const CURSORS_MAX: usize = 10_000;
/// The longest the view may take to read.
const SITES_READ_WAIT: Duration = Duration::from_secs(1);
/// How often the hub's site gauges are set.
const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// One site as the hub last heard from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteView {
    pub site: String,
    /// The site's shards that sent anything.
    pub shards: usize,
    /// The site's wall clock when its latest batch or keep-alive was sent (ms since the
    /// Unix epoch), and how long ago that is by this node's clock.
    pub last_contact_unix_ms: u64,
    pub since_contact_ms: u64,
    /// The most any of its shards' oldest unsent version had waited, as of their last
    /// batches (ms): what the site had not yet sent then.
    pub lag_ms: u64,
}

/// Every site that keeps cursors here, as this node's replicas have them (a local read,
/// bounded by [`SITES_READ_WAIT`]: the view is never what makes `/v1/cluster` slow or fail;
/// none when it could not be read in time).
pub async fn sites(router: &Router) -> Vec<SiteView> {
    let read = router.latest_under(
        Bytes::from_static(HUB_CURSOR_PREFIX.as_bytes()),
        CURSORS_MAX,
        ReadConsistency::Local,
    );
    match tokio::time::timeout(SITES_READ_WAIT, read).await {
        Ok(Ok(cursors)) => views_of(cursors),
        _ => Vec::new(),
    }
}

/// Sets `firn_hub_site_last_contact_ms{site}` and `firn_hub_site_lag_ms{site}` every
/// [`GAUGES_EVERY`] until `stop` (on every node: any cluster can be a hub).
pub async fn follow(router: Arc<Router>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(GAUGES_EVERY) => {}
            _ = stop.changed() => return,
        }
        for v in sites(&router).await {
            metrics::gauge!("firn_hub_site_last_contact_ms", "site" => v.site.clone())
                .set(v.last_contact_unix_ms as f64);
            metrics::gauge!("firn_hub_site_lag_ms", "site" => v.site.clone()).set(v.lag_ms as f64);
        }
    }
}

fn views_of(cursors: Vec<(firn_model::Key, firn_model::VersionInfo)>) -> Vec<SiteView> {
    // Each site's cursors, with the shard each names (its keys', logs' and streams').
    let mut by_site: BTreeMap<String, Vec<(Vec<u8>, HubCursor)>> = BTreeMap::new();
    for (key, version) in cursors {
        let mut parts = key
            .as_bytes()
            .strip_prefix(HUB_CURSOR_PREFIX.as_bytes())
            .unwrap_or_default()
            .split(|&b| b == b'/');
        let site = parts.next().and_then(|s| std::str::from_utf8(s).ok());
        let shard = parts.next().unwrap_or_default().to_vec();
        let parsed = version
            .value
            .as_deref()
            .and_then(|v| serde_json::from_slice::<HubCursor>(v).ok());
        if let (Some(site), Some(c)) = (site, parsed) {
            by_site.entry(site.to_owned()).or_default().push((shard, c));
        }
    }
    let now_ms = system_wall_us() / 1_000;
    let views: Vec<SiteView> = by_site
        .into_iter()
        .map(|(site, cursors)| {
            let last = cursors
                .iter()
                .map(|(_, c)| c.sent_unix_ms)
                .max()
                .unwrap_or(0);
            let mut shards: Vec<&[u8]> = cursors.iter().map(|(s, _)| s.as_slice()).collect();
            shards.sort_unstable();
            shards.dedup();
            SiteView {
                shards: shards.len(),
                last_contact_unix_ms: last,
                since_contact_ms: now_ms.saturating_sub(last),
                lag_ms: cursors.iter().map(|(_, c)| c.lag_ms).max().unwrap_or(0),
                site,
            }
        })
        .collect();
    views
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::{Key, VersionInfo};

    fn cursor(key: &str, sent_unix_ms: u64, lag_ms: u64) -> (Key, VersionInfo) {
        let c = HubCursor::new(&firn_model::LogSeq::ZERO, sent_unix_ms, lag_ms);
        let info = VersionInfo {
            version: 1,
            commit_ts: firn_model::CommitTs::ZERO,
            event_time_us: None,
            deleted: false,
            value: Some(c.encode()),
            blob: None,
            kind: firn_model::KeyKind::String,
        };
        (Key::new(Bytes::from(key.to_owned())).unwrap(), info)
    }

    #[test]
    fn a_site_counts_its_shards_once_with_their_logs_and_streams() {
        let views = views_of(vec![
            cursor("firn.uplink/plant1/0", 10, 0),
            cursor("firn.uplink/plant1/0/log/events", 30, 7),
            cursor("firn.uplink/plant1/1/stream/alarms", 20, 0),
            cursor("firn.uplink/plant2/0", 5, 0),
        ]);
        let shown: Vec<(&str, usize, u64, u64)> = views
            .iter()
            .map(|v| (v.site.as_str(), v.shards, v.last_contact_unix_ms, v.lag_ms))
            .collect();
        assert_eq!(shown, [("plant1", 2, 30, 7), ("plant2", 1, 5, 0)]);
    }
}
