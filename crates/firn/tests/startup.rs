//! What a starting node shows and refuses: its log off a terminal is plain text (no colour
//! codes in a file or a journal), and a second node on the same data directory is refused
//! at once, saying why.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{FirnProcess, firn_bin, wait_until};

/// `firn serve --data-dir DATA` on free loopback ports, its log at `info` on a pipe.
fn serve(data: &str) -> Command {
    let mut c = Command::new(firn_bin());
    c.args(["serve", "--data-dir", data])
        .args(FirnProcess::FREE_PORTS)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn logs_off_a_terminal_are_plain_and_a_data_directory_serves_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let mut first = serve(data).spawn().expect("spawn firn");
    let stdout = first.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    while Instant::now() < deadline
        && !lines
            .iter()
            .any(|l: &String| l.starts_with("firn serving:"))
    {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(line);
        }
    }
    let started = lines.iter().any(|l| l.starts_with("firn serving:"));
    let coloured: Vec<&String> = lines.iter().filter(|l| l.contains('\u{1b}')).collect();
    // The second node, while the first serves.
    let mut second = serve(data).spawn().expect("spawn firn");
    let ended = wait_until(Duration::from_secs(30), || {
        second.try_wait().unwrap().is_some()
    });
    let _ = second.kill();
    let out = second.wait_with_output().unwrap();
    let _ = first.kill();
    let _ = first.wait();
    assert!(started, "the node did not start: {lines:?}");
    assert!(
        lines.len() > 1,
        "no log line came before serving: {lines:?}"
    );
    assert!(
        coloured.is_empty(),
        "colour codes in a piped log: {coloured:?}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        ended && !out.status.success(),
        "a second node started on the same data directory"
    );
    assert!(said.contains("in use by another firn process"), "{said}");
}
