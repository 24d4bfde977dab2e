//! The stock Redis tools work unchanged against Firn: redis-cli and redis-benchmark.

mod common;

use std::process::Command;

use common::FirnProcess;

fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{name} is not installed; the README's test command installs redis-tools"
    );
    Command::new(name)
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = tool("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-cli {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn redis_cli_reads_writes_and_scans() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let port = node.resp_port;
    assert_eq!(redis_cli(port, &["PING"]), "PONG");
    assert_eq!(redis_cli(port, &["SET", "greeting", "hello firn"]), "OK");
    assert_eq!(redis_cli(port, &["GET", "greeting"]), "hello firn");
    assert_eq!(redis_cli(port, &["SET", "greeting", "x", "NX"]), "");
    for i in 0..30 {
        redis_cli(port, &["SET", &format!("scan:{i}"), "1"]);
    }
    let scanned = redis_cli(port, &["--scan", "--pattern", "scan:*"]);
    assert_eq!(scanned.lines().count(), 30, "{scanned}");
    let history = redis_cli(port, &["FIRN.HISTORY", "greeting"]);
    assert!(history.contains("hello firn"), "{history}");
    assert!(redis_cli(port, &["-3", "HELLO", "3"]).contains("proto"));
    assert!(redis_cli(port, &["INFO", "keyspace"]).contains("db0:keys=31"));
    // An error is printed, not a crash, and the server still answers.
    assert!(redis_cli(port, &["GET"]).contains("wrong number of arguments"));
    assert_eq!(redis_cli(port, &["DBSIZE"]), "31");
}

#[test]
fn redis_benchmark_runs_set_and_get_against_firn() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let out = tool("redis-benchmark")
        .args([
            "-p",
            &node.resp_port.to_string(),
            "-t",
            "set,get",
            "-n",
            "2000",
            "-c",
            "8",
            "-P",
            "4",
            "-d",
            "100",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // With -q each test ends on its own line "SET: N requests per second, …".
    for test in ["SET:", "GET:"] {
        let line = text
            .split('\r')
            .flat_map(|l| l.lines())
            .find(|l| l.trim_start().starts_with(test) && l.contains("requests per second"));
        assert!(
            line.is_some(),
            "redis-benchmark printed no {test} result:\n{text}"
        );
    }
    // Every SET landed: 2000 requests over the default 1 key.
    let info = redis_cli(node.resp_port, &["GET", "key:__rand_int__"]);
    assert_eq!(info.len(), 100, "the benchmark's value is 100 bytes");
}

#[test]
fn redis_cli_pipe_mass_insertion_completes() {
    // `redis-cli --pipe` sends the commands, an empty line, then `ECHO <20 random bytes>`,
    // and waits for that echo: every command must be answered and the empty line skipped.
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let mut input = String::new();
    for i in 0..2_000 {
        let (k, v) = (format!("pipe:{i:05}"), format!("value-{i}"));
        input += &format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
            k.len(),
            v.len()
        );
    }
    let mut child = tool("redis-cli")
        .args([
            "-p",
            &node.resp_port.to_string(),
            "--pipe",
            "--pipe-timeout",
            "20",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        stdin.write_all(b"\r\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-cli --pipe failed: {text}");
    assert!(text.contains("errors: 0, replies: 2000"), "{text}");
    assert_eq!(redis_cli(node.resp_port, &["DBSIZE"]), "2000");
    assert_eq!(
        redis_cli(node.resp_port, &["GET", "pipe:01999"]),
        "value-1999"
    );
}
