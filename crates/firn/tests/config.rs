//! `firn serve`'s settings from flags, the environment and a config file, judged by what the
//! real binary does: which port it listens on, whether it starts at all, and whether the
//! settings the deploy files give (deploy/systemd, deploy/compose.yaml, deploy/k8s) start
//! nodes that serve. The compose and Kubernetes clusters run as three processes, each in
//! its own mount and UTS namespace (its own host name and /etc/hosts, so that the files'
//! peer names resolve to loopback addresses); those tests are skipped, saying so, where
//! `unshare` cannot make namespaces (not root).

mod common;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{firn_bin, free_ports, wait_until};
use yaml_rust2::{Yaml, YamlLoader};

/// How long a node may take to print that it serves, or a refused one to exit.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a cluster's nodes may take until /healthz answers 200 on each.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `firn serve ARGS` with exactly `env` among the FIRN_* variables (none inherited),
/// optionally wrapped in namespaces with its own host name and /etc/hosts.
struct Launch<'a> {
    args: Vec<String>,
    env: Vec<(String, String)>,
    host: Option<(&'a str, &'a Path)>,
}

impl<'a> Launch<'a> {
    fn new(args: &[&str]) -> Self {
        Launch {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            host: None,
        }
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    fn host(mut self, name: &'a str, hosts_file: &'a Path) -> Self {
        self.host = Some((name, hosts_file));
        self
    }

    fn command(&self) -> Command {
        let mut command = match self.host {
            None => Command::new(firn_bin()),
            Some((name, hosts)) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--uts", "--", "sh", "-c"])
                    .arg(r#"mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@""#)
                    .arg(hosts)
                    .arg(name)
                    .arg(firn_bin());
                c
            }
        };
        command.arg("serve").args(&self.args);
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("FIRN_")) {
            command.env_remove(key);
        }
        command
            .envs(self.env.iter().cloned())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null());
        command
    }

    /// Runs it to its end (bounded): (exit code, stdout, stderr).
    fn run(&self) -> (i32, String, String) {
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn firn");
        let deadline = Instant::now() + START_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "firn serve {:?} did not exit within {START_TIMEOUT:?}",
                    self.args
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |r: Option<&mut dyn std::io::Read>| {
            let mut text = String::new();
            if let Some(r) = r {
                r.read_to_string(&mut text).unwrap();
            }
            text
        };
        let out = read(child.stdout.as_mut().map(|s| s as _));
        let err = read(child.stderr.as_mut().map(|s| s as _));
        (status.code().unwrap_or(-1), out, err)
    }

    /// The settings `--print-config` shows: key → (value text, source).
    fn print_config(&self) -> Vec<(String, String, String)> {
        let mut dry = Launch {
            args: self.args.clone(),
            env: self.env.clone(),
            host: self.host,
        };
        dry.args.push("--print-config".into());
        let (code, out, err) = dry.run();
        assert_eq!(code, 0, "--print-config failed: {err}");
        out.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (setting, source) = l.split_once("  # ").unwrap();
                let (key, value) = setting.split_once(" = ").unwrap();
                let value = value.trim().trim_matches('"').to_string();
                (key.to_string(), value, source.to_string())
            })
            .collect()
    }

    /// Starts it and waits (bounded) until it prints that it serves.
    fn start(&self) -> Serving {
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn firn");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("firn serving:") {
                    let _ = tx.send(line);
                }
            }
        });
        // Killed by the guard if it does not start.
        let node = Node { child };
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .unwrap_or_else(|_| panic!("firn serve {:?} did not start", self.args));
        Serving { _node: node, line }
    }
}

/// A started node, killed (by its own PID) when dropped.
struct Node {
    child: Child,
}

/// A node with the line it printed when it began to serve.
struct Serving {
    _node: Node,
    line: String,
}

impl Serving {
    /// From "firn serving: redis-cli -p PORT   |   curl http://ADDR/v1/kv/hello   |   …".
    fn resp_port(&self) -> u16 {
        self.line
            .split("-p ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {:?}", self.line))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http(method: &str, url: &str, body: Option<&str>) -> Option<(u16, String)> {
    let request = ureq::request(method, url).timeout(Duration::from_secs(3));
    let answer = match body {
        Some(b) => request.send_string(b),
        None => request.call(),
    };
    match answer {
        Ok(r) => Some((r.status(), r.into_string().unwrap_or_default())),
        Err(ureq::Error::Status(code, r)) => Some((code, r.into_string().unwrap_or_default())),
        Err(_) => None,
    }
}

fn ping(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut c).as_deref() == Ok("PONG")
}

/// Waits (bounded) until every node's /healthz answers 200, then writes through the first
/// and reads the value back through the last.
fn assert_cluster_serves(http_addrs: &[String]) {
    for addr in http_addrs {
        assert!(
            wait_until(HEALTHY_TIMEOUT, || http(
                "GET",
                &format!("http://{addr}/healthz"),
                None
            )
            .is_some_and(|(code, _)| code == 200)),
            "{addr}/healthz did not answer 200 within {HEALTHY_TIMEOUT:?}: {:?}",
            http("GET", &format!("http://{addr}/healthz"), None)
        );
    }
    let first = &http_addrs[0];
    let last = http_addrs.last().unwrap();
    let put = http(
        "PUT",
        &format!("http://{first}/v1/kv/deploy/check"),
        Some("it serves"),
    );
    assert_eq!(put.map(|(code, _)| code), Some(200));
    let got = http("GET", &format!("http://{last}/v1/kv/deploy/check"), None);
    assert_eq!(got, Some((200, "it serves".to_string())));
}

fn temp_config(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

fn setting<'a>(settings: &'a [(String, String, String)], key: &str) -> (&'a str, &'a str) {
    let (_, value, source) = settings.iter().find(|(k, _, _)| k == key).unwrap();
    (value, source)
}

#[test]
fn the_listening_port_is_the_flags_then_the_environments_then_the_files() {
    let data = tempfile::tempdir().unwrap();
    let ports = free_ports(4);
    let file = temp_config(&format!(
        "resp-addr = \"127.0.0.1:{}\"\nhttp-addr = \"127.0.0.1:0\"\npeer-addr = \"127.0.0.1:0\"\n\
         data-dir = \"{}\"\n",
        ports[0],
        data.path().display()
    ));
    let config = file.path().to_str().unwrap();
    let env_addr = format!("127.0.0.1:{}", ports[1]);
    let flag_addr = format!("127.0.0.1:{}", ports[2]);

    // The file alone.
    let node = Launch::new(&["--config", config]).start();
    assert_eq!(node.resp_port(), ports[0]);
    assert!(ping(ports[0]));
    drop(node);
    // The environment over the file (the file named by FIRN_CONFIG this time).
    let node = Launch::new(&[])
        .env("FIRN_CONFIG", config)
        .env("FIRN_RESP_ADDR", &env_addr)
        .start();
    assert_eq!(node.resp_port(), ports[1]);
    assert!(ping(ports[1]));
    drop(node);
    // A flag over both.
    let node = Launch::new(&["--config", config, "--resp-addr", &flag_addr])
        .env("FIRN_RESP_ADDR", &env_addr)
        .start();
    assert_eq!(node.resp_port(), ports[2]);
    assert!(ping(ports[2]));
    drop(node);
    // Neither: the default (shown, not bound: another node may hold 7379 here).
    let settings = Launch::new(&[]).print_config();
    assert_eq!(
        setting(&settings, "resp-addr"),
        ("127.0.0.1:7379", "default")
    );
    let settings = Launch::new(&["--config", config]).print_config();
    assert_eq!(
        setting(&settings, "resp-addr").1,
        format!("config file {config}")
    );
}

#[test]
fn each_setting_comes_from_the_highest_source_that_gives_it() {
    let file = temp_config("shards = 5\nreplication = 5\nsnapshot-every = 5\n");
    let config = file.path().to_str().unwrap();
    let settings = Launch::new(&["--config", config, "--shards", "7"])
        .env("FIRN_REPLICATION", "2")
        .env("FIRN_ALLOW_FLUSHALL", "true")
        .print_config();
    assert_eq!(setting(&settings, "shards"), ("7", "flag"));
    assert_eq!(
        setting(&settings, "replication"),
        ("2", "environment FIRN_REPLICATION")
    );
    assert_eq!(
        setting(&settings, "snapshot-every"),
        ("5", format!("config file {config}").as_str())
    );
    assert_eq!(setting(&settings, "max-connections"), ("20000", "default"));
    assert_eq!(
        setting(&settings, "allow-flushall"),
        ("true", "environment FIRN_ALLOW_FLUSHALL")
    );
}

#[test]
fn a_bad_setting_is_refused_and_nothing_starts() {
    let data = tempfile::tempdir().unwrap();
    let never = data.path().join("never");
    let bad = |text: &str, wants: &[&str]| {
        let file = temp_config(&format!("data-dir = \"{}\"\n{text}", never.display()));
        let config = file.path().to_str().unwrap();
        let (code, _, err) = Launch::new(&["--config", config]).run();
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(config), "{text}: {err}");
        for want in wants {
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(!never.exists(), "{text}: the data directory was created");
    };
    bad("shard = 3\n", &["line 2", "unknown key `shard`"]);
    bad(
        "shards = \"three\"\n",
        &["line 2", "`shards`", "invalid digit"],
    );
    bad("close-time-every = \"fast\"\n", &["`close-time-every`"]);
    bad("[cluster]\npeers = \"\"\n", &["`cluster` is a table"]);

    let (code, _, err) = Launch::new(&["--config", "/nonexistent/firn.toml"]).run();
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/firn.toml: cannot read"), "{err}");

    // A bad value in the environment is refused as the flag's would be.
    let dir = format!("{}", never.display());
    let (code, _, err) = Launch::new(&["--data-dir", &dir])
        .env("FIRN_SHARDS", "many")
        .run();
    assert_ne!(code, 0);
    assert!(err.contains("--shards"), "{err}");
    // A peers list that does not parse, and a node id from a name without a number.
    let (code, _, err) = Launch::new(&["--data-dir", &dir, "--peers", "1=a:1,b"]).run();
    assert_ne!(code, 0);
    assert!(err.contains("--peers"), "{err}");
    assert!(!never.exists());
}

#[test]
fn the_systemd_example_config_starts_and_serves() {
    let example = repo_file("deploy/systemd/firn.toml");
    let config = example.to_str().unwrap();
    let settings = Launch::new(&["--config", config]).print_config();
    let from_file = format!("config file {config}");
    assert_eq!(
        setting(&settings, "resp-addr"),
        ("0.0.0.0:7379", from_file.as_str())
    );
    assert_eq!(
        setting(&settings, "http-addr"),
        ("0.0.0.0:7380", from_file.as_str())
    );
    assert_eq!(
        setting(&settings, "peer-addr"),
        ("0.0.0.0:7381", from_file.as_str())
    );
    assert_eq!(
        setting(&settings, "data-dir"),
        ("/var/lib/firn", from_file.as_str())
    );

    // Run with that file; only where it listens and keeps its data are overridden by flags
    // (this machine is shared: its fixed ports may be taken, /var/lib/firn is not ours).
    let data = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let http_addr = format!("127.0.0.1:{}", ports[1]);
    let node = Launch::new(&[
        "--config",
        config,
        "--data-dir",
        data.path().to_str().unwrap(),
        "--resp-addr",
        &format!("127.0.0.1:{}", ports[0]),
        "--http-addr",
        &http_addr,
        "--peer-addr",
        "127.0.0.1:0",
    ])
    .start();
    assert!(ping(node.resp_port()));
    assert_cluster_serves(&[http_addr]);
    assert!(data.path().join("FORMAT").exists());
}

#[test]
fn peers_are_reached_by_host_name() {
    // The first address "localhost" resolves to is the one a peer connects to.
    let ip: IpAddr = ("localhost", 0)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
        .ip();
    let ports = free_ports(9);
    let peers = (0..3)
        .map(|i| format!("{}=localhost:{}", i + 1, ports[3 * i + 2]))
        .collect::<Vec<_>>()
        .join(",");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let addr = |port: u16| std::net::SocketAddr::new(ip, port).to_string();
    let nodes: Vec<Serving> = (0..3)
        .map(|i| {
            Launch::new(&[
                "--data-dir",
                dirs[i].path().to_str().unwrap(),
                "--resp-addr",
                &addr(ports[3 * i]),
                "--http-addr",
                &addr(ports[3 * i + 1]),
            ])
            .env("FIRN_NODE_ID", &(i + 1).to_string())
            .env("FIRN_PEERS", &peers)
            .env("FIRN_PEER_ADDR", &addr(ports[3 * i + 2]))
            .start()
        })
        .collect();
    assert_cluster_serves(&(0..3).map(|i| addr(ports[3 * i + 1])).collect::<Vec<_>>());
    drop(nodes);
}

/// Whether this process may make mount and UTS namespaces (root, with `unshare`).
fn can_unshare() -> bool {
    let ok = Command::new("unshare")
        .args(["--mount", "--uts", "--", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: `unshare --mount --uts` is not possible here (needs root)");
    }
    ok
}

/// A loopback subnet 127.77.X.0/24 of this test process's own, so that fixed ports (the
/// deploy files' 7379-7381) do not meet another test's.
fn loopback(host: u8) -> String {
    format!("127.77.{}.{host}", std::process::id() % 250)
}

#[test]
fn host_ordinal_takes_the_node_id_from_the_pods_name() {
    if !can_unshare() {
        return;
    }
    let hosts = temp_config("127.0.0.1 localhost\n");
    let settings = Launch::new(&["--node-id", "host-ordinal"])
        .host("firn-2", hosts.path())
        .print_config();
    let (id, source) = setting(&settings, "node-id");
    assert_eq!(id, "3");
    assert!(
        source.starts_with("host-ordinal of host name firn-2"),
        "{source}"
    );
    // A node started so answers as node 3.
    let data = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let http_addr = format!("127.0.0.1:{}", ports[1]);
    let _node = Launch::new(&[
        "--data-dir",
        data.path().to_str().unwrap(),
        "--resp-addr",
        &format!("127.0.0.1:{}", ports[0]),
        "--http-addr",
        &http_addr,
        "--peer-addr",
        "127.0.0.1:0",
    ])
    .env("FIRN_NODE_ID", "host-ordinal")
    .host("firn-2", hosts.path())
    .start();
    let (code, body) = http("GET", &format!("http://{http_addr}/v1/cluster"), None).unwrap();
    assert_eq!(code, 200);
    let cluster: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cluster["node_id"], 3, "{body}");
}

fn load_yaml(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(repo_file(path)).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn text(yaml: &Yaml) -> String {
    match yaml {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

#[test]
fn the_compose_clusters_environment_starts_three_nodes_that_serve() {
    if !can_unshare() {
        return;
    }
    let compose = load_yaml("deploy/compose.yaml").remove(0);
    let services = ["firn-1", "firn-2", "firn-3"];
    // Each service's name resolves to its own loopback address, as on the compose network.
    let hosts = temp_config(
        &services
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{} {s}\n", loopback(i as u8 + 11)))
            .collect::<String>(),
    );
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut http_addrs = Vec::new();
    let nodes: Vec<Serving> = services
        .iter()
        .enumerate()
        .map(|(i, service)| {
            let spec = &compose["services"][*service];
            let environment = spec["environment"].as_hash().expect("environment");
            let mut launch = Launch::new(&[]).host(service, hosts.path());
            for (key, value) in environment {
                let (key, mut value) = (text(key), text(value));
                // Every interface of a container is here its own loopback address, and
                // /data is a directory of this test's.
                if key.ends_with("_ADDR") {
                    value = value.replace("0.0.0.0", &loopback(i as u8 + 11));
                }
                if key == "FIRN_DATA_DIR" {
                    assert_eq!(value, "/data");
                    value = dirs[i].path().display().to_string();
                }
                if key == "FIRN_HTTP_ADDR" {
                    http_addrs.push(value.clone());
                }
                launch = launch.env(&key, &value);
            }
            assert_eq!(text(&spec["hostname"]), *service);
            launch.start()
        })
        .collect();
    assert_eq!(http_addrs.len(), 3);
    assert_cluster_serves(&http_addrs);
    // Every node is named to clients by its service's name.
    let (_, cluster) = cluster_at(&http_addrs[0]);
    assert_eq!(
        resp_addrs(&cluster),
        services.map(|s| format!("{s}:7379")),
        "{cluster}"
    );
    drop(nodes);
}

#[test]
fn the_kubernetes_config_starts_three_pods_that_serve() {
    if !can_unshare() {
        return;
    }
    let config_map = load_yaml("deploy/k8s/configmap.yaml").remove(0);
    let statefulset = load_yaml("deploy/k8s/statefulset.yaml").remove(0);
    let toml = text(&config_map["data"]["firn.toml"]);
    let spec = &statefulset["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let env = container["env"].as_vec().unwrap();
    assert_eq!(text(&statefulset["spec"]["serviceName"]), "firn-peers");
    assert_eq!(statefulset["spec"]["replicas"].as_i64(), Some(3));
    // The ConfigMap is mounted where FIRN_CONFIG points; here it is a file of this test's.
    let mount = container["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| text(&m["name"]) == "config")
        .map(|m| text(&m["mountPath"]))
        .unwrap();
    let config_path = pod_env(env, "firn-0")
        .into_iter()
        .find(|(k, _)| k == "FIRN_CONFIG")
        .unwrap()
        .1;
    assert_eq!(config_path, format!("{mount}/firn.toml"));
    let file = temp_config(&toml);

    // Pod firn-N is firn-N.firn-peers to the others (the headless Service's names).
    let pods = ["firn-0", "firn-1", "firn-2"];
    let hosts = temp_config(
        &pods
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{} {p}.firn-peers {p}\n", loopback(i as u8 + 1)))
            .collect::<String>(),
    );
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let http_addrs: Vec<String> = (0..3)
        .map(|i| format!("{}:7380", loopback(i as u8 + 1)))
        .collect();
    let nodes: Vec<Serving> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            let ip = loopback(i as u8 + 1);
            let mut launch = Launch::new(&[]).host(pod, hosts.path());
            for (key, value) in pod_env(env, pod) {
                if key == "FIRN_ADVERTISE_HOST" {
                    assert_eq!(value, format!("{pod}.firn-peers"));
                }
                let value = if key == "FIRN_CONFIG" {
                    file.path().to_str().unwrap().to_string()
                } else {
                    value
                };
                launch = launch.env(&key, &value);
            }
            // The pod's interfaces and volume, through the environment (over the file).
            launch
                .env("FIRN_RESP_ADDR", &format!("{ip}:7379"))
                .env("FIRN_HTTP_ADDR", &format!("{ip}:7380"))
                .env("FIRN_PEER_ADDR", &format!("{ip}:7381"))
                .env("FIRN_DATA_DIR", dirs[i].path().to_str().unwrap())
                .start()
        })
        .collect();
    assert_cluster_serves(&http_addrs);
    for (i, addr) in http_addrs.iter().enumerate() {
        let (node_id, cluster) = cluster_at(addr);
        assert_eq!(node_id, i as u64 + 1, "{cluster}");
        // Every pod is named to clients by its name under the headless Service.
        assert_eq!(
            resp_addrs(&cluster),
            pods.map(|p| format!("{p}.firn-peers:7379")),
            "{cluster}"
        );
    }
    drop(nodes);
}

/// `/v1/cluster` of the node at `http_addr`: the answering node's id, and the cluster part.
fn cluster_at(http_addr: &str) -> (u64, serde_json::Value) {
    let (_, body) = http("GET", &format!("http://{http_addr}/v1/cluster"), None).unwrap();
    let mut answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    (
        answer["node_id"].as_u64().unwrap(),
        answer["cluster"].take(),
    )
}

/// The RESP address each node of a `/v1/cluster` answer is named to clients by.
fn resp_addrs(cluster: &serde_json::Value) -> Vec<String> {
    cluster["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["resp_addr"].as_str().map(str::to_string))
        .collect()
}

/// A container's environment as Kubernetes gives it to pod `pod`: each `value` with
/// `$(NAME)` replaced by a variable listed before it, and `valueFrom` the pod's name (the
/// only field these manifests take).
fn pod_env(env: &[Yaml], pod: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in env {
        let value = if e["valueFrom"].is_badvalue() {
            out.iter().fold(text(&e["value"]), |v, (k, known)| {
                v.replace(&format!("$({k})"), known)
            })
        } else {
            assert_eq!(
                text(&e["valueFrom"]["fieldRef"]["fieldPath"]),
                "metadata.name"
            );
            pod.to_string()
        };
        out.push((text(&e["name"]), value));
    }
    out
}
