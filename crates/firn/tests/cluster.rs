//! A three-node cluster of real processes: writes at any node, linearizable reads at every
//! node, failover after a leader is killed with SIGKILL, and catch-up of the restarted node.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, settled};
use firn_client::{Client, PutOptions, WriteAck};
use firn_model::{ReadAt, ReadConsistency};

/// A put through `client`, tried again while the cluster answers that it cannot take it now.
async fn put(client: &Client, key: &[u8], value: &[u8]) -> WriteAck {
    settled(|| client.put(key, value, PutOptions::default()))
        .await
        .unwrap()
}

async fn value(client: &Client, key: &str, consistency: ReadConsistency) -> Option<String> {
    settled(|| client.get(key.as_bytes(), ReadAt::Latest, consistency))
        .await
        .unwrap()
        .and_then(|i| i.value)
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_at_any_node_are_read_linearizably_at_every_node() {
    let cluster = Cluster::ready(3, &[]).await;
    let clients: Vec<Client> = futures_connect(&cluster).await;
    for (i, c) in clients.iter().enumerate() {
        for j in 0..20 {
            put(
                c,
                format!("n{i}-{j}").as_bytes(),
                format!("v{i}-{j}").as_bytes(),
            )
            .await;
        }
    }
    for c in &clients {
        for i in 0..3 {
            for j in 0..20 {
                // Every node, leader or follower of the key's shard, sees every acknowledged write.
                assert_eq!(
                    value(c, &format!("n{i}-{j}"), ReadConsistency::Linearizable).await,
                    Some(format!("v{i}-{j}"))
                );
            }
        }
    }
    // Lease reads too: every node sees a write acknowledged just before, at every node.
    for (i, c) in clients.iter().enumerate() {
        put(
            &clients[(i + 1) % 3],
            b"lease-key",
            format!("l{i}").as_bytes(),
        )
        .await;
        assert_eq!(
            value(c, "lease-key", ReadConsistency::Lease).await,
            Some(format!("l{i}"))
        );
    }
    let bad = clients[0]
        .raw(
            redis::cmd("FIRN.GET")
                .arg("lease-key")
                .arg("CONSISTENCY")
                .arg("eventual"),
        )
        .await;
    assert!(
        bad.is_err_and(|e| e.to_string().contains("linearizable, lease or local")),
        "an unknown consistency is refused"
    );
    // MSET across shards: each shard's part is atomic on its own.
    let mset = clients[0]
        .raw(
            redis::cmd("MSET")
                .arg("a{x}")
                .arg(1)
                .arg("b")
                .arg(2)
                .arg("c")
                .arg(3),
        )
        .await
        .unwrap();
    assert_eq!(mset, redis::Value::Okay);
    let got: Vec<Option<String>> = redis::from_redis_value(
        clients[2]
            .raw(redis::cmd("MGET").arg("a{x}").arg("b").arg("c"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        got,
        vec![Some("1".into()), Some("2".into()), Some("3".into())]
    );
    for c in &clients {
        let n: i64 = redis::from_redis_value(c.raw(&redis::cmd("DBSIZE")).await.unwrap()).unwrap();
        assert_eq!(n, 64);
    }
    drop(cluster);
}

async fn futures_connect(cluster: &Cluster) -> Vec<Client> {
    let mut out = Vec::new();
    for i in 0..3 {
        out.push(Client::connect(&cluster.resp_addr(i)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_catches_up_after_restart() {
    // Snapshots every 100 entries, the log purged up to each: while the node is down the
    // others purge the log it needs, so it catches up by installing a snapshot.
    let mut cluster = Cluster::ready(
        3,
        &["--snapshot-every", "100", "--snapshot-catchup-entries", "0"],
    )
    .await;
    let leader = cluster.wait_for_leaders(0, None)[0];
    let victim = (leader - 1) as usize;
    let survivor = (victim + 1) % 3;
    let key = key_in_shard(0, "fail");
    let client = Client::connect(&cluster.resp_addr(survivor)).await.unwrap();
    put(&client, key.as_bytes(), b"before").await;

    let http: Vec<String> = (0..3).map(|i| cluster.http_addr(i)).collect();
    let shard0 = |i: usize| -> serde_json::Value {
        let v: serde_json::Value = ureq::get(&format!("http://{}/v1/cluster", http[i]))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        v["shards"][0].clone()
    };
    let victim_applied = shard0(victim)["last_applied_index"].as_u64().unwrap_or(0);
    cluster.kill_9(victim);
    let killed_at = Instant::now();
    // The survivor the client writes at waits for the shard's new leader: the client sees a
    // delay, not an error (it heard TRYAGAIN for about a second before).
    let written = client
        .put(key.as_bytes(), b"after", PutOptions::default())
        .await;
    let failover = killed_at.elapsed();
    assert!(
        written.is_ok(),
        "the first write after the leader was killed answered {written:?} after {failover:?}"
    );
    eprintln!("failover: the first write to the killed leader's shard took {failover:?}");
    let retries = cluster.counter(survivor, "firn_write_retries_total");
    assert!(retries > 0.0, "the survivor counted no write tried again");
    // The survivors count their calls to the dead node that failed.
    let to_victim = |metric: &str| format!("{metric}{{peer=\"{}\"", victim + 1);
    let failed = cluster.counter(survivor, &to_victim("firn_peer_calls_failed_total"));
    assert!(failed > 0.0, "no failed call to the killed node counted");
    assert_eq!(
        value(&client, &key, ReadConsistency::Linearizable)
            .await
            .as_deref(),
        Some("after")
    );

    for i in 0..300 {
        put(&client, format!("{key}-{i}").as_bytes(), b"x").await;
    }
    // The survivors purged the log past where the victim stopped: it must take a snapshot.
    let deadline = Instant::now() + Duration::from_secs(30);
    while shard0(survivor)["purged_index"].as_u64().unwrap_or(0) <= victim_applied {
        assert!(
            Instant::now() < deadline,
            "the survivors did not purge their logs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let restart_at = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.restart(victim);
        cluster
    })
    .await
    .unwrap();
    let back = Client::connect(&cluster.resp_addr(victim)).await.unwrap();
    let last = format!("{key}-299");
    let deadline = Instant::now() + Duration::from_secs(30);
    while value(&back, &last, ReadConsistency::Local).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the restarted node did not catch up within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "catch-up: restarted node had the 300 writes it missed after {:?}",
        restart_at.elapsed()
    );
    // One connection to it before the kill, and another since it came back.
    let connects = cluster.counter(survivor, &to_victim("firn_peer_connects_total"));
    assert!(
        connects >= 2.0,
        "{connects} connections to the restarted node counted"
    );
    assert_eq!(
        value(&back, &key, ReadConsistency::Linearizable)
            .await
            .as_deref(),
        Some("after")
    );
    // The leaderships it lost come back in time: each of the three nodes leads one of the
    // three shards again (leaders are spread after elections too, not only after moves).
    let spread_at = Instant::now();
    let (spread, leaders) = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        let spread = common::wait_until(Duration::from_secs(60), || {
            seen = cluster.leaders(survivor);
            let mut led: Vec<u64> = seen.iter().flatten().copied().collect();
            led.sort_unstable();
            led == [1, 2, 3]
        });
        (spread, seen)
    })
    .await
    .unwrap();
    assert!(
        spread,
        "leaders stayed bunched after the restart: {leaders:?}"
    );
    eprintln!(
        "leaders spread again {:?} after the catch-up",
        spread_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_aware_clients_route_straight_to_shard_leaders() {
    let cluster = tokio::task::spawn_blocking(|| {
        let c = Cluster::start(3, &[]);
        for i in 0..3 {
            c.wait_for_leaders(i, None);
        }
        c
    })
    .await
    .unwrap();
    // CLUSTER SLOTS: three ranges covering every slot, the shard leader listed first.
    let plain = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    let slots: Vec<redis::Value> =
        redis::from_redis_value(plain.raw(redis::cmd("CLUSTER").arg("SLOTS")).await.unwrap())
            .unwrap();
    assert_eq!(slots.len(), 3);
    let leaders = cluster.wait_for_leaders(0, None);
    let mut covered = 0;
    for (shard, entry) in slots.iter().enumerate() {
        let redis::Value::Array(parts) = entry else {
            panic!("{entry:?}")
        };
        let (start, end): (i64, i64) = (
            redis::from_redis_value(parts[0].clone()).unwrap(),
            redis::from_redis_value(parts[1].clone()).unwrap(),
        );
        covered += end - start + 1;
        assert_eq!(parts.len(), 5, "start, end and three nodes");
        let master: (String, i64, String) = redis::from_redis_value(parts[2].clone()).unwrap();
        assert_eq!(
            format!("{}:{}", master.0, master.1),
            cluster.resp_addr((leaders[shard] - 1) as usize)
        );
    }
    assert_eq!(covered, 16384);

    let before: f64 = (0..3)
        .map(|i| cluster.counter(i, "firn_forwarded_total"))
        .sum();
    let client =
        redis::cluster::ClusterClient::new(vec![format!("redis://{}/", cluster.resp_addr(0))])
            .unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    for i in 0..60 {
        let _: () = redis::cmd("SET")
            .arg(format!("user:{i}"))
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    for i in 0..60 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("user:{i}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(v, i);
    }
    let after: f64 = (0..3)
        .map(|i| cluster.counter(i, "firn_forwarded_total"))
        .sum();
    assert_eq!(
        after, before,
        "a cluster-aware client's writes went to a non-leader and were forwarded"
    );
    // A plain client reaches the same data through any node.
    let v: Option<String> =
        redis::from_redis_value(plain.raw(redis::cmd("GET").arg("user:7")).await.unwrap()).unwrap();
    assert_eq!(v.as_deref(), Some("7"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_follows_shards_held_on_other_nodes() {
    // One replica per shard: each node holds one shard, so a prefix watch at node 1 follows
    // two shards through other nodes.
    let cluster = Cluster::ready(3, &["--replication", "1"]).await;
    let keys: Vec<String> = (0..3).map(|s| key_in_shard(s, "w/")).collect();
    let client = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    put(&client, keys[2].as_bytes(), b"before").await;
    let at_one = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let mut watcher = tokio::task::spawn_blocking(move || {
        let w = at_one
            .watch(b"w/", true, firn_model::WatchFrom::Version(1))
            .unwrap();
        w.set_timeout(Some(Duration::from_secs(10))).unwrap();
        w
    })
    .await
    .unwrap();
    for round in 0..3 {
        for k in &keys {
            put(&client, k.as_bytes(), format!("r{round}").as_bytes()).await;
        }
    }
    let events = tokio::task::spawn_blocking(move || {
        (0..10)
            .map(|_| watcher.next_event().expect("a watch event"))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Every version of every key, each once, in version order per key.
    for k in &keys {
        let versions: Vec<u64> = events
            .iter()
            .filter(|e| &e.key[..] == k.as_bytes())
            .map(|e| e.info.version)
            .collect();
        let expected: Vec<u64> = if *k == keys[2] {
            vec![1, 2, 3, 4]
        } else {
            vec![1, 2, 3]
        };
        assert_eq!(versions, expected, "versions of {k}");
    }
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_read_says_how_far_behind_it_may_be() {
    let cluster = Cluster::ready(3, &[]).await;
    let key = key_in_shard(0, "stale");
    let writer = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let ack = put(&writer, key.as_bytes(), b"v").await;
    let wall_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64
    };
    for i in 0..3 {
        // Wait until this replica has the write, then ask locally.
        let client = Client::connect(&cluster.resp_addr(i)).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while value(&client, &key, ReadConsistency::Local).await.is_none() {
            assert!(
                Instant::now() < deadline,
                "node {} never applied the write",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // RESP: the FIRN.GET map carries the bound.
        let reply = client
            .raw(
                redis::cmd("FIRN.GET")
                    .arg(&key)
                    .arg("CONSISTENCY")
                    .arg("local"),
            )
            .await
            .unwrap();
        let fields: Vec<redis::Value> = match reply {
            redis::Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            redis::Value::Array(a) => a,
            other => panic!("unexpected reply {other:?}"),
        };
        let field = |name: &str| -> redis::Value {
            let at = fields
                .iter()
                .position(|f| redis::from_redis_value_ref::<String>(f).is_ok_and(|s| s == name))
                .unwrap_or_else(|| panic!("no {name} in {fields:?}"));
            fields[at + 1].clone()
        };
        let through: firn_model::CommitTs =
            redis::from_redis_value::<String>(field("applied_through"))
                .unwrap()
                .parse()
                .unwrap();
        let at_most: u64 = redis::from_redis_value(field("stale_at_most_us")).unwrap();
        assert!(through >= ack.commit_ts, "node {} applied the write", i + 1);
        assert!(
            at_most <= wall_us() - ack.commit_ts.wall_us,
            "the bound counts from what the replica applied"
        );
        // HTTP: the same as headers.
        let resp = ureq::get(&format!(
            "http://{}/v1/kv/{key}?consistency=local",
            cluster.http_addr(i)
        ))
        .call()
        .unwrap();
        let through: firn_model::CommitTs = resp
            .header("firn-applied-through")
            .expect("header")
            .parse()
            .unwrap();
        assert!(through >= ack.commit_ts);
        assert!(resp.header("firn-stale-at-most-us").is_some());
        // A linearizable read does not carry it.
        let lin = ureq::get(&format!("http://{}/v1/kv/{key}", cluster.http_addr(i)))
            .call()
            .unwrap();
        assert!(lin.header("firn-applied-through").is_none());
    }
    drop(cluster);
}

/// A read at a time T is one cut of the store: the same at every replica and on every retry,
/// while writes go on, and each key's value is the newest acknowledged one at or before T;
/// a cut at a later time contains it (monotone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_at_a_time_are_the_same_at_every_replica_and_every_time() {
    use firn_model::CommitTs;
    use std::collections::BTreeMap;

    let cluster = Cluster::ready(3, &[]).await;
    let clients: Vec<Client> = futures_connect(&cluster).await;
    let keys: Vec<String> = (0..24).map(|i| format!("cut/{i}")).collect();
    // Every acknowledged write, in the order made: (key, commit_ts, value).
    let mut written: Vec<(String, CommitTs, String)> = Vec::new();
    async fn write_round(
        clients: &[Client],
        keys: &[String],
        round: usize,
        written: &mut Vec<(String, CommitTs, String)>,
    ) {
        for (i, k) in keys.iter().enumerate() {
            let v = format!("{k}@{round}");
            let ack = put(&clients[(i + round) % 3], k.as_bytes(), v.as_bytes()).await;
            written.push((k.clone(), ack.commit_ts, v));
        }
    }
    for round in 0..3 {
        write_round(&clients, &keys, round, &mut written).await;
    }
    // A time in the middle of the second round: some keys have their second value, some not.
    let t = written[keys.len() + keys.len() / 2].1;
    let expected_at = |written: &[(String, CommitTs, String)], t: CommitTs| {
        let mut newest: BTreeMap<String, (CommitTs, String)> = BTreeMap::new();
        for (k, ts, v) in written {
            if *ts <= t && newest.get(k).is_none_or(|(seen, _)| ts > seen) {
                newest.insert(k.clone(), (*ts, v.clone()));
            }
        }
        newest
            .into_iter()
            .map(|(k, (_, v))| (k, v))
            .collect::<BTreeMap<String, String>>()
    };
    let expected = |written: &[(String, CommitTs, String)]| expected_at(written, t);
    let read_cut_at = |client: &Client, t: CommitTs, consistency: ReadConsistency| {
        let keys = keys.clone();
        let client = client.clone();
        async move {
            let mut cut = BTreeMap::new();
            for k in &keys {
                if let Some(v) = settled(|| client.get(k.as_bytes(), ReadAt::AsOf(t), consistency))
                    .await
                    .unwrap()
                    .and_then(|i| i.value)
                {
                    cut.insert(k.clone(), String::from_utf8_lossy(&v).into_owned());
                }
            }
            cut
        }
    };
    let read_cut =
        |client: &Client, consistency: ReadConsistency| read_cut_at(client, t, consistency);
    let first = expected(&written);
    assert!(
        first.values().any(|v| v.ends_with("@0")) && first.values().any(|v| v.ends_with("@1")),
        "T must fall inside the second round: {first:?}"
    );
    for c in &clients {
        // Each node reads its own replica (no leader asked).
        assert_eq!(read_cut(c, ReadConsistency::Local).await, first);
    }
    // More writes after T change nothing at T, on any replica, with any consistency.
    for round in 3..5 {
        write_round(&clients, &keys, round, &mut written).await;
    }
    assert_eq!(
        expected(&written),
        first,
        "a write made after T was stamped at or before T"
    );
    for c in &clients {
        assert_eq!(read_cut(c, ReadConsistency::Local).await, first);
        assert_eq!(read_cut(c, ReadConsistency::Linearizable).await, first);
    }
    // History at T, on every replica: exactly the writes of the key at or before T.
    for (i, k) in keys.iter().enumerate().step_by(5) {
        let mine: Vec<CommitTs> = written
            .iter()
            .filter(|(wk, ts, _)| wk == k && *ts <= t)
            .map(|(_, ts, _)| *ts)
            .collect();
        let history: Vec<CommitTs> = clients[i % 3]
            .history(k.as_bytes(), 1, None, 100, Some(t))
            .await
            .unwrap()
            .iter()
            .map(|v| v.commit_ts)
            .collect();
        assert_eq!(history, mine, "history of {k} at {t}");
    }

    // Monotone: the cut at a later time (in the third round) holds every key of the cut at
    // T, each at the same or a later round.
    let t2 = written[2 * keys.len() + keys.len() / 3].1;
    let later = read_cut_at(&clients[1], t2, ReadConsistency::Local).await;
    assert_eq!(later, expected_at(&written, t2));
    let round = |v: &str| v.rsplit('@').next().unwrap().parse::<usize>().unwrap();
    for (k, v) in &first {
        let after = later
            .get(k)
            .unwrap_or_else(|| panic!("{k} left the later cut"));
        assert!(round(after) >= round(v), "{k}: {v} at T, {after} later");
    }

    // Read your write at its own time, at once, at another node: that replica may not have
    // applied it yet, and the read waits until its time is closed there.
    for i in 0..60 {
        let k = format!("ryw/{i}");
        let ack = put(&clients[i % 3], k.as_bytes(), b"mine").await;
        let reader = &clients[(i + 1) % 3];
        let got = settled(|| {
            reader.get(
                k.as_bytes(),
                ReadAt::AsOf(ack.commit_ts),
                ReadConsistency::Local,
            )
        })
        .await
        .unwrap()
        .and_then(|i| i.value);
        assert_eq!(
            got.as_deref(),
            Some(&b"mine"[..]),
            "{k} at {}",
            ack.commit_ts
        );
    }

    // A time a little ahead is waited for (an idle shard closes time by itself); one far
    // ahead is refused at once.
    let now_us = firn_model::hlc::system_wall_us();
    let soon = CommitTs::new(now_us + 200_000, 0);
    let got = settled(|| clients[0].get(b"cut/0", ReadAt::AsOf(soon), ReadConsistency::Local))
        .await
        .unwrap()
        .and_then(|i| i.value);
    assert_eq!(got.as_deref(), Some(&b"cut/0@4"[..]));
    let far = CommitTs::new(now_us + 60_000_000, 0);
    let e = clients[0]
        .get(b"cut/0", ReadAt::AsOf(far), ReadConsistency::Local)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("in the future"), "{e}");
}

/// A causality token carries a session from one node to another: a write made through one
/// node is read at once, locally, through another that was handed the writer's token; and a
/// write after a token is stamped above it, even a token ahead of every clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn causality_tokens_carry_a_session_across_nodes() {
    let cluster = Cluster::ready(3, &[]).await;
    let clients: Vec<Client> = futures_connect(&cluster).await;
    for i in 0..60 {
        let k = format!("tok/{i}");
        let (writer, reader) = (&clients[i % 3], &clients[(i + 1) % 3]);
        let ack = put(writer, k.as_bytes(), b"mine").await;
        let token = writer.token().await.unwrap();
        assert!(token >= ack.commit_ts, "{token} < {}", ack.commit_ts);
        reader.after(token).await.unwrap();
        assert_eq!(
            value(reader, &k, ReadConsistency::Local).await.as_deref(),
            Some("mine"),
            "{k} after {token}"
        );
    }
    // Over HTTP the client keeps the token: each answer's Firn-Token, sent back as
    // Firn-After. A write through one node is read at once, locally, through another.
    let http: Vec<String> = (0..3).map(|i| cluster.http_addr(i)).collect();
    let checked = tokio::task::spawn_blocking(move || {
        let mut token = String::new();
        for i in 0..30 {
            let url =
                |node: usize, tail: &str| format!("http://{}/v1/kv/htok/{i}{tail}", http[node]);
            let put = ureq::put(&url(i % 3, ""))
                .set("Firn-After", if token.is_empty() { "0-0" } else { &token })
                .send_bytes(b"mine")
                .unwrap();
            token = put.header("firn-token").unwrap().to_string();
            let read = ureq::get(&url((i + 1) % 3, "?consistency=local"))
                .set("Firn-After", &token)
                .call()
                .unwrap_or_else(|e| panic!("htok/{i} after {token}: {e}"));
            let stamp = |t: &str| t.parse::<firn_model::CommitTs>().unwrap();
            assert!(
                read.header("firn-token")
                    .is_some_and(|t| stamp(t) >= stamp(&token))
            );
            assert_eq!(
                read.into_string().unwrap(),
                "mine",
                "htok/{i} after {token}"
            );
        }
        30
    })
    .await
    .unwrap();
    assert_eq!(checked, 30);

    let ahead = firn_model::CommitTs::new(firn_model::hlc::system_wall_us() + 300_000, 7);
    clients[0].after(ahead).await.unwrap();
    for shard in 0..3 {
        let ack = put(
            &clients[0],
            key_in_shard(shard, "tok/later").as_bytes(),
            b"x",
        )
        .await;
        assert!(ack.commit_ts > ahead, "{} not above {ahead}", ack.commit_ts);
    }
}

/// A malformed read is refused at once, not after a barrier that waits for a leader: with
/// two of three nodes gone, a valid linearizable read on the survivor waits seconds for a
/// quorum that never comes, while one with a bad limit is refused before any wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_read_is_refused_before_any_barrier() {
    let mut cluster = Cluster::ready(3, &["--shards", "1"]).await;
    let addr = cluster.resp_addr(0);
    cluster.kill_9(1);
    cluster.kill_9(2);
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let started = Instant::now();
    let err = redis::cmd("FIRN.HISTORY")
        .arg("k")
        .arg("LIMIT")
        .arg(0)
        .query_async::<redis::Value>(&mut con)
        .await
        .expect_err("a limit of 0 is refused");
    assert!(err.to_string().contains("out of range"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused after {:?}: it waited for a barrier first",
        started.elapsed()
    );
}
