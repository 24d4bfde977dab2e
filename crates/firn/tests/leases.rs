//! Leases through the Rust client against a real node: a lease's keys go when it is revoked
//! or runs out, and stay while it is kept alive; a lock held by a process killed with
//! SIGKILL passes to a waiter once its TTL has run out, with a greater fencing token; an
//! election hands over when its leader resigns or is killed; a lease the node does not know
//! is named as such, and the connection goes on serving.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{FirnProcess, read_latest};
use firn_client::{Client, ClientError, Election, Lease, LeaseLoss, Lock, PutOptions};

/// Set in a holder process: `lock|election RESP_ADDR NAME TTL_S`.
const HOLDER_ENV: &str = "FIRN_TEST_LEASE_HOLDER";
/// What a holder process prints once it holds, before its fencing token.
const HELD: &str = "holder holds with token";

async fn node() -> (FirnProcess, tempfile::TempDir) {
    tokio::task::spawn_blocking(|| {
        let dir = tempfile::tempdir().unwrap();
        (FirnProcess::start(dir.path(), &["--in-memory"]), dir)
    })
    .await
    .unwrap()
}

async fn connect(node: &FirnProcess) -> Client {
    let client = Client::connect(&node.resp_addr()).await.unwrap();
    // Until the node's shard has a leader.
    common::settled(|| client.put(b"leases/ready", b"1", PutOptions::default()))
        .await
        .unwrap();
    client
}

/// Not a test of its own: run by the tests below in a process of its own (this test binary
/// again, with [`HOLDER_ENV`] set), it takes a lock or leads an election, prints its
/// fencing token, and holds on, keeping its lease alive, until it is killed. Run without
/// [`HOLDER_ENV`], it does nothing.
#[tokio::test]
async fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let words: Vec<&str> = spec.split(' ').collect();
    let [role, addr, name, ttl_s] = words[..] else {
        panic!("{HOLDER_ENV}={spec}: expected `lock|election ADDR NAME TTL_S`");
    };
    let ttl = Duration::from_secs(ttl_s.parse().unwrap());
    let client = Client::connect(addr).await.unwrap();
    let token = match role {
        "lock" => {
            let lock = Lock::acquire(&client, name.as_bytes(), ttl).await.unwrap();
            let token = lock.token();
            std::mem::forget(lock); // held until the process dies
            token
        }
        "election" => {
            let election = Election::new(&client, name.as_bytes(), ttl);
            let leading = election.campaign(b"the other process").await.unwrap();
            let term = leading.term();
            std::mem::forget(leading);
            term
        }
        other => panic!("unknown holder role {other}"),
    };
    println!("{HELD} {token}");
    std::io::stdout().flush().unwrap();
    // Bounded: the test kills this process long before.
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the holder was not killed within 120 s");
}

/// A holder process (see [`holder_process`]) that holds, and the token it printed.
struct Holder {
    child: Child,
    token: u64,
}

impl Holder {
    /// Starts a holder and waits (bounded) until it holds.
    async fn start(role: &str, addr: &str, name: &str, ttl: Duration) -> Holder {
        let spec = format!("{role} {addr} {name} {}", ttl.as_secs());
        tokio::task::spawn_blocking(move || {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "holder_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(HOLDER_ENV, spec)
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a holder process");
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // After the test harness's `test holder_process ... `, on its line.
                    if let Some((_, token)) = line.split_once(HELD) {
                        let _ = tx.send(token.trim().parse::<u64>().unwrap());
                    }
                }
            });
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(token) => Holder { child, token },
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("the holder process did not hold within 30 s: {e}");
                }
            }
        })
        .await
        .unwrap()
    }

    /// SIGKILL to this holder's process (by its PID): no code of its own runs after.
    fn kill_9(mut self) -> Instant {
        self.child.kill().expect("kill -9 the holder");
        let killed = Instant::now();
        self.child.wait().unwrap();
        killed
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_holder_is_killed_passes_to_a_waiter_after_its_ttl_with_a_greater_token() {
    let (node, _dir) = node().await;
    let client = connect(&node).await;
    let ttl = Duration::from_secs(2);
    let holder = Holder::start("lock", &node.resp_addr(), "locks/job", ttl).await;
    let waiter = tokio::spawn(async move {
        let lock = Lock::acquire(&client, b"locks/job", ttl).await;
        (Instant::now(), lock)
    });
    // The holder keeps its lease alive: the waiter waits past two TTLs.
    tokio::time::sleep(ttl * 2).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took the lock from a live holder: {:?}",
        waiter.await
    );
    let first_token = holder.token;
    let killed = holder.kill_9();
    let (taken, lock) = tokio::time::timeout(ttl + Duration::from_secs(5), waiter)
        .await
        .expect("the waiter did not take the lock within the TTL and 5 s of the kill")
        .unwrap();
    let lock = lock.unwrap();
    let waited = taken - killed;
    eprintln!(
        "taken {waited:?} after the kill; tokens {first_token} then {}",
        lock.token()
    );
    assert!(
        waited <= ttl + Duration::from_secs(3),
        "taken {waited:?} after the kill"
    );
    // Freed by the lease running out, not by the holder's connection closing.
    assert!(waited >= ttl / 3, "taken only {waited:?} after the kill");
    assert!(
        lock.token() > first_token,
        "{} after {first_token}",
        lock.token()
    );
    lock.release().await.unwrap();
    assert!(
        read_latest(
            &Client::connect(&node.resp_addr()).await.unwrap(),
            b"locks/job"
        )
        .await
        .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_is_taken_next_with_a_greater_token_and_a_held_one_is_not() {
    let (node, _dir) = node().await;
    let (a, b) = (connect(&node).await, connect(&node).await);
    let ttl = Duration::from_secs(5);
    let first = Lock::acquire(&a, b"locks/one", ttl).await.unwrap();
    assert!(
        Lock::try_acquire(&b, b"locks/one", ttl)
            .await
            .unwrap()
            .is_none()
    );
    let held = read_latest(&b, b"locks/one").await.unwrap();
    assert_eq!(held.value.as_deref(), Some(first.holder().as_bytes()));
    assert_eq!(held.version, first.token());
    let waiter = tokio::spawn(async move { Lock::acquire(&b, b"locks/one", ttl).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    let first_token = first.token();
    let released = Instant::now();
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("a released lock is taken at once, not after its TTL")
        .unwrap()
        .unwrap();
    eprintln!("taken {:?} after the release", released.elapsed());
    assert!(second.token() > first_token);
    assert_eq!(second.lease().loss(), None);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_leader_hands_over_to_the_waiting_candidate() {
    let (node, _dir) = node().await;
    let (a, b) = (connect(&node).await, connect(&node).await);
    let ttl = Duration::from_secs(10);
    let (ea, eb) = (
        Election::new(&a, b"elections/sched", ttl),
        Election::new(&b, b"elections/sched", ttl),
    );
    assert_eq!(ea.leader().await.unwrap(), None);
    let mut leading = ea.campaign(b"a").await.unwrap();
    let waiting = tokio::spawn(async move { eb.campaign(b"b").await.map(|l| (eb, l)) });
    leading.proclaim(b"a, again").await.unwrap();
    let seen = ea.leader().await.unwrap().unwrap();
    assert_eq!(
        (&seen.value[..], seen.version),
        (&b"a, again"[..], leading.version())
    );
    assert!(leading.version() > leading.term());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "two leaders at once");
    let last = leading.version();
    leading.resign().await.unwrap();
    let (eb, b_leads) = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the candidate leads at once after a resignation, not after the TTL")
        .unwrap()
        .unwrap();
    assert!(b_leads.term() > last, "{} after {last}", b_leads.term());
    assert_eq!(&eb.leader().await.unwrap().unwrap().value[..], b"b");
    b_leads.resign().await.unwrap();
    assert_eq!(ea.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_followed_by_the_waiting_candidate_after_its_ttl() {
    let (node, _dir) = node().await;
    let client = connect(&node).await;
    let ttl = Duration::from_secs(2);
    let holder = Holder::start("election", &node.resp_addr(), "elections/killed", ttl).await;
    let election = Election::new(&client, b"elections/killed", ttl);
    let other = election
        .leader()
        .await
        .unwrap()
        .expect("the other process leads");
    assert_eq!(
        (&other.value[..], other.version),
        (&b"the other process"[..], holder.token)
    );
    let candidate = election.clone();
    let waiting = tokio::spawn(async move { candidate.campaign(b"this process").await });
    tokio::time::sleep(ttl * 2).await;
    assert!(
        !waiting.is_finished(),
        "led while the other process was alive"
    );
    let first_term = holder.token;
    let killed = holder.kill_9();
    let leading = tokio::time::timeout(ttl + Duration::from_secs(5), waiting)
        .await
        .expect("no new leader within the TTL and 5 s of the kill")
        .unwrap()
        .unwrap();
    eprintln!("leading {:?} after the kill", killed.elapsed());
    assert!(leading.term() > first_term);
    assert_eq!(
        &election.leader().await.unwrap().unwrap().value[..],
        b"this process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_ends_learns_it_and_can_proclaim_no_more() {
    let (node, _dir) = node().await;
    let (a, b) = (connect(&node).await, connect(&node).await);
    let ttl = Duration::from_secs(10);
    let mut leading = Election::new(&a, b"elections/ended", ttl)
        .campaign(b"a")
        .await
        .unwrap();
    // Someone else ends the leader's lease (as its TTL running out would).
    b.lease_revoke(leading.lease().id()).await.unwrap();
    let loss = tokio::time::timeout(ttl, leading.lost())
        .await
        .expect("the loss is seen");
    assert_eq!(loss, LeaseLoss::Ended);
    let b_leads = Election::new(&b, b"elections/ended", ttl)
        .campaign(b"b")
        .await
        .unwrap();
    let refused = leading.proclaim(b"a, still?").await.unwrap_err();
    assert!(
        matches!(&refused, ClientError::Server { code, .. } if code == "CONFLICT")
            || refused.is_lease_not_found(),
        "{refused}"
    );
    assert!(b_leads.term() > leading.version());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_deletes_its_keys_at_one_stamp_and_their_versions_keep_growing() {
    let (node, _dir) = node().await;
    let client = connect(&node).await;
    let lease = client.lease_grant(Duration::from_secs(30)).await.unwrap();
    let ttl = client.lease_ttl(lease).await.unwrap();
    assert!(
        ttl > Duration::from_secs(25) && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    let mut written = Vec::new();
    for key in [&b"leased/a"[..], b"leased/b"] {
        written.push(
            client
                .put_with_lease(key, b"v", PutOptions::default(), lease)
                .await
                .unwrap(),
        );
    }
    client
        .put(b"leased/kept", b"v", PutOptions::default())
        .await
        .unwrap();
    client.lease_revoke(lease).await.unwrap();
    assert!(read_latest(&client, b"leased/a").await.is_none());
    assert!(read_latest(&client, b"leased/b").await.is_none());
    assert!(read_latest(&client, b"leased/kept").await.is_some());
    let ends: Vec<_> = [&b"leased/a"[..], b"leased/b"]
        .iter()
        .map(|k| client.history(k, 1, None, 10, None))
        .collect();
    let mut stamps = Vec::new();
    for h in ends {
        let h = h.await.unwrap();
        let end = h.last().unwrap();
        assert!(end.deleted, "{h:?}");
        stamps.push(end.commit_ts);
    }
    assert_eq!(stamps[0], stamps[1], "one stamp for every key of the lease");
    let again = client
        .put(b"leased/a", b"w", PutOptions::default())
        .await
        .unwrap();
    assert!(
        again.version > written[0].version + 1,
        "{again:?} after {:?}",
        written[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_kept_alive_ends_after_its_ttl_and_a_kept_one_lives_on() {
    let (node, _dir) = node().await;
    let client = connect(&node).await;
    let ttl = Duration::from_secs(1);
    let bare = client.lease_grant(ttl).await.unwrap();
    let kept = Lease::grant(&client, ttl).await.unwrap();
    client
        .put_with_lease(b"ttl/bare", b"v", PutOptions::default(), bare)
        .await
        .unwrap();
    client
        .put_with_lease(b"ttl/kept", b"v", PutOptions::default(), kept.id())
        .await
        .unwrap();
    tokio::time::sleep(ttl * 3).await;
    assert!(
        read_latest(&client, b"ttl/bare").await.is_none(),
        "the key outlived its lease"
    );
    assert!(
        client
            .lease_keepalive(bare)
            .await
            .unwrap_err()
            .is_lease_not_found()
    );
    assert!(read_latest(&client, b"ttl/kept").await.is_some());
    assert_eq!(kept.loss(), None);
    assert!(client.lease_ttl(kept.id()).await.unwrap() <= ttl);
    kept.revoke().await.unwrap();
    assert!(read_latest(&client, b"ttl/kept").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_lease_is_named_as_not_found_and_the_connection_serves_on() {
    let (node, _dir) = node().await;
    let client = connect(&node).await;
    let ended = client.lease_grant(Duration::from_secs(5)).await.unwrap();
    client.lease_revoke(ended).await.unwrap();
    for id in [ended, 7_654_321] {
        for refused in [
            client.lease_keepalive(id).await.map(|_| ()),
            client.lease_revoke(id).await,
            client.lease_ttl(id).await.map(|_| ()),
            client
                .put_with_lease(b"unknown/k", b"v", PutOptions::default(), id)
                .await
                .map(|_| ()),
        ] {
            let e = refused.unwrap_err();
            assert!(
                matches!(e, ClientError::LeaseNotFound { lease } if lease == id),
                "{e}"
            );
        }
    }
    assert!(
        read_latest(&client, b"unknown/k").await.is_none(),
        "written under no lease"
    );
    // Refused before sending.
    assert!(matches!(
        client.lease_grant(Duration::ZERO).await,
        Err(ClientError::Invalid(_))
    ));
    // Refused by the node, which says what is allowed.
    for words in [
        &["GRANT", "0"][..],
        &["GRANT", "31536001"],
        &["KEEPALIVE", "x"],
        &["NOPE"],
    ] {
        let mut cmd = redis::cmd("FIRN.LEASE");
        for w in words {
            cmd.arg(*w);
        }
        match client.raw(&cmd).await {
            Err(ClientError::Server { code, message }) => {
                eprintln!("FIRN.LEASE {words:?}: {code} {message}");
                assert_eq!(code, "ERR");
            }
            other => panic!("FIRN.LEASE {words:?}: {other:?}"),
        }
    }
    let ack = client
        .put(b"unknown/after", b"v", PutOptions::default())
        .await
        .unwrap();
    assert_eq!(ack.version, 1);
    assert!(client.lease_grant(Duration::from_secs(1)).await.unwrap() > 0);
}
