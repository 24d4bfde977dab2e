//! Transactions across shards on a cluster of `firn` processes: a coordinator killed (its
//! process aborted, as kill -9) between two steps of a commit leaves nothing half-visible —
//! the survivors resolve what it left, as its anchor decided; and a bank of accounts on
//! every shard keeps its sum through concurrent transfers and leader kills, read whole by
//! snapshots and by transactions; and writes sent again with their idempotency keys
//! through leader kills apply once.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, read_latest};
use firn_client::Client;

/// One key in each of the three shards.
fn keys_on_every_shard(tag: &str) -> Vec<String> {
    (0..3).map(|s| key_in_shard(s, tag)).collect()
}

/// SET of every key to `value` in one MULTI/EXEC through the node at `addr`.
async fn exec_set(addr: &str, keys: &[String], value: &str) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    let mut c = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut pipe = redis::pipe();
    pipe.atomic();
    for k in keys {
        pipe.set(k, value).ignore();
    }
    pipe.query_async::<redis::Value>(&mut c).await
}

/// The newest value and stamp of each key, read through node `via` (a read of a key a
/// transaction holds waits for it to be resolved).
async fn values(cluster: &Cluster, via: usize, keys: &[String]) -> Vec<(Option<String>, u64)> {
    let client = Client::connect(&cluster.resp_addr(via)).await.unwrap();
    let mut out = Vec::new();
    for k in keys {
        let v = read_latest(&client, k.as_bytes()).await;
        out.push((
            v.as_ref()
                .and_then(|v| v.value.clone())
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            v.map_or(0, |v| v.commit_ts.wall_us),
        ));
    }
    out
}

/// Restarts node index 0 with `FAIL_POINTS` set, sends a transaction over every shard
/// through it — it aborts itself at the point — and waits for its process to end.
async fn coordinator_dies_at(cluster: &mut Cluster, point: &str, keys: &[String], value: &str) {
    cluster.kill_9(0);
    cluster.restart_with_env(0, &[], &[("FAIL_POINTS", &format!("{point}=return"))]);
    cluster.wait_for_leaders(0, None);
    let sent = exec_set(&cluster.resp_addr(0), keys, value).await;
    eprintln!("the transaction through the coordinator dying at {point}: {sent:?}");
    assert!(
        sent.is_err(),
        "the coordinator answered though it died at {point}"
    );
    let node = cluster.nodes[0].as_mut().unwrap();
    let ended = common::wait_until(Duration::from_secs(10), || {
        node.child.try_wait().unwrap().is_some()
    });
    assert!(ended, "the coordinator did not stop at {point}");
    cluster.nodes[0] = None;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_commit_leaves_its_transaction_whole_or_not_at_all() {
    let mut cluster = Cluster::ready(3, &[]).await;
    let keys = keys_on_every_shard("acct");
    exec_set(&cluster.resp_addr(1), &keys, "0")
        .await
        .expect("a first transaction");

    // Dead after every part is prepared, before the anchor decides: the survivors find
    // the parts past their deadline, the anchor aborts, nothing is applied.
    coordinator_dies_at(&mut cluster, "txn-after-prepare", &keys, "1").await;
    let started = Instant::now();
    let after = values(&cluster, 1, &keys).await;
    assert!(
        after.iter().all(|(v, _)| v.as_deref() == Some("0")),
        "a transaction whose coordinator died before the decision left {after:?}"
    );
    eprintln!(
        "resolved (aborted) {:?} after the coordinator died",
        started.elapsed()
    );

    // Dead after the anchor decided, before the others are resolved: the survivors
    // commit every part, at the one stamp.
    coordinator_dies_at(&mut cluster, "txn-after-decide", &keys, "2").await;
    let after = values(&cluster, 2, &keys).await;
    assert!(
        after.iter().all(|(v, _)| v.as_deref() == Some("2")),
        "a transaction decided before its coordinator died left {after:?}"
    );
    let stamps: HashSet<u64> = after.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        stamps.len(),
        1,
        "one transaction, several stamps: {after:?}"
    );

    // The dead node, back, holds the same.
    cluster.restart(0);
    cluster.wait_for_leaders(0, None);
    assert_eq!(values(&cluster, 0, &keys).await, after);
}

type Shared = std::sync::Arc<std::sync::Mutex<Cluster>>;

/// A cluster of three nodes, shared with the task that kills its leaders, and each node's
/// RESP address.
async fn three_nodes() -> (Shared, Vec<String>) {
    let cluster = Cluster::ready(3, &[]).await;
    let addrs = (0..3).map(|i| cluster.resp_addr(i)).collect();
    (std::sync::Arc::new(std::sync::Mutex::new(cluster)), addrs)
}

/// Kills the leader of each shard in turn (2 s apart, each down for 1 s).
async fn kill_each_leader(cluster: &Shared) {
    common::kill_leaders(
        cluster.clone(),
        vec![0, 1, 2],
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .await;
}

/// Accounts on every shard (two a shard), each starting at 100.
const ACCOUNTS: usize = 6;
const OPENING: i64 = 100;

fn accounts() -> Vec<String> {
    (0..3)
        .flat_map(|s| common::keys_in_shard(s, "bank/", 2))
        .collect()
}

/// A connection to the first node of `from` that answers, starting at `next`.
async fn connect_any(addrs: &[String], next: &mut usize) -> redis::aio::MultiplexedConnection {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(20)));
    loop {
        let addr = &addrs[*next % addrs.len()];
        *next += 1;
        if let Ok(client) = redis::Client::open(format!("redis://{addr}/"))
            && let Ok(c) = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_across_shards_keeps_its_sum_through_transfers_and_leader_kills() {
    let seed = common::seed("bank");
    let (cluster, addrs) = three_nodes().await;
    let accounts = accounts();
    let total = OPENING * ACCOUNTS as i64;
    exec_set(&addrs[0], &accounts, &OPENING.to_string())
        .await
        .expect("the accounts open");
    let until = Instant::now() + Duration::from_secs(14);
    let transfers = (0..3).map(|p| {
        let (addrs, accounts) = (addrs.clone(), accounts.clone());
        tokio::spawn(async move {
            let mut rng = common::Rng::for_process(seed, p);
            let mut next = p;
            let mut c = connect_any(&addrs, &mut next).await;
            let mut committed = 0;
            while Instant::now() < until {
                let from = &accounts[rng.next_u64() as usize % ACCOUNTS];
                let to = &accounts[rng.next_u64() as usize % ACCOUNTS];
                let amount = 1 + (rng.next_u64() % 10) as i64;
                let sent: redis::RedisResult<redis::Value> = redis::pipe()
                    .atomic()
                    .incr(from, -amount)
                    .incr(to, amount)
                    .query_async(&mut c)
                    .await;
                let both_counted = |a: &[redis::Value]| {
                    a.len() == 2 && a.iter().all(|v| matches!(v, redis::Value::Int(_)))
                };
                match sent {
                    Ok(redis::Value::Array(a)) if both_counted(&a) => committed += 1,
                    Ok(other) => panic!("a transfer answered {other:?}"),
                    // A node killed, a leader moving, keys held: a transfer applied whole
                    // or not at all either way.
                    Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                        c = connect_any(&addrs, &mut next).await
                    }
                    // Refused (TRYAGAIN: keys held, a leader moving) or UNCERTAIN: whole or
                    // not at all, which the sums check.
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            committed
        })
    });
    let transfers: Vec<_> = transfers.collect();
    // Readers: a snapshot of every account at one time, and every account read in one
    // transaction; each sum must be the opening total.
    let readers = (0..2).map(|p| {
        let (addrs, accounts) = (addrs.clone(), accounts.clone());
        tokio::spawn(async move {
            let mut next = p + 1;
            let mut c = connect_any(&addrs, &mut next).await;
            let mut sums = Vec::new();
            while Instant::now() < until {
                let read: redis::RedisResult<Vec<i64>> = if p == 0 {
                    snapshot_of(&addrs[next % addrs.len()], &accounts).await
                } else {
                    redis::pipe()
                        .atomic()
                        .mget(&accounts)
                        .query_async::<(Vec<i64>,)>(&mut c)
                        .await
                        .map(|(v,)| v)
                };
                match read {
                    // Every account absent: a snapshot at a time before the bank opened.
                    Ok(values) if values.iter().all(|v| *v == -1_000_000) => {}
                    Ok(values) => sums.push((values.iter().sum::<i64>(), values)),
                    Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                        c = connect_any(&addrs, &mut next).await
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            sums
        })
    });
    let readers: Vec<_> = readers.collect();
    kill_each_leader(&cluster).await;
    let mut committed = 0;
    for t in transfers {
        committed += t.await.unwrap();
    }
    let mut checked = [0usize; 2];
    for (p, r) in readers.into_iter().enumerate() {
        for (sum, values) in r.await.unwrap() {
            assert_eq!(sum, total, "a read saw a transfer in part: {values:?}");
            checked[p] += 1;
        }
    }
    let finally = {
        let client = Client::connect(&addrs[0]).await.unwrap();
        let mut sum = 0;
        for k in &accounts {
            let v = read_latest(&client, k.as_bytes()).await.unwrap();
            sum += String::from_utf8_lossy(&v.value.unwrap())
                .parse::<i64>()
                .unwrap();
        }
        sum
    };
    eprintln!(
        "bank: {committed} transfers committed, {} snapshot sums and {} transactional sums checked",
        checked[0], checked[1]
    );
    assert_eq!(finally, total, "the bank's sum changed");
    // Enough transfers to matter; how many get through the kills in 14 s depends on the
    // machine's load (the claim is the sums, not the rate).
    assert!(committed >= 10, "only {committed} transfers committed");
    assert!(
        checked.iter().all(|n| *n > 0),
        "too few reads checked: {checked:?}"
    );
}

/// Every account read at one time across the shards (`FIRN.SNAPSHOT`) through `addr`.
async fn snapshot_of(addr: &str, accounts: &[String]) -> redis::RedisResult<Vec<i64>> {
    let io = |e: String| redis::RedisError::from((redis::ErrorKind::Io, "snapshot", e));
    let client = Client::connect(addr).await.map_err(|e| io(e.to_string()))?;
    let keys = accounts
        .iter()
        .map(|k| firn_model::Key::new(bytes::Bytes::from(k.clone())).unwrap())
        .collect();
    let (_, found) = client
        .snapshot(&firn_model::SnapshotOf::Keys(keys), None)
        .await
        .map_err(|e| io(e.to_string()))?;
    Ok(found
        .into_iter()
        .map(|(_, v)| {
            let value = v.and_then(|v| v.value).unwrap_or_default();
            // An account absent: read at a time before the bank opened (all absent then),
            // or a cut that is not one (some absent): a sum far from the total says so.
            String::from_utf8_lossy(&value)
                .parse()
                .unwrap_or(-1_000_000)
        })
        .collect())
}

/// Registers on every shard (two a shard) that random transactions read and write.
const REGISTERS: usize = 6;
/// Committed transactions the registers' check wants before it stops.
const ENOUGH_COMMITTED: usize = 40;

/// One transaction of reads and writes of the registers, run through `c`; what the client
/// saw of it.
async fn run_txn(
    c: &mut redis::aio::MultiplexedConnection,
    keys: &[String],
    mops: Vec<firn_check::txn::Mop>,
    started: Instant,
) -> firn_check::txn::Txn {
    use firn_check::txn::{Mop, Status};
    let invoked_at = started.elapsed().as_micros() as u64;
    let mut pipe = redis::pipe();
    pipe.atomic();
    for m in &mops {
        match m {
            Mop::Read { key, .. } => pipe.get(key),
            Mop::Write { key, value } => pipe.set(key, value),
        };
    }
    let _ = keys;
    let answer: redis::RedisResult<Vec<redis::Value>> = pipe.query_async(c).await;
    let completed_at = started.elapsed().as_micros() as u64;
    let (status, mops) = match answer {
        Ok(values) => {
            let mops = mops
                .into_iter()
                .zip(values)
                .map(|(m, v)| match (m, v) {
                    (Mop::Read { key, .. }, redis::Value::Nil) => Mop::Read { key, value: None },
                    (Mop::Read { key, .. }, redis::Value::BulkString(b)) => Mop::Read {
                        key,
                        value: Some(String::from_utf8_lossy(&b).parse().unwrap()),
                    },
                    (m @ Mop::Write { .. }, redis::Value::Okay) => m,
                    (m, v) => panic!("{m:?} answered {v:?}"),
                })
                .collect();
            (Status::Committed, mops)
        }
        // Refused, nothing applied.
        Err(e) if matches!(e.code(), Some("TRYAGAIN" | "EXECABORT")) => (Status::Aborted, mops),
        // A connection lost, UNCERTAIN: applied or not, reads unknown.
        Err(_) => (
            Status::Unknown,
            mops.into_iter()
                .filter(|m| matches!(m, Mop::Write { .. }))
                .collect(),
        ),
    };
    firn_check::txn::Txn {
        client: 0,
        invoked_at,
        completed_at,
        status,
        mops,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_across_shards_are_strictly_serializable_through_leader_kills() {
    use firn_check::txn::Mop;
    let seed = common::seed("registers");
    let (cluster, addrs) = three_nodes().await;
    let keys: Vec<String> = (0..3)
        .flat_map(|s| common::keys_in_shard(s, "reg/", REGISTERS / 3))
        .collect();
    let started = Instant::now();
    // The leader kills take the first seconds; after them the clients go on until enough
    // transactions committed to make the check mean something (a loaded machine is slower),
    // within a hard bound.
    let (kills_over, bound) = (Duration::from_secs(14), Duration::from_secs(60));
    let committed = Arc::new(AtomicUsize::new(0));
    let clients = (0..4).map(|p| {
        let (addrs, keys, committed) = (addrs.clone(), keys.clone(), committed.clone());
        let enough = committed.clone();
        let go_on = move || {
            let elapsed = started.elapsed();
            elapsed < kills_over
                || (elapsed < bound && enough.load(Ordering::Relaxed) < ENOUGH_COMMITTED)
        };
        tokio::spawn(async move {
            let mut rng = common::Rng::for_process(seed, p);
            let mut next = p;
            let mut c = connect_any(&addrs, &mut next).await;
            let mut history = Vec::new();
            let mut seq = 0u64;
            while go_on() {
                let mops = (0..2 + rng.next_u64() % 3)
                    .map(|_| {
                        let key = keys[rng.next_u64() as usize % REGISTERS].clone();
                        if rng.next_u64().is_multiple_of(2) {
                            Mop::Read { key, value: None }
                        } else {
                            seq += 1;
                            Mop::Write {
                                key,
                                value: p as u64 * 1_000_000 + seq,
                            }
                        }
                    })
                    .collect();
                let mut txn = run_txn(&mut c, &keys, mops, started).await;
                txn.client = p;
                if txn.status == firn_check::txn::Status::Committed {
                    committed.fetch_add(1, Ordering::Relaxed);
                }
                if txn.status == firn_check::txn::Status::Unknown {
                    c = connect_any(&addrs, &mut next).await;
                }
                history.push(txn);
            }
            history
        })
    });
    let clients: Vec<_> = clients.collect();
    kill_each_leader(&cluster).await;
    let mut history = Vec::new();
    for c in clients {
        history.extend(c.await.unwrap());
    }
    // Each register's versions, oldest first, as the store keeps them.
    let client = Client::connect(&addrs[0]).await.unwrap();
    let mut versions = firn_check::txn::VersionOrder::new();
    for k in &keys {
        let all = common::settled(|| client.history(k.as_bytes(), 1, None, 10_000, None))
            .await
            .unwrap();
        versions.insert(
            k.clone(),
            all.into_iter()
                .filter_map(|v| v.value)
                .map(|b| String::from_utf8_lossy(&b).parse().unwrap())
                .collect(),
        );
    }
    let count = |s| history.iter().filter(|t| t.status == s).count();
    let (ok, refused, unknown) = (
        count(firn_check::txn::Status::Committed),
        count(firn_check::txn::Status::Aborted),
        count(firn_check::txn::Status::Unknown),
    );
    eprintln!("registers: {ok} committed, {refused} refused, {unknown} unknown");
    match firn_check::txn::check(&history, &versions) {
        Ok(summary) => eprintln!("checked: {summary:?}"),
        Err(anomalies) => panic!(
            "{} anomalies, the first: {}",
            anomalies.len(),
            anomalies
                .iter()
                .take(5)
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
    assert!(
        ok >= ENOUGH_COMMITTED,
        "only {ok} transactions committed in {:?}",
        started.elapsed()
    );
}

/// The Rust client's `txn`: a lock taken with a fencing counter, then refused while held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_runs_compare_then_write() {
    use firn_client::txn::{Step, StepReply, Txn};
    use firn_model::{CompareOp, CompareTarget};
    let (_cluster, addrs) = three_nodes().await;
    let client = Client::connect(&addrs[1]).await.unwrap();
    let (lock, fence) = (key_in_shard(0, "lock"), key_in_shard(2, "fence"));
    let take = Txn::new()
        .compare(lock.as_bytes(), CompareTarget::Exists(false), CompareOp::Eq)
        .then(Step::Put(lock.clone().into(), b"me".to_vec()))
        .then(Step::IncrBy(fence.clone().into(), 1))
        .otherwise(Step::Get(lock.clone().into()));
    let first = common::settled(|| client.txn(&take)).await.unwrap();
    assert!(first.succeeded);
    assert_eq!(first.replies, vec![StepReply::Ok, StepReply::Int(1)]);
    let second = client.txn(&take).await.unwrap();
    assert!(!second.succeeded);
    assert_eq!(
        second.replies,
        vec![StepReply::Value(Some(bytes::Bytes::from("me")))]
    );
    // A record appended to a log, with a write, in one transaction.
    let audit = Txn::new()
        .then(Step::Put(lock.clone().into(), b"audited".to_vec()))
        .then(Step::Append {
            log: b"audit".to_vec(),
            tags: vec![fence.clone().into()],
            payload: b"lock audited".to_vec(),
        });
    let done = client.txn(&audit).await.unwrap();
    let [StepReply::Ok, StepReply::Seqs(seqs)] = &done.replies[..] else {
        panic!("{:?}", done.replies);
    };
    let range = redis::cmd("FIRN.LOG")
        .arg("RANGE")
        .arg("audit")
        .arg(&fence)
        .arg("-")
        .arg("+")
        .clone();
    let redis::Value::Array(records) = client.raw(&range).await.unwrap() else {
        panic!("no records");
    };
    let held: Vec<String> = records
        .iter()
        .map(|r| match r {
            redis::Value::Array(parts) => match &parts[0] {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(held, *seqs);
}

/// Exactly once under leader kills: clients send every write (an increment of a counter on
/// some shard, an XADD, a transaction across shards) with an idempotency key, each one to
/// three times whatever the answer, and again while it fails; at the end every counter and
/// the stream count each write once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_sent_again_with_their_keys_apply_once_through_leader_kills() {
    let seed = common::seed("idempotency");
    let (cluster, addrs) = three_nodes().await;
    let counters: Vec<String> = (0..3).map(|s| key_in_shard(s, "count/")).collect();
    let until = Instant::now() + Duration::from_secs(12);
    let writers = (0..3).map(|p| {
        let (addrs, counters) = (addrs.clone(), counters.clone());
        tokio::spawn(async move {
            let mut rng = common::Rng::for_process(seed, p);
            let mut next = p;
            let mut c = connect_any(&addrs, &mut next).await;
            let mut done = [0i64; 4];
            let mut id = 0u64;
            while Instant::now() < until {
                id += 1;
                let what = (rng.next_u64() % 5) as usize;
                let mut cmd = redis::cmd("IDMP");
                cmd.arg(format!("writer-{p}")).arg(id);
                match what {
                    0..=2 => cmd.arg("INCR").arg(&counters[what]),
                    3 => cmd.arg("XADD").arg("events").arg("*").arg("w").arg(p),
                    // Counters 0 and 2 together, across shards.
                    _ => cmd
                        .arg("FIRN.TXN")
                        .arg("THEN")
                        .arg(2)
                        .arg("INCR")
                        .arg(&counters[0])
                        .arg("THEN")
                        .arg(2)
                        .arg("INCR")
                        .arg(&counters[2]),
                };
                let sends = 1 + rng.next_u64() % 3;
                let mut sent = 0;
                // Sent `sends` times whatever the answer, then until one is an answer.
                loop {
                    let answer: redis::RedisResult<redis::Value> = cmd.query_async(&mut c).await;
                    sent += 1;
                    match answer {
                        Ok(_) if sent >= sends => break,
                        Ok(_) => {}
                        Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                            c = connect_any(&addrs, &mut next).await
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                match what {
                    4 => {
                        done[0] += 1;
                        done[2] += 1;
                    }
                    _ => done[what] += 1,
                }
            }
            done
        })
    });
    let writers: Vec<_> = writers.collect();
    kill_each_leader(&cluster).await;
    let mut expected = [0i64; 4];
    for w in writers {
        let done = w.await.unwrap();
        for i in 0..4 {
            expected[i] += done[i];
        }
    }
    let client = Client::connect(&addrs[0]).await.unwrap();
    let mut counted = [0i64; 4];
    for (i, k) in counters.iter().enumerate() {
        counted[i] = read_latest(&client, k.as_bytes())
            .await
            .and_then(|v| v.value)
            .map_or(0, |v| String::from_utf8_lossy(&v).parse().unwrap());
    }
    let c = connect_any(&addrs, &mut 0).await;
    counted[3] = common::settled(|| async {
        redis::cmd("XLEN")
            .arg("events")
            .query_async::<i64>(&mut c.clone())
            .await
            .map_err(firn_client::ClientError::from)
    })
    .await
    .unwrap();
    eprintln!("writes: {expected:?} sent, {counted:?} counted");
    assert_eq!(counted, expected, "a write applied other than once");
    assert!(
        expected.iter().sum::<i64>() > 20,
        "too few writes: {expected:?}"
    );
}
