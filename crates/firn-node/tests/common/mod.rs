//! An in-process node on free loopback ports, for front-end tests.

#![allow(dead_code)]

pub mod fuzz;
pub mod http;
pub mod reference;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use firn_node::{NodeConfig, RunningNode};

pub async fn start_node(allow_flushall: bool) -> RunningNode {
    let config = NodeConfig {
        resp_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        in_memory: true,
        allow_flushall,
        limits: firn_model::Limits {
            value_bytes_max: 64 * 1024,
        },
        retention_interval: Duration::from_millis(200),
        ..NodeConfig::default()
    };
    RunningNode::start(config).await.expect("node starts")
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// How many times a start whose loopback port was taken meanwhile is tried again.
const PORT_TRIES: usize = 5;

/// Starts the nodes `configs` makes (called again for each try), all together. A port is
/// chosen free and bound by its node a moment later; another test can take it in between
/// (`Address already in use`): then every node of the try is stopped and the start is tried
/// again on new ports.
pub async fn start_on_free_ports(configs: impl Fn() -> Vec<NodeConfig>) -> Vec<RunningNode> {
    for attempt in 1..=PORT_TRIES {
        let results =
            futures::future::join_all(configs().into_iter().map(RunningNode::start)).await;
        if results.iter().all(Result::is_ok) {
            return results.into_iter().map(|r| r.expect("started")).collect();
        }
        let taken = results
            .iter()
            .any(|r| matches!(r, Err(e) if e.to_string().contains("Address already in use")));
        let why = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect::<Vec<_>>()
            .join("; ");
        for node in results.into_iter().flatten() {
            node.shutdown().await;
        }
        assert!(taken && attempt < PORT_TRIES, "nodes did not start: {why}");
    }
    unreachable!("the last try either started or failed its assertion")
}

/// `n` in-process nodes of one cluster with `shards` shards, one replica each (in memory,
/// FLUSHALL allowed), as soon as each has started: leaders may still be being elected.
pub async fn start_cluster(n: u64, shards: u32) -> Vec<RunningNode> {
    start_on_free_ports(|| {
        let peers: BTreeMap<u64, String> = (1..=n).map(|i| (i, free_addr().to_string())).collect();
        (1..=n)
            .map(|node_id| NodeConfig {
                resp_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                peer_addr: peers[&node_id].parse().unwrap(),
                in_memory: true,
                allow_flushall: true,
                node_id,
                peers: peers.clone(),
                shards,
                replication: 1,
                ..NodeConfig::default()
            })
            .collect()
    })
    .await
}

pub async fn redis_conn(node: &RunningNode) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

pub async fn redis_conn_resp3(node: &RunningNode) -> redis::aio::MultiplexedConnection {
    let client =
        redis::Client::open(format!("redis://{}/?protocol=resp3", node.resp_addr)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// A connection whose replies may take longer than the client's default 500 ms (`BLOCK`, a
/// module of megabytes loaded on a busy machine).
pub async fn redis_conn_patient(node: &RunningNode) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(20)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Sends one command, its words given as strings.
pub async fn run(
    c: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}

/// The answer of a command that must succeed.
pub async fn ok(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> redis::Value {
    run(c, args)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The error line a command must get, as the server wrote it: `CODE detail`.
pub async fn error_line(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> String {
    match run(c, args).await {
        Ok(v) => panic!("{args:?} answered {v:?}, not an error"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

/// A field of a RESP map, whether it came as a map (RESP3) or as a flat array (RESP2).
pub fn field<'a>(v: &'a redis::Value, name: &str) -> Option<&'a redis::Value> {
    let is = |k: &redis::Value| {
        matches!(k, redis::Value::BulkString(b) if b == name.as_bytes())
            || matches!(k, redis::Value::SimpleString(s) if s == name)
    };
    match v {
        redis::Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        redis::Value::Array(items) => items
            .chunks(2)
            .find(|pair| pair.len() == 2 && is(&pair[0]))
            .map(|pair| &pair[1]),
        _ => None,
    }
}

pub fn bulk_text(v: &redis::Value) -> String {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// `FIRN.FUNCTION LOAD name module`: the version it was loaded as.
pub async fn function_load(
    c: &mut redis::aio::MultiplexedConnection,
    name: &str,
    module: &[u8],
) -> redis::RedisResult<i64> {
    redis::cmd("FIRN.FUNCTION")
        .arg("LOAD")
        .arg(name)
        .arg(module)
        .query_async(c)
        .await
}

/// Polls GET `key` until it reads `want`; fails the test after 20 s.
pub async fn eventually_reads(c: &mut redis::aio::MultiplexedConnection, key: &str, want: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got: Option<String> = redis::cmd("GET").arg(key).query_async(c).await.unwrap();
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{key} reads {got:?}, not {want:?}, 20 s on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

pub async fn assert_usable(c: &mut redis::aio::MultiplexedConnection) {
    assert_eq!(
        ok(c, &["PING"]).await,
        redis::Value::SimpleString("PONG".into()),
        "the connection goes on after an error"
    );
}

/// One in-memory node holding three shards of its own (a cluster of one, listed in its
/// peers), on free loopback ports.
pub fn three_shard_config() -> NodeConfig {
    let peer = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    NodeConfig {
        resp_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: peer,
        in_memory: true,
        peers: [(1, peer.to_string())].into_iter().collect(),
        shards: 3,
        replication: 1,
        ..NodeConfig::default()
    }
}

/// Two keys whose slots fall in different shards of three (0–5460, 5461–10921, …).
#[allow(dead_code)] // not every test binary needs it
pub fn two_keys_in_different_shards() -> (String, String) {
    let shard = |k: &str| firn_model::slot::slot_of(k.as_bytes()) as u32 * 3 / 16384;
    let other = (1..)
        .map(|i| format!("k{i}"))
        .find(|k| shard(k) != shard("k0"))
        .unwrap();
    ("k0".to_string(), other)
}

/// A node of three shards of its own ([`three_shard_config`]), started.
#[allow(dead_code)] // not every test binary needs it
pub async fn start_three_shard_node() -> RunningNode {
    start_three_shard_node_with(|c| c).await
}

/// A node of three shards of its own, its [`three_shard_config`] changed by `change`, started
/// (on new ports if another test took one meanwhile).
#[allow(dead_code)] // not every test binary needs it
pub async fn start_three_shard_node_with(change: impl Fn(NodeConfig) -> NodeConfig) -> RunningNode {
    start_on_free_ports(|| vec![change(three_shard_config())])
        .await
        .remove(0)
}
