//! An in-process node on free loopback ports, for front-end tests.

#![allow(dead_code)]

use std::net::SocketAddr;
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

pub async fn redis_conn(node: &RunningNode) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

pub async fn redis_conn_resp3(node: &RunningNode) -> redis::aio::MultiplexedConnection {
    let client =
        redis::Client::open(format!("redis://{}/?protocol=resp3", node.resp_addr)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}
