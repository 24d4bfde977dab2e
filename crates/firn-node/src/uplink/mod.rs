//! A site's uplink to its hub (docs/architecture.md, "Sites and a hub"): on every node, for
//! every shard it leads, a runner sends the shard's versions under the uplink prefixes, its
//! records of the uplink logs and its entries of the uplink streams to the hub, each after
//! the cursor the hub keeps for it, each batch committed at the hub together with the
//! cursor ([`runner`]; records and entries: [`records`]; the hub's side of it: [`hub`]). A
//! hub shows the sites that send to it from those cursors ([`sites`]).

mod downlink;
mod hub;
mod identity;
mod records;
mod runner;
mod sites;

pub use downlink::DOWNLINK_KEYS_MAX;

pub use sites::{SiteView, follow as follow_sites, sites};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::TwinSide;
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
/// The longest log or stream name an uplink names, in bytes: its name at the hub
/// (`sites/S/NAME`) and its cursor's key stay far inside the key limit.
pub const UPLINK_NAME_BYTES_MAX: usize = 1_024;
/// Logs and streams an uplink names at most: each is a cursor, and a transaction at the
/// hub every 5 s while idle, per shard.
pub const UPLINK_NAMES_MAX: usize = 64;

/// What a site sends to its hub and takes back (`--site`, `--hub`, `--uplink`,
/// `--downlink`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UplinkConfig {
    pub site: String,
    /// The hub's RESP address as a URL: `redis://[user:password@]host:port`, or
    /// `rediss://…` over TLS.
    pub hub: String,
    /// With `rediss://`: the CA bundle (PEM) the hub's certificate is checked against
    /// (`--hub-ca`), read at start.
    pub hub_ca: Option<Vec<u8>>,
    /// The key prefixes that go up.
    pub prefixes: Vec<Bytes>,
    /// The logs whose records go up (`log:NAME`): each to the hub's log `sites/S/NAME`.
    pub logs: Vec<Bytes>,
    /// The streams whose entries go up (`stream:KEY`): each to the hub's stream
    /// `sites/S/KEY`.
    pub streams: Vec<Bytes>,
    /// The key prefixes whose desired state comes down from the hub.
    pub downlink: Vec<Bytes>,
    /// The key prefixes of device twins carried both ways (`twin:P`): each twin's
    /// reported document goes up as a key does, its desired document comes down.
    pub twins: Vec<Bytes>,
    /// The hub's cluster id, when the operator names it (`--hub-cluster-id`): else the
    /// first hub the site reaches is the one it sends to.
    pub hub_cluster_id: Option<String>,
}

/// What an `--uplink` list names: key prefixes, logs (`log:NAME`), streams
/// (`stream:KEY`) and twins (`twin:PREFIX`).
#[derive(Debug, Default, PartialEq, Eq)]
struct Named {
    prefixes: Vec<Bytes>,
    logs: Vec<Bytes>,
    streams: Vec<Bytes>,
    twins: Vec<Bytes>,
}

/// A comma-separated list of key prefixes, and with `names`, of `log:NAME`, `stream:KEY`
/// and `twin:PREFIX` entries.
fn entries_of(flag: &str, list: Option<&str>, names: bool) -> Result<Named, String> {
    let mut named = Named::default();
    for entry in list
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let kinds = [
            ("log name", "log:"),
            ("stream name", "stream:"),
            ("twin prefix", "twin:"),
        ];
        let Some((kind, name)) = kinds
            .iter()
            .find_map(|(kind, tag)| Some((*kind, entry.strip_prefix(tag)?)))
        else {
            named
                .prefixes
                .push(Bytes::copy_from_slice(entry.as_bytes()));
            continue;
        };
        if !names {
            return Err(format!(
                "{flag} '{entry}': logs, streams and twins are named in --uplink; \
                 --downlink names key prefixes"
            ));
        }
        if name.is_empty() || name.len() > UPLINK_NAME_BYTES_MAX {
            return Err(format!(
                "{flag} '{entry}': a {kind} is 1 to {UPLINK_NAME_BYTES_MAX} bytes"
            ));
        }
        let list = match kind {
            "log name" => &mut named.logs,
            "stream name" => &mut named.streams,
            _ => &mut named.twins,
        };
        let name = Bytes::copy_from_slice(name.as_bytes());
        if !list.contains(&name) {
            list.push(name);
        }
    }
    if named.logs.len() + named.streams.len() > UPLINK_NAMES_MAX {
        return Err(format!(
            "{flag}: {} logs and streams; at most {UPLINK_NAMES_MAX}",
            named.logs.len() + named.streams.len()
        ));
    }
    Ok(named)
}

impl UplinkConfig {
    /// Checks `--site`, `--hub`, `--uplink` and `--downlink` (comma-separated lists of key
    /// prefixes, the uplink's with `log:NAME` and `stream:KEY` entries too; one of them at
    /// least, and no prefix or stream in both — a key would go round).
    pub fn parse(
        site: &str,
        hub: &str,
        uplink: Option<&str>,
        downlink: Option<&str>,
    ) -> Result<UplinkConfig, String> {
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
        if !hub.starts_with("redis://") && !hub.starts_with("rediss://") {
            return Err(format!(
                "--hub '{hub}': the hub's RESP address as redis://[user:password@]host:port, \
                 or rediss://… over TLS"
            ));
        }
        redis::Client::open(hub).map_err(|e| format!("--hub '{hub}': {e}"))?;
        let Named {
            prefixes,
            logs,
            streams,
            twins,
        } = entries_of("--uplink", uplink, true)?;
        let downlink = entries_of("--downlink", downlink, false)?.prefixes;
        if prefixes.is_empty()
            && logs.is_empty()
            && streams.is_empty()
            && twins.is_empty()
            && downlink.is_empty()
        {
            return Err(
                "--site needs --uplink or --downlink naming a key prefix (say 'sensor/'), \
                 a log (log:NAME), a stream (stream:KEY) or twins (twin:PREFIX)"
                    .into(),
            );
        }
        let overlap = |a: &Bytes, b: &Bytes| a.starts_with(b) || b.starts_with(a);
        for twin in &twins {
            if let Some((other, flag)) = prefixes
                .iter()
                .map(|p| (p, "--uplink"))
                .chain(downlink.iter().map(|d| (d, "--downlink")))
                .find(|(other, _)| overlap(twin, other))
            {
                return Err(format!(
                    "--uplink 'twin:{}' and {flag} '{}' overlap: a twin's documents go one way each",
                    String::from_utf8_lossy(twin),
                    String::from_utf8_lossy(other)
                ));
            }
        }
        if let Some((stream, down)) = streams
            .iter()
            .find_map(|s| downlink.iter().find(|d| s.starts_with(d)).map(|d| (s, d)))
        {
            return Err(format!(
                "--uplink 'stream:{}' is under --downlink '{}': it would be sent up and taken down again",
                String::from_utf8_lossy(stream),
                String::from_utf8_lossy(down)
            ));
        }
        for up in &prefixes {
            if let Some(down) = downlink
                .iter()
                .find(|d| d.starts_with(up) || up.starts_with(d))
            {
                return Err(format!(
                    "--uplink '{}' and --downlink '{}' overlap: a key would be sent up and taken down again",
                    String::from_utf8_lossy(up),
                    String::from_utf8_lossy(down)
                ));
            }
        }
        Ok(UplinkConfig {
            site: site.to_owned(),
            hub: hub.to_owned(),
            prefixes,
            logs,
            streams,
            downlink,
            twins,
            hub_cluster_id: None,
            hub_ca: None,
        })
    }

    /// The hub named by its cluster id (`--hub-cluster-id`): 32 hex digits.
    /// `--hub-ca`: the CA bundle a `rediss://` hub's certificate is checked against — needed
    /// with `rediss://`, refused without it (it would protect nothing).
    pub fn trusting(mut self, ca: Option<&std::path::Path>) -> Result<UplinkConfig, String> {
        match (self.over_tls(), ca) {
            (true, None) => Err(format!(
                "--hub '{}': a hub over TLS needs --hub-ca, the CA bundle (PEM) its \
                 certificate is checked against",
                self.hub_address()
            )),
            (false, Some(_)) => {
                Err("--hub-ca is for a hub over TLS: give the hub as rediss://host:port".into())
            }
            (false, None) => Ok(self),
            (true, Some(path)) => {
                let pem =
                    std::fs::read(path).map_err(|e| format!("--hub-ca {}: {e}", path.display()))?;
                firn_client::TlsCa::from_pem(pem.clone())
                    .map_err(|e| format!("--hub-ca {}: {e}", path.display()))?;
                self.hub_ca = Some(pem);
                Ok(self)
            }
        }
    }

    /// Whether the hub is reached over TLS (`rediss://`).
    pub fn over_tls(&self) -> bool {
        self.hub.starts_with("rediss://")
    }

    pub fn naming_hub(mut self, id: Option<&str>) -> Result<UplinkConfig, String> {
        if let Some(id) = id {
            if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("--hub-cluster-id '{id}': 32 hex digits"));
            }
            self.hub_cluster_id = Some(id.to_ascii_lowercase());
        }
        Ok(self)
    }

    /// The hub's address without its password (for messages).
    pub fn hub_address(&self) -> &str {
        let after_scheme = self.hub.split_once("://").map_or(&*self.hub, |(_, a)| a);
        after_scheme
            .rsplit_once('@')
            .map_or(after_scheme, |(_, host)| host)
            .trim_end_matches('/')
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

    /// The site key a hub key of this site's stands for (`sites/NAME/K` → `K`).
    pub fn site_key_of<'k>(&self, hub_key: &'k [u8]) -> Option<&'k [u8]> {
        hub_key
            .strip_prefix(HUB_SITES_PREFIX.as_bytes())?
            .strip_prefix(self.site.as_bytes())?
            .strip_prefix(b"/")
    }

    /// Whether anything goes up (key prefixes, logs, streams or twins).
    pub fn sends(&self) -> bool {
        !(self.prefixes.is_empty()
            && self.logs.is_empty()
            && self.streams.is_empty()
            && self.twins.is_empty())
    }

    /// The key prefixes whose versions are read to go up: the uplink's and the twins'.
    pub fn key_prefixes_up(&self) -> Vec<Bytes> {
        self.prefixes.iter().chain(&self.twins).cloned().collect()
    }

    /// Whether a version of site key `key` (under [`UplinkConfig::key_prefixes_up`]) goes
    /// up: under a twin prefix, only a twin's reported document does.
    pub fn goes_up(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(p))
            || (self.twins.iter().any(|t| key.starts_with(t))
                && TwinSide::of_key(key) == Some(TwinSide::Reported))
    }

    /// The key prefixes whose state comes down, each with the one twin document it is
    /// limited to (the twins': their desired documents).
    pub fn downlink_prefixes(&self) -> Vec<(Bytes, Option<TwinSide>)> {
        let plain = self.downlink.iter().map(|d| (d.clone(), None));
        let twins = self
            .twins
            .iter()
            .map(|t| (t.clone(), Some(TwinSide::Desired)));
        plain.chain(twins).collect()
    }

    /// The hub key that holds shard `shard`'s cursor (of its keys).
    pub fn cursor_key(&self, shard: ShardId) -> String {
        format!("{HUB_CURSOR_PREFIX}{}/{shard}", self.site)
    }

    /// The hub key that holds the cursor of shard `shard`'s records of log `log`.
    pub fn log_cursor_key(&self, shard: ShardId, log: &[u8]) -> Vec<u8> {
        let mut k = format!("{HUB_CURSOR_PREFIX}{}/{shard}/log/", self.site).into_bytes();
        k.extend_from_slice(log);
        k
    }

    /// The hub key that holds the cursor of stream `key`'s entries (sent by the shard
    /// `shard` that holds it).
    pub fn stream_cursor_key(&self, shard: ShardId, key: &[u8]) -> Vec<u8> {
        let mut k = format!("{HUB_CURSOR_PREFIX}{}/{shard}/stream/", self.site).into_bytes();
        k.extend_from_slice(key);
        k
    }
}

/// Runs an uplink runner for each shard this node leads, until `stop`.
pub async fn run(router: Arc<Router>, config: Arc<UplinkConfig>, mut stop: watch::Receiver<bool>) {
    let mut runners: HashMap<ShardId, JoinHandle<()>> = HashMap::new();
    let node = router.kernel().node_id();
    let downlink = (!config.downlink_prefixes().is_empty())
        .then(|| tokio::spawn(downlink::run(router.clone(), config.clone(), stop.clone())));
    loop {
        runners.retain(|_, r| !r.is_finished());
        for replica in router.kernel().replicas().all() {
            let shard = replica.shard_id();
            let wanted = config.sends() && replica.leader() == Some(node);
            if wanted && !runners.contains_key(&shard) {
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
    if let Some(d) = downlink {
        d.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_names_a_site_a_hub_and_key_prefixes() {
        let c = UplinkConfig::parse(
            "plant-1",
            "redis://127.0.0.1:7379",
            Some("sensor/, alerts/"),
            Some("config/"),
        )
        .unwrap();
        assert_eq!(c.prefixes, [Bytes::from("sensor/"), Bytes::from("alerts/")]);
        assert_eq!(c.downlink, [Bytes::from("config/")]);
        assert_eq!(c.hub_key(b"sensor/t"), b"sites/plant-1/sensor/t");
        assert_eq!(
            c.site_key_of(b"sites/plant-1/config/x"),
            Some(&b"config/x"[..])
        );
        assert_eq!(c.site_key_of(b"sites/plant-2/config/x"), None);
        assert_eq!(c.cursor_key(3), "firn.uplink/plant-1/3");
        assert!(c.logs.is_empty() && c.streams.is_empty());
        for (site, hub, uplink, downlink) in [
            ("", "redis://h:1", Some("a/"), None),
            ("a/b", "redis://h:1", Some("a/"), None),
            ("s", "http://h:1", Some("a/"), None),
            ("s", "redis://h:1", Some(""), None),
            ("s", "redis://h:1", None, None),
            ("s", "redis://h:1", Some("a/,log:"), None),
            ("s", "redis://h:1", Some("stream:"), None),
            ("s", "redis://h:1", Some("a/"), Some("log:events")),
            ("s", "redis://h:1", Some("stream:config/s"), Some("config/")),
            ("s", "redis://h:1", Some("a/"), Some("a/b/")),
            ("s", "redis://h:1", Some("a/b"), Some("a/")),
        ] {
            assert!(
                UplinkConfig::parse(site, hub, uplink, downlink).is_err(),
                "{site} {hub} {uplink:?} {downlink:?}"
            );
        }
    }

    /// A hub over TLS needs the CA its certificate is checked against; a CA for a plain hub,
    /// or one that is not a CA bundle, is refused at start.
    #[test]
    fn a_hub_over_tls_is_given_with_its_ca() {
        let tls = |hub: &str| UplinkConfig::parse("s", hub, Some("a/"), None).unwrap();
        let c = tls("rediss://user:pw@hub.example:7379/");
        assert!(c.over_tls());
        assert_eq!(c.hub_address(), "hub.example:7379");
        let e = c.clone().trusting(None).unwrap_err();
        assert!(e.contains("needs --hub-ca") && !e.contains("pw"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let (junk, missing) = (dir.path().join("junk.pem"), dir.path().join("none.pem"));
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = c.clone().trusting(Some(&junk)).unwrap_err();
        assert!(
            e.starts_with("--hub-ca ") && e.contains("no certificate"),
            "{e}"
        );
        assert!(c.clone().trusting(Some(&missing)).is_err());
        let plain = tls("redis://hub.example:7379");
        assert!(!plain.over_tls());
        assert_eq!(plain.clone().trusting(None).unwrap().hub_ca, None);
        let e = plain.trusting(Some(&junk)).unwrap_err();
        assert!(e.contains("for a hub over TLS"), "{e}");
    }

    #[test]
    fn an_uplink_names_logs_and_streams_beside_key_prefixes() {
        let c = UplinkConfig::parse(
            "plant-1",
            "redis://127.0.0.1:7379",
            Some("sensor/, log:events, stream:alarms, log:events, stream:a/b"),
            None,
        )
        .unwrap();
        assert_eq!(c.prefixes, [Bytes::from("sensor/")]);
        assert_eq!(c.logs, [Bytes::from("events")]);
        assert_eq!(c.streams, [Bytes::from("alarms"), Bytes::from("a/b")]);
        assert!(c.sends());
        assert_eq!(c.hub_key(b"events"), b"sites/plant-1/events");
        assert_eq!(
            c.log_cursor_key(2, b"events"),
            b"firn.uplink/plant-1/2/log/events"
        );
        assert_eq!(
            c.stream_cursor_key(0, b"a/b"),
            b"firn.uplink/plant-1/0/stream/a/b"
        );
        // Logs or streams alone are something to send.
        let logs_only = UplinkConfig::parse("s", "redis://h:1", Some("log:events"), None).unwrap();
        assert!(logs_only.prefixes.is_empty() && logs_only.sends());
        let long = format!("log:{}", "x".repeat(UPLINK_NAME_BYTES_MAX + 1));
        assert!(UplinkConfig::parse("s", "redis://h:1", Some(&long), None).is_err());
        let many: Vec<String> = (0..=UPLINK_NAMES_MAX)
            .map(|i| format!("log:l{i}"))
            .collect();
        assert!(UplinkConfig::parse("s", "redis://h:1", Some(&many.join(",")), None).is_err());
        // Downlink only: nothing goes up.
        let down = UplinkConfig::parse("s", "redis://h:1", None, Some("config/")).unwrap();
        assert!(!down.sends());
    }

    #[test]
    fn a_twin_prefix_sends_reported_documents_up_and_takes_desired_ones_down() {
        let c = UplinkConfig::parse(
            "plant-1",
            "redis://h:1",
            Some("sensor/, twin:pumps/"),
            Some("config/"),
        )
        .unwrap();
        assert_eq!(c.twins, [Bytes::from("pumps/")]);
        assert!(c.sends());
        assert_eq!(
            c.key_prefixes_up(),
            [Bytes::from("sensor/"), Bytes::from("pumps/")]
        );
        assert!(c.goes_up(b"sensor/t"));
        assert!(c.goes_up(b"pumps/p1/reported"));
        assert!(!c.goes_up(b"pumps/p1/desired"));
        assert!(!c.goes_up(b"pumps/p1/notes"));
        assert_eq!(
            c.downlink_prefixes(),
            [
                (Bytes::from("config/"), None),
                (Bytes::from("pumps/"), Some(TwinSide::Desired))
            ]
        );
        // Twins alone are something to send and to take.
        let twins = UplinkConfig::parse("s", "redis://h:1", Some("twin:t/"), None).unwrap();
        assert!(twins.sends() && !twins.downlink_prefixes().is_empty());
        // A twin prefix overlapping a prefix going either way, an empty one, or one named
        // in --downlink is refused.
        for (uplink, downlink) in [
            ("twin:pumps/", Some("pumps/")),
            ("twin:pumps/p1/", Some("pumps/")),
            ("pumps/, twin:pumps/p1", None),
            ("twin:", None),
            ("a/", Some("twin:pumps/")),
        ] {
            assert!(
                UplinkConfig::parse("s", "redis://h:1", Some(uplink), downlink).is_err(),
                "{uplink} {downlink:?}"
            );
        }
    }
}
