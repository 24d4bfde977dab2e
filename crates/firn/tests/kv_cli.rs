//! Key-value subcommands against a real node. `firn get --local`: the newest value from the
//! node's shared-memory region when its keyspace is `LOCAL`, from the node otherwise, and on
//! stderr how fresh the answer is (stdout holds the value alone). `firn txn`: one branch of
//! commands, as the compares decide.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{FirnProcess, wait_until};

fn firn(node: &FirnProcess, args: &[&str]) -> Output {
    let addr = format!("127.0.0.1:{}", node.resp_port);
    std::process::Command::new(env!("CARGO_BIN_EXE_firn"))
        .args(args)
        .args(["--addr", &addr])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn get_local_reads_shared_memory_and_says_how_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(20), || {
            firn(&node, &["keyspace", "create", "sensor/", "--local"])
                .status
                .success()
        }),
        "the keyspace was never made"
    );
    for (key, value) in [("sensor/1", "hot"), ("other", "v")] {
        let out = firn(&node, &["put", key, value]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    // The region has the value once the node published it (right after the write applied).
    let mut said = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let out = firn(&node, &["get", "--local", "sensor/1"]);
            said = text(&out.stderr);
            out.status.success() && out.stdout == b"hot" && said.contains("shared memory under")
        }),
        "a LOCAL key was not read from shared memory: {said}"
    );
    let out = firn(&node, &["get", "--local", "other"]);
    let said = text(&out.stderr);
    assert!(out.status.success() && out.stdout == b"v", "{said}");
    assert!(
        said.contains("read from the node") && said.contains("not in a LOCAL keyspace"),
        "{said}"
    );
    let out = firn(&node, &["get", "--local", "nothing"]);
    assert!(!out.status.success(), "an absent key is a failure");
    assert!(text(&out.stderr).contains("not found"));
}

#[test]
fn txn_runs_the_then_commands_while_the_compares_hold_and_the_else_ones_after() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let take = [
        "txn",
        "--if",
        "lock EXISTS = 0",
        "--then",
        "SET lock me",
        "--then",
        "INCR fence",
        "--else",
        "GET lock",
    ];
    // The first try that is answered at all (the node may still be electing).
    let mut out = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            let tried = firn(&node, &take);
            let answered = tried.status.success();
            out = Some(tried);
            answered
        }),
        "{:?}",
        out.map(|o| text(&o.stderr))
    );
    let out = out.unwrap();
    assert_eq!(
        text(&out.stdout),
        "succeeded: the --then commands ran\n1) OK\n2) (integer) 1\n"
    );
    let out = firn(&node, &take);
    assert_eq!(
        text(&out.stdout),
        "a compare failed: the --else commands ran\n1) \"me\"\n"
    );
    // A record appended with a write; its seq is shown as the command's reply.
    let out = firn(
        &node,
        &[
            "txn",
            "--then",
            "SET lock audited",
            "--then",
            "FIRN.LOG APPEND audit TAGS 1 lock taken",
        ],
    );
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("succeeded: the --then commands ran\n1) OK\n2) [\""),
        "{shown}"
    );
    let out = firn(&node, &["txn", "--if", "lock EXISTS"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("4 words"),
        "{}",
        text(&out.stderr)
    );
    let out = firn(&node, &["txn", "--then", "XLEN s"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("XLEN cannot run inside a transaction"),
        "{}",
        text(&out.stderr)
    );
}
