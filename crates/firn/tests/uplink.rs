//! A site and its hub: two clusters of one node each, the site on 127.0.0.2 and the hub on
//! 127.0.0.3. The hub is cut off (firewall rules on its address, as the partition test makes
//! them) for 30 s while a writer keeps writing at the site — keys, records of a log, entries
//! of a stream; healed, every acknowledged site write is at the hub exactly once, in each
//! key's, tag's and stream's order, with its origin (the site's stamp as a version's event
//! time, the site's seq before a record's payload, the site's id as an entry's). Then again
//! with the site's node killed during the cut and started again.
//!
//! Needs root and iptables (the README's test command installs iptables).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{FirnProcess, free_ports, wait_until};

/// Firewall rules that drop every TCP packet to or from `ip`; removed when dropped.
struct Cut {
    rules: Vec<[String; 2]>,
}

fn iptables(action: &str, rule: &[String; 2]) {
    let status = Command::new("iptables")
        .args([
            action, "INPUT", &rule[0], &rule[1], "-p", "tcp", "-j", "DROP",
        ])
        .status()
        .expect("iptables is needed for the uplink test (the README's test command installs it)");
    assert!(
        status.success(),
        "iptables {action} failed (the test needs root)"
    );
}

impl Cut {
    fn off(ip: &str) -> Cut {
        let rules = vec![
            ["-s".to_string(), ip.to_string()],
            ["-d".to_string(), ip.to_string()],
        ];
        for rule in &rules {
            iptables("-I", rule);
        }
        Cut { rules }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for rule in &self.rules {
            iptables("-D", rule);
        }
    }
}

const SITE_IP: &str = "127.0.0.2";
const HUB_IP: &str = "127.0.0.3";
const KEYS: usize = 8;
/// The site's log that goes up, and its tags (`dev/0` …).
const LOG: &str = "events";
const TAGS: usize = 3;
/// A second tag every record has: each is held under both, and must go up once.
const ALL: &str = "all";
/// The site's stream that goes up.
const STREAM: &str = "alarms";

struct Nodes {
    hub: FirnProcess,
    hub_args: Vec<String>,
    hub_resp: String,
    hub_http: String,
    site_resp: String,
    site_http: String,
    site_args: Vec<String>,
    site_dir: tempfile::TempDir,
    _hub_dir: tempfile::TempDir,
}

fn start() -> (Nodes, FirnProcess) {
    start_on(SITE_IP, HUB_IP)
}

/// A hub on `hub_ip` and a site sending to it on `site_ip`.
fn start_on(site_ip: &str, hub_ip: &str) -> (Nodes, FirnProcess) {
    let ports = free_ports(6);
    let hub_dir = tempfile::tempdir().unwrap();
    let hub_resp = format!("{hub_ip}:{}", ports[0]);
    let hub_args: Vec<String> = vec![
        "--resp-addr".into(),
        hub_resp.clone(),
        "--http-addr".into(),
        format!("{hub_ip}:{}", ports[1]),
        "--peer-addr".into(),
        format!("{hub_ip}:{}", ports[2]),
    ];
    let hub = FirnProcess::start_with(
        hub_dir.path(),
        &hub_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let site_args: Vec<String> = [
        "--resp-addr".to_string(),
        format!("{site_ip}:{}", ports[3]),
        "--http-addr".to_string(),
        format!("{site_ip}:{}", ports[4]),
        "--peer-addr".to_string(),
        format!("{site_ip}:{}", ports[5]),
        "--site".to_string(),
        "plant1".to_string(),
        "--hub".to_string(),
        format!("redis://{hub_resp}"),
        "--uplink".to_string(),
        format!("sensor/,log:{LOG},stream:{STREAM},twin:twin/"),
        "--downlink".to_string(),
        "config/".to_string(),
    ]
    .into();
    let site_dir = tempfile::tempdir().unwrap();
    let nodes = Nodes {
        hub,
        hub_args,
        hub_resp,
        hub_http: format!("{hub_ip}:{}", ports[1]),
        site_resp: format!("{site_ip}:{}", ports[3]),
        site_http: format!("{site_ip}:{}", ports[4]),
        site_args,
        site_dir,
        _hub_dir: hub_dir,
    };
    let site = nodes.start_site();
    (nodes, site)
}

impl Nodes {
    /// How long the oldest version not yet at the hub has waited, as the site says.
    fn site_lag_ms(&self) -> f64 {
        let text = ureq::get(&format!("http://{}/metrics", self.site_http))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with("firn_uplink_lag_ms"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, f64::max)
    }

    fn start_site(&self) -> FirnProcess {
        let args: Vec<&str> = self.site_args.iter().map(String::as_str).collect();
        FirnProcess::start_with(self.site_dir.path(), &args)
    }
}

/// Waits (bounded) until the site's `key` has `want` (`None`: no value).
fn site_comes_to(nodes: &Nodes, key: &str, want: Option<&str>) {
    let mut con = connect(&nodes.site_resp);
    let mut got: Option<String> = None;
    let came = wait_until(Duration::from_secs(10), || {
        got = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        got.as_deref() == want
    });
    assert!(came, "the site's {key} is {got:?}, not the hub's {want:?}");
}

fn connect(addr: &str) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

/// What a writer had acknowledged: values set, records appended, entries added.
#[derive(Default)]
struct Acked {
    values: Vec<String>,
    records: Vec<String>,
    entries: Vec<String>,
}

/// Writes `sensor/k<i % KEYS>` = `<run>-<i>` at the site until told to stop, and appends
/// `<run>-<i>` to the log (tags `dev/<i % TAGS>` and `all`) and to the stream (field `n`), noting each
/// write the site acknowledged; a refused or unanswered one (the site being killed) is not
/// noted, and writing goes on once the site answers again.
fn writer(site: Arc<Mutex<String>>, run: &'static str, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let mut con: Option<redis::Connection> = None;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        if con.is_none() {
            let addr = site.lock().unwrap().clone();
            con = redis::Client::open(format!("redis://{addr}/"))
                .ok()
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)).ok());
            if con.is_none() {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        }
        let value = format!("{run}-{i}");
        let key = format!("sensor/k{}", i % KEYS);
        let c = con.as_mut().unwrap();
        let set: redis::RedisResult<String> = redis::cmd("SET").arg(&key).arg(&value).query(c);
        let appended: redis::RedisResult<Vec<String>> = redis::cmd("FIRN.LOG")
            .arg("APPEND")
            .arg(LOG)
            .arg("TAGS")
            .arg(2)
            .arg(format!("dev/{}", i % TAGS))
            .arg(ALL)
            .arg(&value)
            .query(c);
        let added: redis::RedisResult<String> = redis::cmd("XADD")
            .arg(STREAM)
            .arg("*")
            .arg("n")
            .arg(&value)
            .query(c);
        let mut failed = false;
        for (done, list) in [
            (set.is_ok(), &mut acked.values),
            (appended.is_ok(), &mut acked.records),
            (added.is_ok(), &mut acked.entries),
        ] {
            if done {
                list.push(value.clone());
            }
            failed |= !done;
        }
        if failed {
            con = None;
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    acked
}

/// A seq's or an id's successor (`ms-n` → `ms-(n+1)`).
fn after(seq: &str) -> String {
    let (ms, n) = seq.split_once('-').unwrap();
    format!("{ms}-{}", n.parse::<u64>().unwrap() + 1)
}

fn text(v: &redis::Value) -> String {
    redis::from_redis_value::<String>(v.clone()).unwrap()
}

/// The records of `tag` of `log` at `addr`, oldest first: (seq, payload); none for a log
/// nothing was appended to yet.
fn log_records(addr: &str, log: &str, tag: &str) -> Vec<(String, String)> {
    let mut con = connect(addr);
    let mut out = Vec::new();
    let mut from = "-".to_string();
    loop {
        let page: redis::RedisResult<Vec<redis::Value>> = redis::cmd("FIRN.LOG")
            .arg("RANGE")
            .arg(log)
            .arg(tag)
            .arg(&from)
            .arg("+")
            .arg("LIMIT")
            .arg(10_000)
            .query(&mut con);
        let page = match page {
            Ok(p) => p,
            Err(e) if e.to_string().contains("NOLOG") => return out,
            Err(e) => panic!("FIRN.LOG RANGE {log} {tag}: {e}"),
        };
        let full = page.len() == 10_000;
        for record in page {
            // [seq, [tag…], payload, commit_ts]
            let parts: Vec<redis::Value> = redis::from_redis_value(record).unwrap();
            out.push((text(&parts[0]), text(&parts[2])));
        }
        match out.last() {
            Some((seq, _)) if full => from = after(seq),
            _ => return out,
        }
    }
}

/// The entries of stream `key` at `addr`, oldest first: (id, fields).
fn stream_entries(addr: &str, key: &str) -> Vec<(String, Vec<String>)> {
    let mut con = connect(addr);
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    loop {
        let from = out
            .last()
            .map_or("-".to_string(), |(id, _)| format!("({id}"));
        let page: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(key)
            .arg(&from)
            .arg("+")
            .arg("COUNT")
            .arg(10_000)
            .query(&mut con)
            .unwrap();
        let full = page.len() == 10_000;
        out.extend(page);
        if !full {
            return out;
        }
    }
}

/// Every acknowledged record and entry is at the hub exactly once: the hub's log
/// `sites/plant1/events` holds each tag's records in the site's order, each payload
/// preceded by its origin (`plant1 <site seq>`), and the hub's stream
/// `sites/plant1/alarms` the site's entries under their own ids.
fn assert_hub_has_records_exactly(nodes: &Nodes, site_resp: &str, acked: &Acked) {
    let site_log: Vec<Vec<(String, String)>> = (0..TAGS)
        .map(|t| log_records(site_resp, LOG, &format!("dev/{t}")))
        .collect();
    let site_all = log_records(site_resp, LOG, ALL);
    let site_stream = stream_entries(site_resp, STREAM);
    for value in &acked.records {
        let i: usize = value.rsplit('-').next().unwrap().parse().unwrap();
        assert!(
            site_log[i % TAGS].iter().any(|(_, p)| p == value),
            "the site lost acknowledged record {value}"
        );
    }
    for value in &acked.entries {
        assert!(
            site_stream.iter().any(|(_, f)| f[1] == *value),
            "the site lost acknowledged entry {value}"
        );
    }
    let want = site_log.iter().map(Vec::len).sum::<usize>() + site_stream.len();
    let hub_log_name = format!("sites/plant1/{LOG}");
    let hub_stream_name = format!("sites/plant1/{STREAM}");
    let read_hub = || {
        let log: Vec<Vec<(String, String)>> = (0..TAGS)
            .map(|t| log_records(&nodes.hub_resp, &hub_log_name, &format!("dev/{t}")))
            .collect();
        (log, stream_entries(&nodes.hub_resp, &hub_stream_name))
    };
    // A hub record as (site seq, payload), from the origin line before its payload.
    let origin_of = |payload: &String| -> (String, String) {
        let (origin, payload) = payload
            .split_once('\n')
            .unwrap_or_else(|| panic!("a hub record without its origin: {payload:?}"));
        let (site, seq) = origin.split_once(' ').unwrap();
        assert_eq!(site, "plant1", "{origin}");
        (seq.to_string(), payload.to_string())
    };
    let mut held = 0;
    let caught_up = wait_until(Duration::from_secs(60), || {
        let (log, stream) = read_hub();
        held = log.iter().map(Vec::len).sum::<usize>() + stream.len();
        held >= want
    });
    assert!(
        caught_up,
        "the hub has {held} of the site's {want} records and entries"
    );
    // A moment more: anything sent twice would show now.
    std::thread::sleep(Duration::from_secs(1));
    let (hub_log, hub_stream) = read_hub();
    eprintln!(
        "at the hub: {} records of {LOG} ({:?} a tag), {} entries of {STREAM}",
        hub_log.iter().map(Vec::len).sum::<usize>(),
        hub_log.iter().map(Vec::len).collect::<Vec<_>>(),
        hub_stream.len()
    );
    for (t, (site, hub)) in site_log.iter().zip(&hub_log).enumerate() {
        let origins: Vec<(String, String)> = hub.iter().map(|(_, p)| origin_of(p)).collect();
        assert_eq!(
            origins.len(),
            site.len(),
            "tag dev/{t}: the hub has {} records, the site {}",
            origins.len(),
            site.len()
        );
        assert!(
            origins == *site,
            "tag dev/{t}: the hub's records are not the site's, once each, in order"
        );
    }
    // Every record is under `all` too, once: in each of the site's shards' order, so in
    // the site's order by origin seq.
    let mut hub_all: Vec<(String, String)> = log_records(&nodes.hub_resp, &hub_log_name, ALL)
        .iter()
        .map(|(_, p)| origin_of(p))
        .collect();
    let seq_key = |(seq, _): &(String, String)| {
        let (ms, n) = seq.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), n.parse::<u64>().unwrap())
    };
    hub_all.sort_by_key(seq_key);
    assert_eq!(site_all.len(), site_log.iter().map(Vec::len).sum::<usize>());
    assert_eq!(hub_all.len(), site_all.len(), "records under {ALL}");
    assert!(
        hub_all == site_all,
        "the hub's records under {ALL} are not the site's, once each"
    );
    assert_eq!(hub_stream.len(), site_stream.len());
    assert!(
        hub_stream == site_stream,
        "the hub's stream entries are not the site's, once each, in order, under their ids"
    );
}

/// Each key's values at `addr` under `prefix`, oldest first, with each version's event time
/// (at the hub) or commit stamp (at the site), in microseconds.
fn histories(addr: &str, prefix: &str, stamps: bool) -> BTreeMap<usize, Vec<(String, u64)>> {
    let mut con = connect(addr);
    let mut all = BTreeMap::new();
    for k in 0..KEYS {
        let versions: Vec<redis::Value> = redis::cmd("FIRN.HISTORY")
            .arg(format!("{prefix}sensor/k{k}"))
            .arg("LIMIT")
            .arg(10_000)
            .query(&mut con)
            .unwrap();
        let mut values = Vec::new();
        for v in versions {
            let map: BTreeMap<String, redis::Value> = redis::from_redis_value(v).unwrap();
            let text = |f: &str| -> String {
                redis::from_redis_value(map.get(f).cloned().unwrap_or(redis::Value::Nil))
                    .unwrap_or_default()
            };
            let stamp = if stamps {
                // `wall_us-logical`
                text("commit_ts")
                    .split('-')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            } else {
                text("event_time").parse().unwrap()
            };
            values.push((text("value"), stamp));
        }
        all.insert(k, values);
    }
    all
}

/// Every acknowledged write is at the hub exactly once, each key's in the site's order,
/// with the site's commit stamp as its event time.
fn assert_hub_has_exactly(nodes: &Nodes, site_resp: &str, acked: &[String]) {
    let site = histories(site_resp, "", true);
    let want: usize = site.values().map(Vec::len).sum();
    let acked_in_site: usize = acked.len();
    assert!(
        want >= acked_in_site,
        "the site lost acknowledged writes: {want} < {acked_in_site}"
    );
    for value in acked {
        let i: usize = value.rsplit('-').next().unwrap().parse().unwrap();
        assert!(
            site[&(i % KEYS)].iter().any(|(v, _)| v == value),
            "the site lost acknowledged {value}"
        );
    }
    let mut hub = BTreeMap::new();
    let caught_up = wait_until(Duration::from_secs(60), || {
        hub = histories(&nodes.hub_resp, "sites/plant1/", false);
        hub.values().map(Vec::len).sum::<usize>() >= want
    });
    assert!(
        caught_up,
        "the hub has {} of the site's {want} versions",
        hub.values().map(Vec::len).sum::<usize>()
    );
    // A moment more: anything sent twice would show now.
    std::thread::sleep(Duration::from_secs(1));
    let hub = histories(&nodes.hub_resp, "sites/plant1/", false);
    assert_eq!(
        hub, site,
        "the hub's versions are the site's, once each, in order"
    );
    let lag = nodes.site_lag_ms();
    assert!(lag < 5_000.0, "caught up, the site's lag is {lag} ms");
    // The hub shows the site, heard from within its keep-alive.
    let cluster: serde_json::Value = ureq::get(&format!("http://{}/v1/cluster", nodes.hub_http))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let sites = cluster["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{cluster}");
    assert_eq!(sites[0]["site"], "plant1");
    assert!(
        sites[0]["since_contact_ms"].as_u64().unwrap() < 10_000,
        "{sites:?}"
    );
    // The hub's gauges are set every 5 s.
    let shown = wait_until(Duration::from_secs(12), || {
        ureq::get(&format!("http://{}/metrics", nodes.hub_http))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
            .contains("firn_hub_site_last_contact_ms{site=\"plant1\"}")
    });
    assert!(shown, "the hub's /metrics does not show the site");
}

#[test]
fn a_site_cut_off_from_its_hub_sends_everything_once_in_order_after_healing() {
    let (nodes, site) = start();
    let site_resp = nodes.site_resp.clone();
    let addr = Arc::new(Mutex::new(site_resp.clone()));

    // Up and running: the first writes reach the hub.
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let (addr, stop) = (addr.clone(), stop.clone());
        std::thread::spawn(move || writer(addr, "cut", stop))
    };
    // Desired state comes down: the hub's sites/plant1/config/… become the site's config/….
    let mut hub = connect(&nodes.hub_resp);
    for (k, v) in [("mode", "eco"), ("old", "x")] {
        let _: () = redis::cmd("SET")
            .arg(format!("sites/plant1/config/{k}"))
            .arg(v)
            .query(&mut hub)
            .unwrap();
    }
    site_comes_to(&nodes, "config/mode", Some("eco"));
    site_comes_to(&nodes, "config/old", Some("x"));
    // A change made at the site is put back: the hub's is the desired state.
    let _: () = redis::cmd("SET")
        .arg("config/mode")
        .arg("local")
        .query(&mut connect(&site_resp))
        .unwrap();
    site_comes_to(&nodes, "config/mode", Some("eco"));
    {
        // The hub cut off for 30 s; the site keeps taking writes.
        let _cut = Cut::off(HUB_IP);
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs(30));
        assert!(started.elapsed() >= Duration::from_secs(30));
        // Nothing went up meanwhile: what waits is as old as the cut, nearly.
        let lag = nodes.site_lag_ms();
        assert!(
            lag > 20_000.0,
            "the site's uplink lag during the cut: {lag} ms"
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acked = writing.join().unwrap();
    assert!(
        acked.values.len() > 1_000 && acked.records.len() > 1_000 && acked.entries.len() > 1_000,
        "the site kept taking writes: {} values, {} records, {} entries",
        acked.values.len(),
        acked.records.len(),
        acked.entries.len()
    );
    assert_hub_has_exactly(&nodes, &site_resp, &acked.values);
    assert_hub_has_records_exactly(&nodes, &site_resp, &acked);
    // Changed and deleted at the hub after the cut: the site follows.
    let mut hub = connect(&nodes.hub_resp);
    let _: () = redis::cmd("SET")
        .arg("sites/plant1/config/mode")
        .arg("boost")
        .query(&mut hub)
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("sites/plant1/config/old")
        .query(&mut hub)
        .unwrap();
    site_comes_to(&nodes, "config/mode", Some("boost"));
    site_comes_to(&nodes, "config/old", None);

    // Again, with the site's node killed during the cut and started again.
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let (addr, stop) = (addr.clone(), stop.clone());
        std::thread::spawn(move || writer(addr, "kill", stop))
    };
    std::thread::sleep(Duration::from_secs(1));
    let site = {
        let _cut = Cut::off(HUB_IP);
        std::thread::sleep(Duration::from_secs(5));
        site.kill_9();
        let site = nodes.start_site();
        std::thread::sleep(Duration::from_secs(5));
        site
    };
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let mut acked_after_kill = writing.join().unwrap();
    let mut all = acked;
    all.values.append(&mut acked_after_kill.values);
    all.records.append(&mut acked_after_kill.records);
    all.entries.append(&mut acked_after_kill.entries);
    assert_hub_has_exactly(&nodes, &site_resp, &all.values);
    assert_hub_has_records_exactly(&nodes, &site_resp, &all);

    // Another cluster now answers at the hub's address (founded with another peer address,
    // so with another id): it is refused, nothing sent to it.
    nodes.hub.kill_9();
    let other_dir = tempfile::tempdir().unwrap();
    let other_peer = format!("{HUB_IP}:{}", free_ports(1)[0]);
    let mut other_args: Vec<&str> = nodes.hub_args.iter().map(String::as_str).collect();
    other_args.truncate(4);
    other_args.extend(["--peer-addr", &other_peer]);
    let other = FirnProcess::start_with(other_dir.path(), &other_args);
    let _: () = redis::cmd("SET")
        .arg("sensor/after")
        .arg("x")
        .query(&mut connect(&site_resp))
        .unwrap();
    let refused = wait_until(Duration::from_secs(15), || {
        let metrics = ureq::get(&format!("http://{}/metrics", nodes.site_http))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        metrics.contains("firn_uplink_wrong_hub_total")
    });
    assert!(refused, "the site did not refuse a hub of another cluster");
    std::thread::sleep(Duration::from_secs(1));
    let scan: (String, Vec<String>) = redis::cmd("FIRN.SCAN")
        .arg("sites/")
        .query(&mut connect(&nodes.hub_resp))
        .unwrap();
    assert!(scan.1.is_empty(), "sent to another cluster: {scan:?}");
    drop(site);
    drop(other);
}

/// The twin `name`'s state at the node whose HTTP address is `http` (`GET /v1/twins/…`).
fn twin(http: &str, name: &str) -> serde_json::Value {
    match ureq::get(&format!("http://{http}/v1/twins/{name}")).call() {
        Ok(answer) => serde_json::from_str(&answer.into_string().unwrap()).unwrap(),
        Err(e) => serde_json::Value::String(e.to_string()),
    }
}

/// `FIRN.TWIN side name patch` on `con`.
fn patch(con: &mut redis::Connection, side: &str, name: &str, patch: &str) {
    let _: redis::Value = redis::cmd("FIRN.TWIN")
        .arg(side)
        .arg(name)
        .arg(patch)
        .query(con)
        .unwrap();
}

#[test]
fn a_site_sends_its_twins_reported_documents_up_and_takes_their_desired_ones_down() {
    // Its own addresses: the other test cuts its hub off.
    let (nodes, _site) = start_on("127.0.0.1", "127.0.0.1");
    let mut site = connect(&nodes.site_resp);
    let mut hub = connect(&nodes.hub_resp);
    let twin_at = |http: &str, name: &str, wanted: &dyn Fn(&serde_json::Value) -> bool| {
        let mut last = serde_json::Value::Null;
        let came = wait_until(Duration::from_secs(10), || {
            last = twin(http, name);
            wanted(&last)
        });
        assert!(came, "{name} at {http}: {last}");
        last
    };
    // The device reports at the site: the hub has it, under the site's name.
    patch(&mut site, "REPORT", "twin/pump-1", r#"{"rpm": 900}"#);
    twin_at(&nodes.hub_http, "sites/plant1/twin/pump-1", &|t| {
        t["reported"]["document"]["rpm"] == 900
    });
    // The backend desires at the hub: the site has it, and its delta.
    patch(
        &mut hub,
        "DESIRE",
        "sites/plant1/twin/pump-1",
        r#"{"rpm": 1200}"#,
    );
    let at_site = twin_at(&nodes.site_http, "twin/pump-1", &|t| {
        t["desired"]["document"]["rpm"] == 1200
    });
    assert_eq!(at_site["reported"]["document"]["rpm"], 900);
    assert_eq!(at_site["delta"], serde_json::json!({"rpm": 1200}));
    // A desire written at the site does not go up, and is put back to the hub's.
    patch(&mut site, "DESIRE", "twin/pump-1", r#"{"rpm": 1}"#);
    twin_at(&nodes.site_http, "twin/pump-1", &|t| {
        t["desired"]["document"]["rpm"] == 1200
    });
    let at_hub = twin(&nodes.hub_http, "sites/plant1/twin/pump-1");
    assert_eq!(at_hub["desired"]["document"]["rpm"], 1200, "{at_hub}");
    // The device reports the change at the site: the hub's delta is empty.
    patch(&mut site, "REPORT", "twin/pump-1", r#"{"rpm": 1200}"#);
    twin_at(&nodes.hub_http, "sites/plant1/twin/pump-1", &|t| {
        t["delta"] == serde_json::json!({})
    });
}
