//! Starting the real `firn` binary for multi-process tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct FirnProcess {
    pub child: Child,
    pub resp_port: u16,
    pub http_addr: String,
    pub peer_addr: String,
}

impl FirnProcess {
    /// Starts `firn serve` on free loopback ports with its data in `data_dir`, and waits
    /// until it serves (bounded).
    pub fn start(data_dir: &Path, extra: &[&str]) -> FirnProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_firn"))
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args([
                "--resp-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--peer-addr",
                "127.0.0.1:0",
            ])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn firn");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("firn serving:") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("firn did not start within 60 s");
        // "firn serving: redis-cli -p PORT   |   curl http://ADDR/v1/kv/hello"
        let resp_port = line
            .split("-p ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap();
        let http_addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap()
            .to_string();
        let peer_addr = line
            .split("peers ")
            .nth(1)
            .map(|r| r.trim().to_string())
            .unwrap_or_default();
        FirnProcess {
            child,
            resp_port,
            http_addr,
            peer_addr,
        }
    }

    pub fn resp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.resp_port)
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill_9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().unwrap();
    }
}

impl Drop for FirnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
