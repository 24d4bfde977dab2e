//! `firn group …` against a real node: create, read, pending, ack, info, consume (the event
//! stream, acking each entry it prints, bounded by --count), destroy, and the errors a user
//! sees (BUSYGROUP, NOGROUP, a bad id) as a message and a failing exit status. Entries are
//! added with XADD over RESP.

mod common;

use std::io::BufRead;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{FirnProcess, wait_until};

fn firn_group(node: &FirnProcess, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_firn"))
        .arg("group")
        .args(args)
        .args(["--http-addr", &node.http_addr])
        .output()
        .unwrap()
}

/// Stdout of a command that must succeed.
fn ok(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn_group(node, args);
    assert!(
        out.status.success(),
        "firn group {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stderr of a command that must fail.
fn fails(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn_group(node, args);
    assert!(!out.status.success(), "firn group {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

fn xadd(con: &mut redis::Connection, value: &str) -> String {
    redis::cmd("XADD")
        .arg("orders")
        .arg("*")
        .arg("v")
        .arg(value)
        .query(con)
        .unwrap()
}

/// A node with the group `g` of the stream `orders` made, and a RESP connection to it.
fn node_with_a_group(dir: &std::path::Path) -> (FirnProcess, redis::Connection) {
    let node = FirnProcess::start(dir, &["--in-memory"]);
    // Ready when a create gets through.
    assert!(
        wait_until(Duration::from_secs(20), || {
            firn_group(
                &node,
                &["create", "orders", "g", "--start", "0", "--mkstream"],
            )
            .status
            .success()
        }),
        "the node never made the group"
    );
    let con = redis::Client::open(format!("redis://{}/", node.resp_addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    (node, con)
}

/// `firn group consume orders g CONSUMER ARGS…` started, and its stdout's lines as they come.
fn consume(node: &FirnProcess, consumer: &str, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_firn"))
        .args(["group", "consume", "orders", "g", consumer])
        .args(args)
        .args(["--http-addr", &node.http_addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The first word of each line: the ids a command printed.
fn ids(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn the_group_subcommands_create_read_ack_consume_and_report_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (node, mut con) = node_with_a_group(dir.path());
    let err = fails(&node, &["create", "orders", "g"]);
    assert!(err.contains("BUSYGROUP"), "{err}");
    // A missing stream: the error names the flag that makes it.
    let err = fails(&node, &["create", "nostream", "g"]);
    assert!(
        err.contains("--mkstream") && !err.contains("MKSTREAM"),
        "{err}"
    );
    let added: Vec<String> = ["a", "b", "c"].iter().map(|v| xadd(&mut con, v)).collect();

    let read = ok(&node, &["read", "orders", "g", "alice", "--count", "2"]);
    assert_eq!(
        read,
        format!("{}  v=a\n{}  v=b\n", added[0], added[1]),
        "{read}"
    );
    let summary = ok(&node, &["pending", "orders", "g"]);
    assert_eq!(
        summary,
        format!("count 2  first {}  last {}\nalice  2\n", added[0], added[1])
    );
    assert_eq!(ok(&node, &["ack", "orders", "g", &added[0]]), "acked 1\n");
    let listed = ok(&node, &["pending", "orders", "g", "--consumer", "alice"]);
    assert_eq!(ids(&listed), [added[1].clone()], "{listed}");
    let info = ok(&node, &["info", "orders"]);
    assert!(
        info.starts_with("g  consumers 1  pending 1  last_delivered "),
        "{info}"
    );
    let consumers = ok(&node, &["info", "orders", "g"]);
    assert!(
        consumers.starts_with("alice  pending 1  idle "),
        "{consumers}"
    );

    // Refusals: a group that is not, an id that is not one; they change nothing.
    let err = fails(&node, &["read", "orders", "nope", "alice"]);
    assert!(err.contains("NOGROUP"), "{err}");
    let err = fails(&node, &["ack", "orders", "g", "not-an-id"]);
    assert!(err.contains("not-an-id"), "{err}");
    let err = fails(&node, &["read", "orders", "g", "alice", "--count", "0"]);
    assert!(err.contains("count is 0"), "{err}");
    assert_eq!(
        ok(&node, &["pending", "orders", "g"]),
        format!("count 1  first {}  last {}\nalice  1\n", added[1], added[1])
    );

    // Consume two as bob: the third entry at once, then one added while it follows.
    let (mut child, rx) = consume(&node, "bob", &["--count", "2"]);
    let first = rx.recv_timeout(Duration::from_secs(20));
    let fourth = xadd(&mut con, "d");
    let second = rx.recv_timeout(Duration::from_secs(20));
    let exited = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    assert_eq!(first, Ok(format!("{}  v=c", added[2])));
    assert_eq!(second, Ok(format!("{fourth}  v=d")));
    assert!(exited && status.success(), "consume did not end by itself");
    // It acked what it printed: bob holds nothing.
    let bob = ok(&node, &["pending", "orders", "g", "--consumer", "bob"]);
    assert_eq!(bob, "", "{bob}");

    assert_eq!(ok(&node, &["destroy", "orders", "g"]), "destroyed g\n");
    let err = fails(&node, &["destroy", "orders", "g"]);
    assert!(err.contains("no group g"), "{err}");
    let err = fails(&node, &["pending", "orders", "g"]);
    assert!(err.contains("NOGROUP"), "{err}");
}

/// `firn group consume` without `--count` follows the group until stopped; when its node goes
/// away instead, it exits with a failing status and says so — a supervisor must not take it
/// for finished.
#[test]
fn consume_fails_when_its_node_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let (node, mut con) = node_with_a_group(dir.path());
    let added = xadd(&mut con, "a");
    let (mut child, rx) = consume(&node, "bob", &[]);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)),
        Ok(format!("{added}  v=a"))
    );
    node.kill_9();
    let exited = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(exited, "consume went on without its node");
    assert!(
        !out.status.success(),
        "consume exited 0 without its node: {said}"
    );
    assert!(said.contains("stopped or went away"), "{said}");
}
