//! A site's uplink to its hub (docs/architecture.md, "Sites and a hub"): on every node, for
//! every shard it leads, a runner sends the shard's versions under the uplink prefixes to the
//! hub, after the cursor the hub keeps for that shard, each batch committed at the hub
//! together with the cursor ([`runner`]; the hub's side of it: [`hub`]).

mod hub;
mod runner;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_raft::ShardId;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::router::Router;

/// The longest site name, in bytes.
pub const SITE_NAME_BYTES_MAX: usize = 64;
/// Where the hub keeps a site's keys: site `S`'s key `K` is `sites/S/K` there.
pub const HUB_SITES_PREFIX: &str = "sites/";
/// Where the hub keeps each site shard's cursor: `firn.uplink/S/<shard>`.
pub const HUB_CURSOR_PREFIX: &str = "firn.uplink/";
/// How often a node looks at which shards it leads.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// What a site sends to its hub (`--site`, `--hub`, `--uplink`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UplinkConfig {
    pub site: String,
    /// The hub's RESP address as a URL: `redis://[user:password@]host:port`.
    pub hub: String,
    /// The key prefixes that go up.
    pub prefixes: Vec<Bytes>,
}

impl UplinkConfig {
    /// Checks `--site`, `--hub` and `--uplink` (a comma-separated list of key prefixes).
    pub fn parse(site: &str, hub: &str, uplink: &str) -> Result<UplinkConfig, String> {
        let name_ok = !site.is_empty()
            && site.len() <= SITE_NAME_BYTES_MAX
            && site
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(format!(
                "--site '{site}': 1 to {SITE_NAME_BYTES_MAX} letters, digits, '-' or '_'"
            ));
        }
        if !hub.starts_with("redis://") {
            return Err(format!(
                "--hub '{hub}': the hub's RESP address as redis://[user:password@]host:port \
                 (rediss:// is not supported yet)"
            ));
        }
        redis::Client::open(hub).map_err(|e| format!("--hub '{hub}': {e}"))?;
        let mut prefixes = Vec::new();
        for entry in uplink.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry.starts_with("log:") || entry.starts_with("stream:") {
                return Err(format!(
                    "--uplink '{entry}': logs and streams do not go up yet; name key prefixes"
                ));
            }
            prefixes.push(Bytes::copy_from_slice(entry.as_bytes()));
        }
        if prefixes.is_empty() {
            return Err("--uplink names no key prefix (say 'sensor/,alerts/')".into());
        }
        Ok(UplinkConfig {
            site: site.to_owned(),
            hub: hub.to_owned(),
            prefixes,
        })
    }

    /// Where site key `key` lives at the hub.
    pub fn hub_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(HUB_SITES_PREFIX.len() + self.site.len() + 1 + key.len());
        k.extend_from_slice(HUB_SITES_PREFIX.as_bytes());
        k.extend_from_slice(self.site.as_bytes());
        k.push(b'/');
        k.extend_from_slice(key);
        k
    }

    /// The hub key that holds shard `shard`'s cursor.
    pub fn cursor_key(&self, shard: ShardId) -> String {
        format!("{HUB_CURSOR_PREFIX}{}/{shard}", self.site)
    }
}

/// Runs an uplink runner for each shard this node leads, until `stop`.
pub async fn run(router: Arc<Router>, config: Arc<UplinkConfig>, mut stop: watch::Receiver<bool>) {
    let mut runners: HashMap<ShardId, JoinHandle<()>> = HashMap::new();
    let node = router.kernel().node_id();
    loop {
        runners.retain(|_, r| !r.is_finished());
        for replica in router.kernel().replicas().all() {
            let shard = replica.shard_id();
            if replica.leader() == Some(node) && !runners.contains_key(&shard) {
                let task = runner::follow(router.clone(), config.clone(), replica, stop.clone());
                runners.insert(shard, tokio::spawn(task));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = stop.changed() => break,
        }
    }
    for (_, r) in runners {
        r.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_names_a_site_a_hub_and_key_prefixes() {
        let c =
            UplinkConfig::parse("plant-1", "redis://127.0.0.1:7379", "sensor/, alerts/").unwrap();
        assert_eq!(c.prefixes, [Bytes::from("sensor/"), Bytes::from("alerts/")]);
        assert_eq!(c.hub_key(b"sensor/t"), b"sites/plant-1/sensor/t");
        assert_eq!(c.cursor_key(3), "firn.uplink/plant-1/3");
        for (site, hub, uplink) in [
            ("", "redis://h:1", "a/"),
            ("a/b", "redis://h:1", "a/"),
            ("s", "http://h:1", "a/"),
            ("s", "redis://h:1", ""),
            ("s", "redis://h:1", "a/,log:events"),
        ] {
            assert!(
                UplinkConfig::parse(site, hub, uplink).is_err(),
                "{site} {hub} {uplink}"
            );
        }
    }
}
