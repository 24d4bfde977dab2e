//! Starting the real `firn` binary for multi-process tests.

#![allow(dead_code)]

pub mod logs;
pub mod mount;
pub mod mqtt;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct FirnProcess {
    pub child: Child,
    pub resp_port: u16,
    pub http_addr: String,
    pub peer_addr: String,
}

impl FirnProcess {
    /// Every listener on a free loopback port.
    pub const FREE_PORTS: [&'static str; 6] = [
        "--resp-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--peer-addr",
        "127.0.0.1:0",
    ];

    /// Starts `firn serve` on free loopback ports with its data in `data_dir`, and waits
    /// until it serves (bounded).
    pub fn start(data_dir: &Path, extra: &[&str]) -> FirnProcess {
        Self::start_logging_to(data_dir, extra, Stdio::inherit())
    }

    /// [`start`](Self::start), its standard error sent to `stderr`.
    pub fn start_logging_to(data_dir: &Path, extra: &[&str], stderr: Stdio) -> FirnProcess {
        let mut args = Self::FREE_PORTS.to_vec();
        args.extend_from_slice(extra);
        Self::spawn(data_dir, &args, stderr, &[])
    }

    /// Starts `firn serve --data-dir DATA_DIR ARGS…` and waits until it serves (bounded).
    pub fn start_with(data_dir: &Path, args: &[&str]) -> FirnProcess {
        Self::spawn(data_dir, args, Stdio::inherit(), &[])
    }

    fn spawn(data_dir: &Path, args: &[&str], stderr: Stdio, env: &[(&str, &str)]) -> FirnProcess {
        let mut child = Command::new(firn_bin())
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("FIRN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn firn");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("firn serving:") {
                    let _ = tx.send(line);
                } else {
                    eprintln!("{line}");
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("firn did not start within 60 s");
        // "firn serving: redis-cli -p PORT …   |   curl … http(s)://ADDR/v1/kv/hello   |   peers …"
        let resp_port = line
            .split("-p ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap();
        let http_addr = line
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap()
            .to_string();
        let peer_addr = line
            .split("peers ")
            .nth(1)
            .map(|r| r.trim().to_string())
            .unwrap_or_default();
        FirnProcess {
            child,
            resp_port,
            http_addr,
            peer_addr,
        }
    }

    pub fn resp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.resp_port)
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill_9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().unwrap();
    }
}

impl Drop for FirnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of the samples whose line starts with `line_start` (a name, or a name with its
/// labels) in the `/metrics` of the node whose HTTP address is `http_addr`; 0 until
/// counted, or while unreachable.
pub fn metrics_sum(http_addr: &str, line_start: &str) -> f64 {
    let text = ureq::get(&format!("http://{http_addr}/metrics"))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The `firn` binary the tests start: `FIRN_TEST_BIN` if set (a copy of one's own build,
/// when others share the target directory and rebuild `target/debug/firn`), else Cargo's.
pub fn firn_bin() -> String {
    std::env::var("FIRN_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_firn").to_owned())
}

pub fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Free loopback ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    firn_soak::cluster::free_ports("127.0.0.1", n)
}

/// A cluster of real `firn` processes on loopback.
pub struct Cluster {
    // Fields drop in this order: the processes are killed before their data directories go.
    pub nodes: Vec<Option<FirnProcess>>,
    pub dirs: Vec<tempfile::TempDir>,
    ports: Vec<(u16, u16, u16)>,
    peers: String,
    /// For nodes added after the start: the peer address they joined through.
    joined_via: Vec<Option<String>>,
    extra: Vec<String>,
    /// Flags of one node each, by index (none for nodes added after the start).
    each: Vec<Vec<String>>,
}

impl Cluster {
    pub fn start(n: usize, extra: &[&str]) -> Cluster {
        Self::start_on(n, extra, None)
    }

    /// [`Cluster::start`] from async code (off its workers: starting waits on processes),
    /// once the first node knows a leader for every shard.
    pub async fn ready(n: usize, extra: &[&str]) -> Cluster {
        let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let c = Cluster::start(n, &extra);
            c.wait_for_leaders(0, None);
            c
        })
        .await
        .unwrap()
    }

    /// Like [`Cluster::start`], with node `i`'s peer traffic on its own loopback address
    /// `127.0.0.{first_ip + i}`, so that firewall rules can cut one node off.
    pub fn start_on(n: usize, extra: &[&str], first_ip: Option<u8>) -> Cluster {
        Self::start_each_on(n, extra, first_ip, |_| Vec::new())
    }

    /// Like [`Cluster::start`], node index `i` with the flags `each(i)` too (at every
    /// restart): its own listener's address, say.
    pub fn start_each(n: usize, extra: &[&str], each: impl Fn(usize) -> Vec<String>) -> Cluster {
        Self::start_each_on(n, extra, None, each)
    }

    fn start_each_on(
        n: usize,
        extra: &[&str],
        first_ip: Option<u8>,
        each: impl Fn(usize) -> Vec<String>,
    ) -> Cluster {
        let ports: Vec<(u16, u16, u16)> = free_ports(3 * n)
            .chunks(3)
            .map(|c| (c[0], c[1], c[2]))
            .collect();
        let peer_ip = |i: usize| {
            first_ip.map_or("127.0.0.1".to_string(), |b| {
                format!("127.0.0.{}", b as usize + i)
            })
        };
        let peers = (0..n)
            .map(|i| format!("{}={}:{}", i + 1, peer_ip(i), ports[i].2))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            dirs: (0..n).map(|_| tempfile::tempdir().unwrap()).collect(),
            nodes: (0..n).map(|_| None).collect(),
            ports,
            peers,
            joined_via: vec![None; n],
            each: (0..n).map(each).collect(),
            // Two stripes a node, so that multi-node tests run groups in more than one log
            // and state database even on a machine whose default is one.
            extra: ["--stripes", "2"]
                .into_iter()
                .chain(extra.iter().copied())
                .map(str::to_string)
                .collect(),
        };
        for i in 0..n {
            cluster.restart(i);
        }
        cluster
    }

    /// (Re)starts node index `i` (node id `i + 1`) on its own ports and data.
    pub fn restart(&mut self, i: usize) {
        self.restart_with(i, &[]);
    }

    /// [`restart`](Self::restart), with more flags for this start only.
    pub fn restart_with(&mut self, i: usize, more: &[&str]) {
        self.restart_with_env(i, more, &[]);
    }

    /// [`restart_with`](Self::restart_with), with environment variables for this start
    /// (`FAIL_POINTS`, say).
    pub fn restart_with_env(&mut self, i: usize, more: &[&str], env: &[(&str, &str)]) {
        let (resp, http, _) = self.ports[i];
        let peer_addr = self.peer_addr(i);
        let (how, whom) = match &self.joined_via[i] {
            Some(contact) => ("--join", contact.clone()),
            None => ("--peers", self.peers.clone()),
        };
        let mut args: Vec<String> = vec![
            "--node-id".into(),
            (i + 1).to_string(),
            how.into(),
            whom,
            "--resp-addr".into(),
            format!("127.0.0.1:{resp}"),
            "--http-addr".into(),
            format!("127.0.0.1:{http}"),
            "--peer-addr".into(),
            peer_addr,
        ];
        args.extend(self.extra.iter().cloned());
        args.extend(self.each.get(i).into_iter().flatten().cloned());
        args.extend(more.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.nodes[i] = Some(FirnProcess::spawn(
            self.dirs[i].path(),
            &refs,
            Stdio::inherit(),
            env,
        ));
    }

    /// SIGTERM: the node shuts down in order (its databases flushed); waits (bounded) for it.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].take() {
            let sent = Command::new("kill")
                .args(["-TERM", &p.child.id().to_string()])
                .status()
                .expect("run kill");
            assert!(sent.success(), "kill -TERM failed");
            let stopped = wait_until(Duration::from_secs(20), || {
                p.child.try_wait().unwrap().is_some()
            });
            assert!(
                stopped,
                "node {} did not stop within 20 s of SIGTERM",
                i + 1
            );
        }
    }

    pub fn kill_9(&mut self, i: usize) {
        if let Some(p) = self.nodes[i].take() {
            p.kill_9();
        }
    }

    /// Sends node index `i` the signal `sig` (`-STOP` pauses it, `-CONT` resumes it).
    pub fn signal(&self, i: usize, sig: &str) {
        let pid = self.nodes[i].as_ref().expect("running").child.id();
        let sent = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {sig} {pid}");
    }

    /// Starts one more node (id = its index + 1) that joins through node index `contact`;
    /// returns its index.
    pub fn join(&mut self, contact: usize) -> usize {
        let via = self.peer_addr(contact);
        self.add(Some(via))
    }

    /// Starts one more node (id = its index + 1) with the first nodes' `--peers`, which does
    /// not list it (as a StatefulSet's new pod after a scale-up); returns its index.
    pub fn add_unlisted(&mut self) -> usize {
        self.add(None)
    }

    /// Starts one more node on new ports and data: with `--join via`, or (`None`) with the
    /// first nodes' `--peers`.
    fn add(&mut self, via: Option<String>) -> usize {
        let p = free_ports(3);
        self.ports.push((p[0], p[1], p[2]));
        self.dirs.push(tempfile::tempdir().unwrap());
        self.nodes.push(None);
        self.joined_via.push(via);
        let i = self.nodes.len() - 1;
        self.restart(i);
        i
    }

    /// Node index `i`'s peer address (as listed in `--peers` for the first nodes).
    pub fn peer_addr(&self, i: usize) -> String {
        match self.peers.split(',').nth(i).and_then(|p| p.split_once('=')) {
            Some((_, a)) => a.to_string(),
            None => format!("127.0.0.1:{}", self.ports[i].2),
        }
    }

    pub fn resp_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i].0)
    }

    pub fn http_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i].1)
    }
}

impl Cluster {
    /// The sum of the samples whose line starts with `line_start` (a name, or a name with
    /// its labels) in node index `i`'s `/metrics`; 0 until counted, or while unreachable.
    pub fn counter(&self, i: usize, line_start: &str) -> f64 {
        metrics_sum(&self.http_addr(i), line_start)
    }

    pub fn cluster_json(&self, i: usize) -> Option<serde_json::Value> {
        ureq::get(&format!("http://{}/v1/cluster", self.http_addr(i)))
            .timeout(Duration::from_secs(2))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    /// A shard that some node holds no replica of (a cluster of more nodes than a shard has
    /// replicas): its id, its replicas in the layout's order, and that node's id.
    pub fn shard_missing_from_a_node(&self) -> (u64, Vec<u64>, u64) {
        let view = self.cluster_json(0).expect("node 1 describes the cluster");
        let nodes = self.nodes.len() as u64;
        view["cluster"]["shards"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|s| {
                let replicas: Vec<u64> = s["replicas"]
                    .as_array()?
                    .iter()
                    .filter_map(|r| r.as_u64())
                    .collect();
                let outsider = (1..=nodes).find(|n| !replicas.contains(n))?;
                Some((s["shard_id"].as_u64()?, replicas, outsider))
            })
            .unwrap_or_else(|| panic!("every node holds every shard: {view}"))
    }

    /// Leader of each shard as node index `i` sees it.
    pub fn leaders(&self, i: usize) -> Vec<Option<u64>> {
        self.cluster_json(i)
            .map(|j| {
                j["shards"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["leader"].as_u64())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits (bounded) until node index `i` knows a leader for each of its shards, none of
    /// them `not`.
    pub fn wait_for_leaders(&self, i: usize, not: Option<u64>) -> Vec<u64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let l = self.leaders(i);
            if !l.is_empty() && l.iter().all(|x| x.is_some() && *x != not) {
                return l.into_iter().flatten().collect();
            }
            assert!(Instant::now() < deadline, "no leaders after 30 s: {l:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A key that lives in `shard` of the default layout (3 shards).
pub fn key_in_shard(shard: u32, tag: &str) -> String {
    keys_in_shard(shard, tag, 1).remove(0)
}

/// The first `n` keys `{prefix}{i}` that live in `shard` of the default layout (3 shards).
pub fn keys_in_shard(shard: u32, prefix: &str, n: usize) -> Vec<String> {
    firn_soak::keys_in_shard(3, shard, prefix, n)
}

/// Kills (SIGKILL) the leader of each of `shards` in turn, `pause` after the previous
/// restart, and restarts it `down` later on the same data.
pub async fn kill_leaders(
    cluster: std::sync::Arc<std::sync::Mutex<Cluster>>,
    shards: Vec<usize>,
    pause: Duration,
    down: Duration,
) {
    for shard in shards {
        tokio::time::sleep(pause).await;
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap();
            let alive = (0..c.nodes.len()).find(|i| c.nodes[*i].is_some()).unwrap();
            let leader = c.wait_for_leaders(alive, None)[shard];
            c.kill_9((leader - 1) as usize);
        })
        .await
        .unwrap();
        tokio::time::sleep(down).await;
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap();
            let down = (0..c.nodes.len()).find(|i| c.nodes[*i].is_none()).unwrap();
            c.restart(down);
        })
        .await
        .unwrap();
    }
}

/// A small deterministic generator: tests print their seed, so a failure can be replayed
/// with FIRN_TEST_SEED.
#[allow(unused_imports)] // not every test binary draws
pub use firn_soak::Rng;

/// FIRN_TEST_SEED, or one from the clock; printed with `what` so a failure can be replayed.
pub fn seed(what: &str) -> u64 {
    let seed = std::env::var("FIRN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("{what} seed: FIRN_TEST_SEED={seed}");
    seed
}

/// Runs `op` again while it fails with a transient error, as a client does (see
/// [`firn_client::retry_transient`]). A loaded machine can delay heartbeats past a leader's
/// quorum check, and a test's write or read then meets a moment without a leader.
#[allow(unused_imports)] // not every test binary retries
pub use firn_client::retry_transient as settled;

/// The newest version of `key`, read linearizably through `client` (tried again while
/// leaders settle).
pub async fn read_latest(
    client: &firn_client::Client,
    key: &[u8],
) -> Option<firn_model::VersionInfo> {
    firn_client::retry_transient(|| {
        client.get(
            key,
            firn_model::ReadAt::Latest,
            firn_model::ReadConsistency::Linearizable,
        )
    })
    .await
    .unwrap_or_else(|e| panic!("reading {}: {e}", String::from_utf8_lossy(key)))
}
