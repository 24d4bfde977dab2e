//! `firn cluster status` and `firn cluster remove`: the cluster as the node at --addr sees
//! it (`FIRN.CLUSTER`, a JSON view of nodes and shards), printed as tables, and the removal
//! of a node followed until it has left.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use firn_client::Client;
use serde_json::Value;

use crate::followed::followed_line;
use crate::{Target, connect, show};

#[derive(Subcommand)]
pub enum ClusterAction {
    /// Nodes, shards, leaders and replica lag, as the node at --addr sees them.
    Status(StatusArgs),
    /// Remove a node: its replicas move to the other nodes first, then it leaves the
    /// cluster (stop its process afterwards). Waits until it is gone unless --no-wait.
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print the raw JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct RemoveArgs {
    /// The node to remove (its id, as `firn cluster status` lists it).
    node_id: u64,
    /// Answer once the move has started, without waiting for it to end.
    #[arg(long)]
    no_wait: bool,
    /// Longest wait for the move.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    target: Target,
}

pub async fn run_cluster(action: ClusterAction) -> Result<(), String> {
    match action {
        ClusterAction::Status(args) => status(args).await,
        ClusterAction::Remove(args) => remove(args).await,
    }
}

/// `FIRN.CLUSTER`'s answer: the cluster view as JSON text.
async fn view_text(client: &Client) -> Result<String, String> {
    let raw = client
        .raw(&redis::cmd("FIRN.CLUSTER"))
        .await
        .map_err(show)?;
    redis::from_redis_value(raw).map_err(|e| e.to_string())
}

fn parse_view(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// The items of a JSON array field (none when it is absent or not an array).
fn items<'a>(view: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    view[field].as_array().into_iter().flatten()
}

/// `firn cluster status`: the view as tables (or raw with --json); an error when a shard
/// has no leader, so that scripts can wait on the exit status.
async fn status(args: StatusArgs) -> Result<(), String> {
    let text = view_text(&connect(&args.target).await?).await?;
    if args.json {
        println!("{text}");
        return Ok(());
    }
    let view = parse_view(&text)?;
    print_nodes(&view);
    println!();
    print_shards(&view);
    if items(&view, "shards").any(|s| s["leader"].is_null()) {
        return Err("some shards have no leader".into());
    }
    Ok(())
}

fn print_nodes(view: &Value) {
    println!(
        "{:<6} {:<22} {:<22} {:<5} {:<10} {:<7} note",
        "node", "resp", "http", "up", "meta", "clock"
    );
    let leaving: Vec<u64> = items(view, "leaving").filter_map(|n| n.as_u64()).collect();
    for n in items(view, "nodes") {
        let note = if n["node_id"]
            .as_u64()
            .is_some_and(|id| leaving.contains(&id))
        {
            "leaving: its replicas are moving"
        } else {
            ""
        };
        let clock = &n["clock"];
        let (state, offsets) = clock_text(clock);
        println!(
            "{:<6} {:<22} {:<22} {:<5} {:<10} {:<7} {note}",
            n["node_id"].as_u64().unwrap_or(0),
            n["resp_addr"].as_str().unwrap_or("-"),
            n["http_addr"].as_str().unwrap_or("-"),
            n["up"].as_bool().unwrap_or(false),
            n["meta"].as_str().unwrap_or("-"),
            state,
        );
        if let Some(offsets) = offsets {
            println!("       {offsets}");
        }
    }
}

/// A node's clock as the table shows it: `ok` or `BEYOND` (its clock is beyond the bound
/// on clock offsets: it stamps no writes), and a line of the offsets it measured to its
/// peers (`node 2 +0.12 ms ±0.05`).
fn clock_text(clock: &Value) -> (&'static str, Option<String>) {
    let Some(view) = clock.as_object() else {
        return ("-", None);
    };
    let state = if view["within_bound"].as_bool().unwrap_or(true) {
        "ok"
    } else {
        "BEYOND"
    };
    let peers: Vec<String> = view["peers"]
        .as_object()
        .map(|peers| {
            peers
                .iter()
                .map(|(node, o)| {
                    let ms = |v: &Value| v.as_f64().unwrap_or(0.0) / 1_000.0;
                    format!(
                        "node {node} {:+.2} ms ±{:.2}",
                        ms(&o["offset_us"]),
                        ms(&o["uncertainty_us"])
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let bound_ms = view["max_offset_us"].as_u64().unwrap_or(0) / 1_000;
    let line = (!peers.is_empty())
        .then(|| format!("clock offsets (bound {bound_ms} ms): {}", peers.join(", ")));
    (state, line)
}

fn print_shards(view: &Value) {
    println!(
        "{:<6} {:<14} {:<10} {:<8} {:<12} replica lag (entries)",
        "shard", "slots", "durability", "leader", "replicas"
    );
    for s in items(view, "shards") {
        let replicas = s["replicas"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        println!(
            "{:<6} {:<14} {:<10} {:<8} {:<12} {}",
            s["shard_id"].as_u64().unwrap_or(0),
            format!("{}-{}", s["slots"][0], s["slots"][1]),
            s["durability"].as_str().unwrap_or("disk"),
            s["leader"]
                .as_u64()
                .map_or("none".into(), |l| l.to_string()),
            replicas,
            lag_text(&s["replica_lag"])
        );
        if let Some(m) = s["moving"].as_object() {
            println!(
                "       moving a replica: add {} remove {}",
                m["add"], m["remove"]
            );
        }
        if let Some(f) = s["followed"].as_object() {
            println!("       {}", followed_line(f));
        }
    }
}

/// A shard's replica lag as `node N: E` per replica (entries behind its leader), or `-`
/// when no leader reported it.
fn lag_text(lag: &Value) -> String {
    let parts: Vec<String> = lag
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(node, behind)| format!("node {node}: {behind}"))
                .collect()
        })
        .unwrap_or_default();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// `firn cluster remove`: asks for the removal, then (unless --no-wait) polls the view
/// once a second until the node is no longer listed or --timeout passes.
async fn remove(args: RemoveArgs) -> Result<(), String> {
    let RemoveArgs {
        node_id,
        no_wait,
        timeout,
        target,
    } = args;
    let client = connect(&target).await?;
    client
        .raw(redis::cmd("FIRN.CLUSTER").arg("REMOVE").arg(node_id))
        .await
        .map_err(show)?;
    println!("removing node {node_id}: its replicas move to the other nodes");
    if no_wait {
        return Ok(());
    }
    let deadline = Instant::now() + timeout;
    loop {
        let view = parse_view(&view_text(&client).await?)?;
        let Some(held) = replicas_held(&view, node_id) else {
            println!("node {node_id} has left the cluster; its process can be stopped");
            return Ok(());
        };
        if Instant::now() > deadline {
            // Only the wait gives up: the cluster goes on moving the replicas.
            return Err(format!(
                "node {node_id} still holds {held} replicas after {timeout:?}; the move goes on"
            ));
        }
        eprintln!("  node {node_id} still holds {held} replicas");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How many shards still have a replica on `node_id`; `None` once the node is not listed
/// (it has left the cluster).
fn replicas_held(view: &Value, node_id: u64) -> Option<usize> {
    let listed = items(view, "nodes").any(|n| n["node_id"].as_u64() == Some(node_id));
    listed.then(|| {
        items(view, "shards")
            .filter(|s| {
                s["replicas"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x.as_u64() == Some(node_id)))
            })
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::lag_text;

    #[test]
    fn replica_lag_reads_per_node_not_as_json() {
        let lag = serde_json::json!({"1": 0, "2": 3});
        assert_eq!(lag_text(&lag), "node 1: 0, node 2: 3");
        assert_eq!(lag_text(&serde_json::json!({})), "-");
        assert_eq!(lag_text(&serde_json::Value::Null), "-");
    }
}
