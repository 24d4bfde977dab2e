//! TLS on the client listeners and mutual TLS between nodes, with the real binary and stock
//! clients (redis-cli --tls, redis-py with ssl, curl over https): what is served, and what is
//! refused (plain text where TLS is required, a peer of another CA, bad flags).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, FirnProcess, wait_until};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Longest any one external client (redis-cli, python3, curl) may run.
const CLIENT_SECONDS_MAX: &str = "20";

/// A CA and a node certificate it signed (for 127.0.0.1 and localhost), as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
        };
        pki.issue("");
        pki
    }

    /// Writes `{prefix}ca.pem`, `{prefix}node.pem` and `{prefix}node.key`: a fresh CA and
    /// a certificate it signed, good as a server and as a client.
    fn issue(&self, prefix: &str) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, format!("firn test CA {prefix}"));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let node_key = KeyPair::generate().unwrap();
        let mut node =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        node.distinguished_name
            .push(DnType::CommonName, "firn node");
        node.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let node_cert = node.signed_by(&node_key, &issuer).unwrap();
        std::fs::write(self.path(&format!("{prefix}ca.pem")), ca_cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{prefix}node.pem")), node_cert.pem()).unwrap();
        std::fs::write(
            self.path(&format!("{prefix}node.key")),
            node_key.serialize_pem(),
        )
        .unwrap();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// Runs a client under `timeout`; its stdout, trimmed, and whether it succeeded.
fn client(program: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> (bool, String, String) {
    let out = Command::new("timeout")
        .arg(CLIENT_SECONDS_MAX)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

/// A node (in memory) with the test PKI's certificate, and `extra` flags.
fn tls_node(pki: &Pki, data: &std::path::Path, extra: &[&str]) -> FirnProcess {
    let (cert, key) = (pki.arg("node.pem"), pki.arg("node.key"));
    let args = [
        &["--in-memory", "--tls-cert", &cert, "--tls-key", &key],
        extra,
    ]
    .concat();
    FirnProcess::start(data, &args)
}

/// redis-cli's arguments for `args` over TLS to `addr`, trusting the test CA.
fn redis_cli_tls_args(pki: &Pki, addr: &str, args: &[&str]) -> Vec<String> {
    let (host, port) = addr.rsplit_once(':').unwrap();
    [
        "--tls",
        "--cacert",
        &pki.arg("ca.pem"),
        "-h",
        host,
        "-p",
        port,
    ]
    .iter()
    .chain(args)
    .map(|a| a.to_string())
    .collect()
}

fn redis_cli_tls(pki: &Pki, addr: &str, args: &[&str]) -> String {
    let (ok, out, err) = client("redis-cli", &redis_cli_tls_args(pki, addr, args));
    assert!(ok, "redis-cli --tls {args:?}: {err}");
    out
}

fn curl_https(pki: &Pki, url: &str) -> String {
    let ca = pki.arg("ca.pem");
    let (ok, out, err) = client("curl", &["-sS", "--fail", "--cacert", &ca, url]);
    assert!(ok, "curl {url}: {err}");
    out
}

/// Everything a plain-text connection is told before the node closes it (bounded).
fn plain_exchange(addr: &str, send: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(send).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_tls_node_answers_redis_cli_redis_py_and_https_and_still_plain_text() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let node = tls_node(&pki, data.path(), &[]);
    let resp = node.resp_addr();
    assert_eq!(redis_cli_tls(&pki, &resp, &["SET", "k", "v"]), "OK");
    assert_eq!(redis_cli_tls(&pki, &resp, &["GET", "k"]), "v");

    let py = format!(
        "import redis\n\
         r = redis.Redis(host='127.0.0.1', port={}, ssl=True, ssl_ca_certs='{}', socket_timeout=10)\n\
         r.set('py', 'snake')\n\
         print(r.get('py').decode(), r.get('k').decode())",
        node.resp_port,
        pki.arg("ca.pem")
    );
    let (ok, out, err) = client("python3", &["-c", &py]);
    assert!(ok, "redis-py with ssl: {err}");
    assert_eq!(out, "snake v");

    let body = curl_https(&pki, &format!("https://{}/v1/kv/py", node.http_addr));
    assert!(body.contains("snake"), "{body}");
    // A certificate the client does not trust fails the handshake.
    let (ok, _, _) = client(
        "curl",
        &[
            "-sS",
            "--fail",
            &format!("https://{}/v1/kv/py", node.http_addr),
        ],
    );
    assert!(!ok, "curl without the CA trusted the node's certificate");

    // Without --tls-required the same ports take plain text too.
    assert_eq!(
        plain_exchange(&resp, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nQUIT\r\n"),
        "$1\r\nv\r\n+OK\r\n"
    );
    let http = plain_exchange(
        &node.http_addr,
        b"GET /v1/kv/py HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(
        http.starts_with("HTTP/1.1 200") && http.contains("snake"),
        "{http}"
    );
}

#[test]
fn with_tls_required_plain_text_clients_are_refused_and_told_why() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    // From a config file, as a deployment would give them.
    let config = pki.path("firn.toml");
    std::fs::write(
        &config,
        format!(
            "tls-cert = {:?}\ntls-key = {:?}\ntls-required = true\n",
            pki.arg("node.pem"),
            pki.arg("node.key")
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let node = FirnProcess::start(data.path(), &["--in-memory", "--config", &config]);
    let resp = node.resp_addr();

    let told = plain_exchange(&resp, b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(
        told,
        "-ERR TLS is required on this port (connect with TLS, e.g. redis-cli --tls)\r\n"
    );
    let (_, out, _) = client("redis-cli", &["-p", &node.resp_port.to_string(), "PING"]);
    assert!(out.contains("TLS is required"), "plain redis-cli: {out}");
    let told = plain_exchange(&node.http_addr, b"GET /v1/kv/k HTTP/1.1\r\nhost: x\r\n\r\n");
    assert!(
        told.starts_with("HTTP/1.1 400 Bad Request") && told.contains("TLS is required"),
        "{told}"
    );

    // TLS clients are served, and the refusals are counted per listener.
    assert_eq!(redis_cli_tls(&pki, &resp, &["PING"]), "PONG");
    let metrics = curl_https(&pki, &format!("https://{}/metrics", node.http_addr));
    for listener in ["resp", "http"] {
        let line = format!("firn_tls_refused_total{{listener=\"{listener}\"}}");
        let counted = metrics
            .lines()
            .find(|l| l.starts_with(&line))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
        assert!(counted.is_some_and(|n| n >= 1), "{line} in:\n{metrics}");
    }
}

#[test]
fn the_firn_subcommands_reach_a_tls_node_with_the_ca() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let node = tls_node(&pki, data.path(), &["--tls-required"]);
    let (resp, http) = (node.resp_addr(), node.http_addr.clone());
    let ca = pki.arg("ca.pem");
    let firn = common::firn_bin();
    let with_ca = |args: &[&str]| {
        let mut all = vec!["--ca", &ca];
        all.extend_from_slice(args);
        client(&firn, &all)
    };
    // RESP (put, get), and HTTP (the log, a file) with the CA.
    let (ok, _, err) = with_ca(&["put", "k", "over tls", "--addr", &resp]);
    assert!(ok, "{err}");
    let (ok, out, err) = with_ca(&["get", "k", "--addr", &resp]);
    assert!(ok && out == "over tls", "{out} {err}");
    let (ok, _, err) = with_ca(&[
        "log",
        "append",
        "l",
        "--tag",
        "t",
        "x",
        "--http-addr",
        &http,
    ]);
    assert!(ok, "{err}");
    let copy = data.path().join("k.out");
    let (ok, _, err) = with_ca(&[
        "get",
        "k",
        "--output",
        copy.to_str().unwrap(),
        "--http-addr",
        &http,
    ]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&copy).unwrap(), b"over tls");
    // Without it the node refuses them, and with another CA's certificate they refuse it.
    let (ok, _, _) = client(&firn, &["get", "k", "--addr", &resp]);
    assert!(!ok);
    pki.issue("other-");
    let other = pki.arg("other-ca.pem");
    let (ok, _, err) = client(&firn, &["--ca", &other, "get", "k", "--addr", &resp]);
    assert!(!ok, "a node another CA signed was trusted: {err}");
}

/// A site sends to a hub that takes only TLS (`--hub rediss://… --hub-ca`), the hub's
/// certificate checked against the CA given; a site given another CA sends nothing.
#[test]
fn a_site_sends_to_a_hub_over_tls_and_not_to_one_another_ca_signed() {
    let pki = Pki::new();
    pki.issue("other-");
    let hub_dir = tempfile::tempdir().unwrap();
    let hub = tls_node(&pki, hub_dir.path(), &["--tls-required"]);
    let hub_resp = hub.resp_addr();
    let hub_url = format!("rediss://{hub_resp}");
    let site = |ca: &str, dir: &std::path::Path, name: &str| {
        let ca = pki.arg(ca);
        FirnProcess::start(
            dir,
            &[
                "--in-memory",
                "--site",
                name,
                "--hub",
                &hub_url,
                "--hub-ca",
                &ca,
                "--uplink",
                "sensor/",
            ],
        )
    };
    let (good_dir, bad_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let good = site("ca.pem", good_dir.path(), "plant1");
    let bad = site("other-ca.pem", bad_dir.path(), "plant2");
    for (node, value) in [(&good, "21.5"), (&bad, "19.0")] {
        let port = node.resp_port.to_string();
        let (ok, out, err) = client("redis-cli", &["-p", &port, "SET", "sensor/t", value]);
        assert!(ok && out == "OK", "{out} {err}");
    }
    let mut at_hub = String::new();
    let came = wait_until(Duration::from_secs(20), || {
        at_hub = redis_cli_tls(&pki, &hub_resp, &["GET", "sites/plant1/sensor/t"]);
        at_hub == "21.5"
    });
    assert!(
        came,
        "the site's write is not at the hub over TLS: {at_hub:?}"
    );
    // The other site has had as long, and a few seconds more: it trusts no certificate the
    // hub shows, so nothing of it is there.
    std::thread::sleep(Duration::from_secs(3));
    let stray = redis_cli_tls(&pki, &hub_resp, &["GET", "sites/plant2/sensor/t"]);
    assert_eq!(
        stray, "",
        "a site sent to a hub whose certificate it was not given"
    );
}

/// A node whose certificate is self-signed and marked as a CA — what `openssl req -x509`
/// makes by default, which redis-cli and curl take when given as the CA — is reached by the
/// `firn` subcommands given that certificate (RESP, a watch, HTTP); another such
/// certificate is still refused, saying what to do, and so is a plain connection to it.
#[test]
fn a_self_signed_certificate_marked_as_a_ca_is_taken_when_given() {
    let dir = tempfile::tempdir().unwrap();
    let issue = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.self_signed(&key).unwrap();
        let (pem, key_pem) = (
            dir.path().join(format!("{name}.pem")),
            dir.path().join(format!("{name}.key")),
        );
        std::fs::write(&pem, cert.pem()).unwrap();
        std::fs::write(&key_pem, key.serialize_pem()).unwrap();
        (pem.display().to_string(), key_pem.display().to_string())
    };
    let (cert, key) = issue("node");
    let (other, _) = issue("other");
    let node = FirnProcess::start(
        dir.path(),
        &[
            "--in-memory",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-required",
        ],
    );
    let (resp, http) = (node.resp_addr(), node.http_addr.clone());
    let firn = common::firn_bin();
    let with = |ca: &str, args: &[&str]| {
        let mut all = vec!["--ca", ca];
        all.extend_from_slice(args);
        client(&firn, &all)
    };
    let (ok, _, err) = with(&cert, &["put", "k", "self-signed", "--addr", &resp]);
    assert!(ok, "{err}");
    let (ok, out, err) = with(&cert, &["get", "k", "--addr", &resp]);
    assert!(ok && out == "self-signed", "{out} {err}");
    let (ok, out, err) = with(
        &cert,
        &[
            "watch",
            "k",
            "--from-version",
            "1",
            "--count",
            "1",
            "--addr",
            &resp,
        ],
    );
    assert!(ok && out.contains("self-signed"), "{out} {err}");
    let (ok, _, err) = with(
        &cert,
        &[
            "log",
            "append",
            "l",
            "--tag",
            "t",
            "x",
            "--http-addr",
            &http,
        ],
    );
    assert!(ok, "{err}");
    let (ok, _, err) = with(&other, &["get", "k", "--addr", &resp]);
    assert!(!ok && err.contains("give that certificate itself"), "{err}");
    let (ok, _, err) = client(&firn, &["get", "k", "--addr", &resp]);
    assert!(!ok && err.contains("--ca"), "{err}");
}

/// `firn serve` with these flags (on free loopback ports): its exit status and stderr, or
/// `None` if it was still running after 20 s (then it was killed).
fn serve_refused(args: &[&str]) -> Option<(bool, String)> {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(common::firn_bin())
        .args(["serve", "--in-memory", "--resp-addr", "127.0.0.1:0"])
        .args(["--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data.path())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((status.success(), err));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn bad_tls_flags_are_refused_at_start_with_what_is_wrong() {
    let pki = Pki::new();
    pki.issue("other-");
    let not_pem = pki.path("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let (cert, key, ca) = (pki.arg("node.pem"), pki.arg("node.key"), pki.arg("ca.pem"));
    let (other_key, not_pem) = (pki.arg("other-node.key"), not_pem.display().to_string());
    let missing = pki.arg("missing.pem");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--tls-cert", &cert], "--tls-cert needs --tls-key"),
        (vec!["--tls-key", &key], "--tls-key needs --tls-cert"),
        (vec!["--tls-required"], "--tls-required needs --tls-cert"),
        (vec!["--tls-ca", &ca], "--tls-ca needs --tls-cert"),
        (
            vec!["--tls-cert", &missing, "--tls-key", &key],
            "cannot read it",
        ),
        (
            vec!["--tls-cert", &not_pem, "--tls-key", &key],
            "no certificate in it",
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &not_pem],
            "no private key in it",
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &other_key],
            "is not the private key of --tls-cert",
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &not_pem],
            "--tls-ca",
        ),
    ];
    for (args, want) in cases {
        let Some((ok, err)) = serve_refused(&args) else {
            panic!("firn serve {args:?} started");
        };
        assert!(!ok && err.contains(want), "firn serve {args:?}: {err}");
    }
}

/// A counter's value in a node's /metrics (0 when absent).
fn counter(pki: &Pki, http_addr: &str, series: &str) -> u64 {
    let metrics = curl_https(pki, &format!("https://{http_addr}/metrics"));
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_cluster_in_mutual_tls_replicates_and_refuses_a_node_of_another_ca_or_plain_text() {
    let pki = Pki::new();
    pki.issue("other-");
    let tls = [
        "--in-memory".to_string(),
        "--tls-cert".into(),
        pki.arg("node.pem"),
        "--tls-key".into(),
        pki.arg("node.key"),
        "--tls-ca".into(),
        pki.arg("ca.pem"),
    ];
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let cluster = Cluster::start(3, &tls);
    cluster.wait_for_leaders(0, None);
    assert_eq!(
        redis_cli_tls(&pki, &cluster.resp_addr(0), &["SET", "mtls", "replicated"]),
        "OK"
    );
    for i in 0..3 {
        assert_eq!(
            redis_cli_tls(&pki, &cluster.resp_addr(i), &["GET", "mtls"]),
            "replicated",
            "node {}",
            i + 1
        );
    }

    // A node whose certificate another CA signed, and one in plain text, try to join.
    let contact = cluster.peer_addr(0);
    let (other_cert, other_key, other_ca) = (
        pki.arg("other-node.pem"),
        pki.arg("other-node.key"),
        pki.arg("other-ca.pem"),
    );
    let series = "firn_tls_refused_total{listener=\"peer\"}";
    let refused_before = counter(&pki, &cluster.http_addr(0), series);
    let other = [
        "--tls-cert",
        &other_cert,
        "--tls-key",
        &other_key,
        "--tls-ca",
        &other_ca,
    ];
    let joiners: Vec<(tempfile::TempDir, FirnProcess)> = [(4, &other[..]), (5, &[][..])]
        .into_iter()
        .map(|(id, tls): (u64, &[&str])| {
            let dir = tempfile::tempdir().unwrap();
            let id = id.to_string();
            let mut args = vec!["--in-memory", "--node-id", &id, "--join", &contact];
            args.extend_from_slice(tls);
            let node = FirnProcess::start(dir.path(), &args);
            (dir, node)
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || {
            counter(&pki, &cluster.http_addr(0), series) >= refused_before + 2
        }),
        "node 1 counted no refused peer connections"
    );
    // Given time to join, neither is a member: the cluster still lists its three nodes.
    std::thread::sleep(Duration::from_secs(3));
    let members = curl_https(
        &pki,
        &format!("https://{}/v1/cluster", cluster.http_addr(0)),
    );
    let members: serde_json::Value = serde_json::from_str(&members).unwrap();
    let nodes = members["cluster"]["nodes"].as_array().map_or(0, Vec::len);
    assert_eq!(nodes, 3, "{members}");
    drop(joiners);
}

#[test]
fn a_tls_client_over_the_connection_limit_reads_why_over_tls() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let node = tls_node(&pki, data.path(), &["--max-connections", "1"]);
    let resp = node.resp_addr();
    // The one place is taken by a connection that stays open.
    let held = TcpStream::connect(&resp).unwrap();
    let (_, out, err) = client("redis-cli", &redis_cli_tls_args(&pki, &resp, &["PING"]));
    assert!(
        format!("{out} {err}").contains("max number of clients reached"),
        "a TLS client over the limit was not told why: {out} / {err}"
    );
    // A plain-text client is still told in plain text.
    assert_eq!(
        plain_exchange(&resp, b"PING\r\n"),
        "-ERR max number of clients reached\r\n"
    );
    drop(held);
}
