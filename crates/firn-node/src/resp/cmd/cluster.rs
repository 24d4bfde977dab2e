//! Cluster commands: CLUSTER SLOTS / SHARDS / NODES / INFO / MYID / KEYSLOT, READONLY,
//! READWRITE and FIRN.CLUSTER [STATUS | REMOVE id]. Each shard's Raft leader is its master,
//! its other replicas are replicas, so cluster-aware clients send writes straight to leaders;
//! anything sent elsewhere is forwarded.

use bytes::Bytes;
use firn_model::FirnError;

use super::{exact_arity, unknown_subcommand};
use crate::cluster::view::{ClusterView, ShardView};
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;

pub const CLUSTER: CommandSpec = CommandSpec {
    name: "cluster",
    arity: -2,
    flags: &[],
    keys: KeyPositions::NONE,
    group: Group::Cluster,
    since: FIRST_RELEASE,
    summary: "SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT key: the cluster as Redis Cluster clients read it.",
    parse: cluster,
};

pub const READONLY: CommandSpec = CommandSpec {
    name: "readonly",
    arity: 1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Cluster,
    since: FIRST_RELEASE,
    summary: "Accepted: every replica serves linearizable reads.",
    // Every replica serves linearizable reads, so there is no mode to switch.
    parse: |_| Ok(Action::Reply(Reply::Ok)),
};

pub const READWRITE: CommandSpec = CommandSpec {
    name: "readwrite",
    ..READONLY
};

pub const FIRN_CLUSTER: CommandSpec = CommandSpec {
    name: "firn.cluster",
    arity: -1,
    flags: &[Flag::Admin],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "The cluster as JSON (STATUS, the default), or REMOVE id: move a node's replicas away and remove it.",
    parse: firn_cluster,
};

fn cluster(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    match sub.as_str() {
        "KEYSLOT" => {
            exact_arity(&args, 1)?;
            Ok(Action::Reply(Reply::Int(
                firn_model::slot::slot_of(&args.bytes()?) as i64,
            )))
        }
        "SLOTS" | "SHARDS" | "NODES" | "INFO" | "MYID" => {
            args.done()?;
            Ok(Action::Cluster(sub))
        }
        _ => Err(unknown_subcommand("cluster", &sub)),
    }
}

fn firn_cluster(mut args: Args) -> Result<Action, FirnError> {
    if args.is_empty() {
        return Ok(Action::Cluster("FIRN".into()));
    }
    let sub = args.text()?.to_uppercase();
    match sub.as_str() {
        "STATUS" => {
            args.done()?;
            Ok(Action::Cluster("FIRN".into()))
        }
        "REMOVE" => {
            let id = args.u64("node id")?;
            args.done()?;
            Ok(Action::ClusterRemove(id))
        }
        _ => Err(unknown_subcommand("firn.cluster", &sub)),
    }
}

/// A node id as Redis Cluster shows them: 40 hex digits.
fn cluster_node_id(id: u64) -> String {
    format!("{id:040x}")
}

/// (ip, port) of a node's RESP address.
fn ip_port(addr: &str) -> (String, i64) {
    match addr.rsplit_once(':') {
        Some((ip, port)) => (ip.to_string(), port.parse().unwrap_or(0)),
        None => (addr.to_string(), 0),
    }
}

/// What CLUSTER SLOTS / SHARDS / NODES / INFO / MYID and FIRN.CLUSTER (`sub` "FIRN") answer.
pub fn cluster_reply(sub: &str, view: &ClusterView, me: u64) -> Reply {
    let addr = |id: u64| {
        view.node(id)
            .filter(|n| n.up)
            .map(|n| ip_port(&n.resp_addr))
    };
    // Master first (the leader, or the first replica while none is known), then the others.
    let ordered = |s: &ShardView| -> Vec<u64> {
        let Some(master) = s.leader.or(s.replicas.first().copied()) else {
            return Vec::new();
        };
        std::iter::once(master)
            .chain(s.replicas.iter().copied().filter(move |r| *r != master))
            .collect()
    };
    match sub {
        "MYID" => Reply::text(cluster_node_id(me)),
        "SLOTS" => Reply::Array(
            view.slot_shards()
                .map(|s| {
                    let mut entry =
                        vec![Reply::Int(s.slots.0 as i64), Reply::Int(s.slots.1 as i64)];
                    for id in ordered(s) {
                        if let Some((ip, port)) = addr(id) {
                            entry.push(Reply::Array(vec![
                                Reply::text(ip),
                                Reply::Int(port),
                                Reply::text(cluster_node_id(id)),
                            ]));
                        }
                    }
                    Reply::Array(entry)
                })
                .collect(),
        ),
        "SHARDS" => Reply::Array(
            view.slot_shards()
                .map(|s| {
                    let nodes = ordered(s)
                        .into_iter()
                        .enumerate()
                        .map(|(i, id)| {
                            let (ip, port) = addr(id).unwrap_or_default();
                            Reply::Map(vec![
                                (Reply::text("id"), Reply::text(cluster_node_id(id))),
                                (Reply::text("port"), Reply::Int(port)),
                                (Reply::text("ip"), Reply::text(&ip)),
                                (Reply::text("endpoint"), Reply::text(&ip)),
                                (
                                    Reply::text("role"),
                                    Reply::text(if i == 0 { "master" } else { "replica" }),
                                ),
                                (Reply::text("replication-offset"), Reply::Int(0)),
                                (
                                    Reply::text("health"),
                                    Reply::text(if addr(id).is_some() {
                                        "online"
                                    } else {
                                        "failed"
                                    }),
                                ),
                            ])
                        })
                        .collect();
                    Reply::Map(vec![
                        (
                            Reply::text("slots"),
                            Reply::Array(vec![
                                Reply::Int(s.slots.0 as i64),
                                Reply::Int(s.slots.1 as i64),
                            ]),
                        ),
                        (Reply::text("nodes"), Reply::Array(nodes)),
                    ])
                })
                .collect(),
        ),
        "NODES" => {
            let lines: Vec<String> = view
                .nodes
                .iter()
                .map(|n| {
                    let (ip, port) = ip_port(&n.resp_addr);
                    let mut flags = String::new();
                    if n.node_id == me {
                        flags.push_str("myself,");
                    }
                    flags.push_str("master");
                    if !n.up {
                        flags.push_str(",fail");
                    }
                    let slots: Vec<String> = view
                        .slot_shards()
                        .filter(|s| s.leader == Some(n.node_id))
                        .map(|s| format!("{}-{}", s.slots.0, s.slots.1))
                        .collect();
                    format!(
                        "{} {ip}:{port}@{port} {flags} - 0 0 0 {} {}",
                        cluster_node_id(n.node_id),
                        if n.up { "connected" } else { "disconnected" },
                        slots.join(" ")
                    )
                    .trim_end()
                    .to_string()
                })
                .collect();
            Reply::Bulk(Bytes::from(lines.join("\n") + "\n"))
        }
        "INFO" => {
            let up = view.nodes.iter().filter(|n| n.up).count();
            let led = view.shards.iter().filter(|s| s.leader.is_some()).count();
            let slots_ok: u32 = view
                .slot_shards()
                .filter(|s| s.leader.is_some())
                .map(|s| (s.slots.1 - s.slots.0) as u32 + 1)
                .sum();
            Reply::Bulk(Bytes::from(format!(
                "cluster_enabled:1\r\ncluster_state:{}\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:{slots_ok}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_nodes_up:{up}\r\ncluster_shards_with_leader:{led}\r\nfirn_cluster_id:{}\r\n",
                if view.healthy() { "ok" } else { "fail" },
                16384 - slots_ok,
                view.nodes.len(),
                view.shards.len(),
                view.cluster_id.as_deref().unwrap_or(""),
            )))
        }
        _ => Reply::Bulk(Bytes::from(
            serde_json::to_string_pretty(view).unwrap_or_default(),
        )),
    }
}
