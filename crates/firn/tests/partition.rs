//! A network partition, made with firewall rules on the nodes' own loopback addresses: the
//! minority side refuses writes and linearizable reads with a clear error, the majority goes
//! on, and after healing every replica converges on the majority's writes.
//!
//! Needs root and iptables (the README's test command installs iptables).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard};
use firn_client::{Client, ClientError, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

/// Firewall rules that drop traffic between one node's address and the others'; removed when
/// dropped, so a failing test leaves no rule behind.
struct Partition {
    rules: Vec<[String; 4]>,
}

fn iptables(action: &str, rule: &[String; 4]) {
    let status = Command::new("iptables")
        .args([
            action, "INPUT", "-s", &rule[0], "-d", &rule[1], "-p", &rule[2], "-j", &rule[3],
        ])
        .status()
        .expect(
            "iptables is needed for the partition test (the README's test command installs it)",
        );
    assert!(
        status.success(),
        "iptables {action} failed (the partition test needs root)"
    );
}

impl Partition {
    fn isolate(node_ip: &str, others: &[&str]) -> Partition {
        let mut rules = Vec::new();
        for other in others {
            for (s, d) in [(node_ip, *other), (*other, node_ip)] {
                let rule = [
                    s.to_string(),
                    d.to_string(),
                    "tcp".to_string(),
                    "DROP".to_string(),
                ];
                iptables("-I", &rule);
                rules.push(rule);
            }
        }
        Partition { rules }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for rule in &self.rules {
            iptables("-D", rule);
        }
    }
}

fn ip(addr: &str) -> String {
    addr.rsplit_once(':').unwrap().0.to_string()
}

async fn get(
    client: &Client,
    key: &str,
    consistency: ReadConsistency,
) -> Result<Option<String>, ClientError> {
    Ok(client
        .get(key.as_bytes(), ReadAt::Latest, consistency)
        .await?
        .and_then(|i| i.value)
        .map(|v| String::from_utf8_lossy(&v).into_owned()))
}

/// Writes `during` to `key` until a write is taken, within `within`; each refusal in between
/// must come before the peer call's 5 s timeout (UNCERTAIN or TRYAGAIN once the node sees the
/// cut, never `did not answer within`).
async fn write_without_waiting_out_the_cut(client: &Client, key: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let sent = Instant::now();
        let Err(e) = client
            .put(key.as_bytes(), b"during", PutOptions::default())
            .await
        else {
            return;
        };
        assert!(
            !e.to_string().contains("did not answer within"),
            "a write to {key} waited {:?} for a node that was cut off: {e}",
            sent.elapsed()
        );
        assert!(
            Instant::now() < deadline,
            "{key} could not be written within {within:?} of the cut: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The minority must answer, and with an error: success or silence both fail the test.
fn assert_refused<T: std::fmt::Debug>(
    what: &str,
    outcome: Result<Result<T, ClientError>, tokio::time::error::Elapsed>,
) {
    match outcome {
        Err(_) => panic!("{what}: the minority did not answer within 25 s"),
        Ok(Ok(v)) => panic!("{what}: the minority answered {v:?}; it must refuse"),
        Ok(Err(ClientError::Server { code, message })) => {
            assert!(
                ["CLUSTERDOWN", "TRYAGAIN", "UNCERTAIN"].contains(&code.as_str()),
                "{what}: unexpected error {code} {message}"
            );
        }
        Ok(Err(e)) => panic!("{what}: not a clear refusal: {e}"),
    }
}

/// `n` nodes, node `i`'s peer traffic on `127.0.0.{first_ip + i}`, once every node knows every
/// shard's leader.
async fn cluster_on(n: usize, first_ip: u8) -> Cluster {
    tokio::task::spawn_blocking(move || {
        let c = Cluster::start_on(n, &[], Some(first_ip));
        for i in 0..n {
            c.wait_for_leaders(i, None);
        }
        c
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_refuses_majority_goes_on_and_replicas_converge_after_healing() {
    let cluster = cluster_on(3, 21).await;
    let keys: Vec<String> = (0..3).map(|s| key_in_shard(s, "part")).collect();
    let gone: Vec<String> = (0..3).map(|s| key_in_shard(s, "gone")).collect();
    let majority = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    // Its writes sent once each: the test sees the minority's own refusal.
    let minority = Client::connect(&cluster.resp_addr(2))
        .await
        .unwrap()
        .with_resend_for(Duration::ZERO);
    for k in keys.iter().chain(&gone) {
        majority
            .put(k.as_bytes(), b"before", PutOptions::default())
            .await
            .unwrap();
    }
    // Node 3 holds every "before" before it is cut off.
    let written = majority.token().await.unwrap();
    minority.after(written).await.unwrap();
    for k in keys.iter().chain(&gone) {
        assert_eq!(
            get(&minority, k, ReadConsistency::Local)
                .await
                .unwrap()
                .as_deref(),
            Some("before")
        );
    }

    let (a, b, c) = (
        ip(&cluster.peer_addr(0)),
        ip(&cluster.peer_addr(1)),
        ip(&cluster.peer_addr(2)),
    );
    let reader_at_cut = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    let partition = Partition::isolate(&c, &[&a, &b]);
    let cut_at = Instant::now();

    // A linearizable read on the majority side, sent as the cut happens, is answered: the
    // read index it asked of the cut-off leader is asked again of the new one once node 2
    // knows it (it was CLUSTERDOWN after the peer call's 5 s timeout).
    let reads = {
        let keys = keys.clone();
        tokio::spawn(async move {
            for k in &keys {
                let sent = Instant::now();
                let r = get(&reader_at_cut, k, ReadConsistency::Linearizable).await;
                assert!(
                    matches!(
                        r.as_ref().map(|v| v.as_deref()),
                        Ok(Some("before" | "during"))
                    ),
                    "a linearizable read of {k} on the majority side as the cut happened: \
                     {r:?} after {:?}",
                    sent.elapsed()
                );
            }
        })
    };

    // The majority side goes on: every shard (including the one node 3 led) takes writes.
    // A write node 1 forwarded to node 3 is never answered; once node 1's replica of the
    // shard knows the new leader, it stops waiting for node 3 (UNCERTAIN: node 3 may have
    // committed it just before the cut) instead of waiting out the peer call's 5 s timeout.
    for k in &keys {
        write_without_waiting_out_the_cut(&majority, k, Duration::from_secs(30)).await;
    }
    eprintln!(
        "partition: the majority wrote to every shard {:?} after the cut",
        cut_at.elapsed()
    );
    reads.await.unwrap();
    eprintln!(
        "partition: the majority read every shard {:?} after the cut",
        cut_at.elapsed()
    );

    // A session that only read — it saw the keys deleted, an answer with no stamp of its
    // own — hands its token to node 3. Node 3 missed the deletes: its local read must wait
    // and refuse (TRYAGAIN), not go back to "before".
    for k in &gone {
        majority.delete(k.as_bytes()).await.unwrap();
    }
    let reader = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    for k in &gone {
        assert_eq!(
            get(&reader, k, ReadConsistency::Linearizable)
                .await
                .unwrap(),
            None
        );
    }
    let cut_off = Client::connect(&cluster.resp_addr(2)).await.unwrap();
    cut_off.after(reader.token().await.unwrap()).await.unwrap();
    for k in &gone {
        let r = tokio::time::timeout(
            Duration::from_secs(25),
            get(&cut_off, k, ReadConsistency::Local),
        )
        .await;
        assert_refused(
            &format!("local read of deleted {k} after the session's token"),
            r,
        );
    }

    // The minority refuses writes and linearizable reads, with a clear error, in bounded time.
    let bound = Duration::from_secs(25);
    let mut checks = Vec::new();
    for k in keys.clone() {
        let m = minority.clone();
        checks.push(tokio::spawn(async move {
            let w = tokio::time::timeout(
                bound,
                m.put(k.as_bytes(), b"minority", PutOptions::default()),
            )
            .await;
            assert_refused(&format!("write {k} on the minority"), w);
            let r = tokio::time::timeout(bound, get(&m, &k, ReadConsistency::Linearizable)).await;
            assert_refused(&format!("linearizable read of {k} on the minority"), r);
        }));
    }
    for c in checks {
        c.await.unwrap();
    }

    drop(partition);
    let healed_at = Instant::now();
    // After healing, node 3 converges on the majority's writes; nothing the minority was
    // refused (or left uncertain) survives.
    for k in &keys {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(v)) = get(&minority, k, ReadConsistency::Local).await
                && v == "during"
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node 3 did not converge on {k} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            get(&majority, k, ReadConsistency::Linearizable)
                .await
                .unwrap()
                .as_deref(),
            Some("during")
        );
    }
    eprintln!(
        "partition: node 3 converged {:?} after healing",
        healed_at.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while minority
        .put(keys[0].as_bytes(), b"after", PutOptions::default())
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "node 3 could not write after healing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(cluster);
}

/// With more nodes than a shard has replicas, a node that holds none of the shard sends its
/// requests to one of the shard's replicas. When that replica is cut off, the node must find
/// the shard's leader among the others, and keep sending there: not wait out the 5 s call
/// timeout on every request while the partition lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_replica_stops_asking_a_replica_that_is_cut_off() {
    let cluster = cluster_on(4, 31).await;
    // A shard and a node without a replica of it; the replica that node asks first.
    let (shard, replicas, outsider) = cluster.shard_missing_from_a_node();
    let asked = replicas[0];
    let index = |node: u64| node as usize - 1;
    let key = key_in_shard(shard as u32, "outside");
    let client = Client::connect(&cluster.resp_addr(index(outsider)))
        .await
        .unwrap();
    client
        .put(key.as_bytes(), b"before", PutOptions::default())
        .await
        .unwrap();

    let others: Vec<String> = (1..=4u64)
        .filter(|n| *n != asked)
        .map(|n| ip(&cluster.peer_addr(index(n))))
        .collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let partition = Partition::isolate(&ip(&cluster.peer_addr(index(asked))), &others);
    let cut_at = Instant::now();

    // The first write may be UNCERTAIN (node `asked` may have taken it before the cut), but
    // none may wait for the silent replica until the call's timeout.
    write_without_waiting_out_the_cut(&client, &key, Duration::from_secs(20)).await;
    eprintln!(
        "partition: node {outsider} wrote to shard {shard} {:?} after node {asked} was cut off",
        cut_at.elapsed()
    );
    // From then on it goes to the leader it found: every request is answered, at once.
    for i in 0..5 {
        let sent = Instant::now();
        let value = format!("during {i}");
        client
            .put(key.as_bytes(), value.as_bytes(), PutOptions::default())
            .await
            .unwrap_or_else(|e| panic!("write {i} after the first: {e}"));
        let read = get(&client, &key, ReadConsistency::Linearizable).await;
        assert_eq!(read.unwrap().as_deref(), Some(value.as_str()));
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "a write and a read took {:?}",
            sent.elapsed()
        );
    }
    drop(partition);
    drop(cluster);
}
