//! `--advertise-host`: a node listening on every interface (as in a container) announces the
//! host others reach it by — to the cluster it joins and to clients' cluster maps — not
//! `0.0.0.0`.

mod common;

use std::time::{Duration, Instant};

use common::FirnProcess;

fn on_every_interface(data: &std::path::Path, extra: &[&str]) -> FirnProcess {
    let mut args = vec![
        "--in-memory",
        "--resp-addr",
        "0.0.0.0:0",
        "--http-addr",
        "0.0.0.0:0",
        "--peer-addr",
        "0.0.0.0:0",
    ];
    args.extend_from_slice(extra);
    FirnProcess::start_with(data, &args)
}

fn port(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().1
}

fn cluster(node: &FirnProcess) -> Option<serde_json::Value> {
    let url = format!("http://127.0.0.1:{}/v1/cluster", port(&node.http_addr));
    ureq::get(&url)
        .timeout(Duration::from_secs(2))
        .call()
        .ok()?
        .into_json()
        .ok()
}

#[test]
fn a_node_announces_its_advertised_host_to_the_cluster_it_joins_and_to_clients() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = on_every_interface(d1.path(), &["--advertise-host", "127.0.0.1"]);
    let contact = format!("127.0.0.1:{}", port(&first.peer_addr));
    let second = on_every_interface(
        d2.path(),
        &[
            "--node-id",
            "2",
            "--join",
            &contact,
            "--advertise-host",
            "localhost",
        ],
    );
    let (first_resp, second_resp) = (
        format!("127.0.0.1:{}", first.resp_port),
        format!("localhost:{}", second.resp_port),
    );

    // Node 2 joined by the name it announced, and both are listed as announced.
    let deadline = Instant::now() + Duration::from_secs(30);
    let nodes = loop {
        let nodes: Vec<(u64, String, String)> = cluster(&first)
            .and_then(|j| j["cluster"]["nodes"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|n| {
                (
                    n["node_id"].as_u64().unwrap_or(0),
                    n["resp_addr"].as_str().unwrap_or("").to_string(),
                    n["http_addr"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        if nodes.len() == 2 && nodes.iter().all(|(_, r, _)| !r.is_empty()) {
            break nodes;
        }
        assert!(
            Instant::now() < deadline,
            "node 2 never joined as announced: {nodes:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(nodes[0].1, first_resp, "{nodes:?}");
    assert_eq!(nodes[1].1, second_resp, "{nodes:?}");
    assert_eq!(
        nodes[1].2,
        format!("localhost:{}", port(&second.http_addr)),
        "{nodes:?}"
    );

    // What a cluster-mode client reads: no node is named by 0.0.0.0.
    let out = std::process::Command::new("timeout")
        .args(["10", "redis-cli", "-p", &first.resp_port.to_string()])
        .args(["CLUSTER", "NODES"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&first_resp), "{text}");
    assert!(!text.contains("0.0.0.0"), "{text}");
}

#[test]
fn a_bad_advertised_host_is_refused_at_start() {
    for bad in ["host:7379", "", "a b", "-x..y"] {
        let out = std::process::Command::new(common::firn_bin())
            .args(["serve", "--in-memory", &format!("--advertise-host={bad}")])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--advertise-host"), "{bad:?}: {err}");
    }
}
