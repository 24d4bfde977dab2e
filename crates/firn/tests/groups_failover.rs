//! Consumer-group state survives a leader kill: a group made and fed on a 3-node cluster,
//! its stream's shard leader killed with SIGKILL, and another node then shows the same
//! pending entries and delivers to `>` readers exactly after the last delivered id — no
//! entry delivered twice, none lost.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard};
use redis::Value;
use redis::aio::MultiplexedConnection;

const ENTRIES: u64 = 10;
/// How long a command is retried while the cluster elects a new leader.
const RECOVERY_MAX: Duration = Duration::from_secs(30);

async fn connect(addr: &str) -> MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn run(c: &mut MultiplexedConnection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}

/// Runs a command until it succeeds (a read, or a write whose retry is harmless here),
/// for at most `RECOVERY_MAX`.
async fn patiently(c: &mut MultiplexedConnection, args: &[&str]) -> Value {
    let since = Instant::now();
    loop {
        match run(c, args).await {
            Ok(v) => return v,
            Err(e) if since.elapsed() < RECOVERY_MAX => {
                eprintln!("{args:?}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{args:?}: {e}"),
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// The ids of an XREADGROUP answer for one stream (nil: none).
fn delivered(v: &Value) -> Vec<String> {
    let Value::Array(streams) = v else {
        return Vec::new();
    };
    let Value::Array(stream) = &streams[0] else {
        panic!("{v:?}")
    };
    let Value::Array(entries) = &stream[1] else {
        panic!("{v:?}")
    };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(e) => text(&e[0]),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// XPENDING's extended answer as (id, consumer, deliveries).
fn pending(v: &Value) -> Vec<(String, String, i64)> {
    let Value::Array(rows) = v else {
        panic!("{v:?}")
    };
    rows.iter()
        .map(|r| match r {
            Value::Array(f) => (
                text(&f[0]),
                text(&f[1]),
                match f[3] {
                    Value::Int(n) => n,
                    _ => panic!("{f:?}"),
                },
            ),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_state_survives_a_leader_kill_and_delivery_goes_on_after_the_last_id() {
    let mut cluster = Cluster::ready(3, &[]).await;
    let key = key_in_shard(0, "orders");
    let leader = cluster.wait_for_leaders(0, None)[0];
    // Two nodes that are not the stream's leader: one to write through, one to read from.
    let others: Vec<usize> = (0..3).filter(|i| *i as u64 + 1 != leader).collect();
    let (writer, reader) = (others[0], others[1]);
    let mut c = connect(&cluster.resp_addr(writer)).await;

    for i in 1..=ENTRIES {
        let id = format!("{i}-0");
        patiently(&mut c, &["XADD", &key, &id, "n", &i.to_string()]).await;
    }
    patiently(&mut c, &["XGROUP", "CREATE", &key, "g", "0"]).await;
    let first = patiently(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c1",
            "COUNT",
            "4",
            "STREAMS",
            &key,
            ">",
        ],
    )
    .await;
    let mut seen = delivered(&first);
    assert_eq!(seen, ["1-0", "2-0", "3-0", "4-0"]);
    patiently(&mut c, &["XACK", &key, "g", "1-0"]).await;
    let before = pending(&patiently(&mut c, &["XPENDING", &key, "g", "-", "+", "100"]).await);

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill_9((leader - 1) as usize);
        cluster.wait_for_leaders(reader, Some(leader));
        cluster
    })
    .await
    .unwrap();

    let mut r = connect(&cluster.resp_addr(reader)).await;
    let after = pending(&patiently(&mut r, &["XPENDING", &key, "g", "-", "+", "100"]).await);
    assert_eq!(after, before, "the pending list after the leader kill");
    assert_eq!(
        after
            .iter()
            .map(|(id, _, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["2-0", "3-0", "4-0"]
    );

    // `>` goes on after 4-0. A read whose answer was lost in the failover may have
    // delivered entries to c2's pending list without showing them: those count as
    // delivered once, never twice.
    let since = Instant::now();
    loop {
        let args = [
            "XREADGROUP",
            "GROUP",
            "g",
            "c2",
            "COUNT",
            "3",
            "STREAMS",
            &key,
            ">",
        ];
        match run(&mut r, &args).await {
            Ok(v) => {
                let got = delivered(&v);
                if got.is_empty() {
                    break;
                }
                seen.extend(got);
            }
            Err(e) if since.elapsed() < RECOVERY_MAX => {
                eprintln!("{args:?}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{args:?}: {e}"),
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "an entry delivered twice: {seen:?}"
    );
    let pending_c2 =
        pending(&patiently(&mut r, &["XPENDING", &key, "g", "-", "+", "100", "c2"]).await);
    let mut all: BTreeSet<String> = seen.into_iter().collect();
    all.extend(pending_c2.into_iter().map(|(id, _, _)| id));
    let expected: BTreeSet<String> = (1..=ENTRIES).map(|i| format!("{i}-0")).collect();
    assert_eq!(all, expected, "every entry delivered once");
    let info = patiently(&mut r, &["XINFO", "GROUPS", &key]).await;
    let Value::Array(groups) = info else {
        panic!("{info:?}")
    };
    let Value::Array(fields) = &groups[0] else {
        panic!("{groups:?}")
    };
    assert_eq!(
        text(&fields[7]),
        format!("{ENTRIES}-0"),
        "last-delivered-id"
    );
}
