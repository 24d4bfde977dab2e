//! `firn get --local` against a real node: the newest value from the node's shared-memory
//! region when its keyspace is `LOCAL`, from the node otherwise, and on stderr how fresh the
//! answer is (stdout holds the value alone).

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
