//! A cluster of real `firn` processes for one soak run. Node `i`'s peer traffic is on its own
//! loopback address (its outgoing peer connections leave from it too), so firewall rules can
//! cut any two nodes apart; its data is on its own small tmpfs when the soak may mount one,
//! so its disk can be filled; its clock can be shifted through an offset file; its log goes
//! to a file in the run's directory.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Shards of the soak's cluster: every fault then meets several Raft groups.
pub const SHARDS: u32 = 3;
/// Size of a node's tmpfs: room for a run's data, the disk reserve and a little more.
const DISK_MIB: u64 = 1024;
/// How long a node may take to start serving.
const START_MAX: Duration = Duration::from_secs(60);

pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    peers: String,
    nodes: Vec<Node>,
    /// Each node's data is on a tmpfs of its own (mounting needs root).
    pub tmpfs: bool,
}

struct Node {
    ip: String,
    resp: u16,
    http: u16,
    peer: u16,
    data: PathBuf,
    process: Option<Child>,
    paused: bool,
}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n) with their peer traffic on `127.0.0.{first_ip + i}`, their
    /// files under `dir`.
    pub fn start(bin: &Path, dir: &Path, n: usize, first_ip: u8) -> Result<Cluster, String> {
        let mut nodes = Vec::with_capacity(n);
        let mut tmpfs = true;
        for i in 0..n {
            let ip = format!("127.0.0.{}", first_ip as usize + i);
            let [resp, http] = free_ports("127.0.0.1", 2)[..] else {
                unreachable!()
            };
            let peer = free_ports(&ip, 1)[0];
            let data = dir.join(format!("node-{}", i + 1));
            std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
            tmpfs &= mount_tmpfs(&data);
            nodes.push(Node {
                ip,
                resp,
                http,
                peer,
                data,
                process: None,
                paused: false,
            });
        }
        let peers = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| format!("{}={}:{}", i + 1, node.ip, node.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            peers,
            nodes,
            tmpfs,
        };
        for i in 0..n {
            cluster.restart(i)?;
        }
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn resp_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].resp)
    }

    pub fn http_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].http)
    }

    /// The loopback address node `i`'s peer traffic comes from and goes to.
    pub fn ip(&self, i: usize) -> &str {
        &self.nodes[i].ip
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].process.is_some()
    }

    pub fn is_paused(&self, i: usize) -> bool {
        self.nodes[i].paused
    }

    /// The file node `i`'s log goes to (kept across its restarts).
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node-{}.log", i + 1))
    }

    fn clock_offset_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node-{}.clock-offset", i + 1))
    }

    /// (Re)starts node `i` on its own ports and data, and waits until it serves.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.is_up(i) {
            return Ok(());
        }
        let log_path = self.log_path(i);
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let _ = writeln!(log, "---- firn-soak: node {} starts", i + 1);
        let node = &self.nodes[i];
        let mut child = Command::new(&self.bin)
            .arg("serve")
            .arg("--data-dir")
            .arg(&node.data)
            .args(["--node-id", &(i + 1).to_string()])
            .args(["--peers", &self.peers])
            .args(["--shards", &SHARDS.to_string()])
            .args(["--resp-addr", &self.resp_addr(i)])
            .args(["--http-addr", &self.http_addr(i)])
            .args(["--peer-addr", &format!("{}:{}", node.ip, node.peer)])
            .arg("--clock-offset-file")
            .arg(self.clock_offset_path(i))
            .env(
                "RUST_LOG",
                std::env::var("FIRN_SOAK_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(log.try_clone().map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.bin.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("firn serving:") {
                    let _ = tx.send(());
                }
                let _ = writeln!(log, "{line}");
            }
        });
        let node = &mut self.nodes[i];
        node.paused = false;
        if rx.recv_timeout(START_MAX).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "node {} did not start within {START_MAX:?} (its log: {})",
                i + 1,
                log_path.display()
            ));
        }
        node.process = Some(child);
        Ok(())
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill_9(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.nodes[i].paused = false;
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`).
    pub fn pause(&mut self, i: usize, paused: bool) {
        let node = &mut self.nodes[i];
        if let Some(child) = &node.process {
            let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on our own child's pid, which we have not reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            node.paused = paused;
        }
    }

    /// Shifts node `i`'s clock by `ms` (the node reads the file four times a second).
    pub fn set_clock_offset(&self, i: usize, ms: i64) {
        let _ = std::fs::write(self.clock_offset_path(i), ms.to_string());
    }

    fn ballast_path(&self, i: usize) -> PathBuf {
        self.nodes[i].data.join("soak-ballast")
    }

    /// Fills node `i`'s disk to below its reserve (only on a tmpfs of its own); whether it did.
    pub fn fill_disk(&self, i: usize) -> bool {
        if !self.tmpfs {
            return false;
        }
        let Some(free) = free_bytes(&self.nodes[i].data) else {
            return false;
        };
        let leave = firn_node::disk::DISK_RESERVE_BYTES_DEFAULT / 2;
        let Some(ballast) = free.checked_sub(leave) else {
            return true;
        };
        Command::new("fallocate")
            .args(["-l", &ballast.to_string()])
            .arg(self.ballast_path(i))
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn free_disk(&self, i: usize) {
        let _ = std::fs::remove_file(self.ballast_path(i));
    }

    pub fn cluster_json(&self, i: usize) -> Option<Value> {
        if !self.is_up(i) || self.is_paused(i) {
            return None;
        }
        ureq::get(&format!("http://{}/v1/cluster", self.http_addr(i)))
            .timeout(Duration::from_secs(2))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    /// The leader of each shard as node `i` sees it.
    pub fn leaders(&self, i: usize) -> Vec<Option<u64>> {
        self.cluster_json(i)
            .and_then(|j| {
                Some(
                    j["shards"]
                        .as_array()?
                        .iter()
                        .map(|s| s["leader"].as_u64())
                        .collect(),
                )
            })
            .unwrap_or_default()
    }

    /// Every node runs, answers, knows a leader for each of its shards, and none of its
    /// replicas is still recovering (a memory replica copying its state back).
    pub fn settled(&self) -> bool {
        (0..self.len()).all(|i| {
            self.cluster_json(i).is_some_and(|view| {
                view["shards"].as_array().is_some_and(|shards| {
                    shards
                        .iter()
                        .all(|s| s["leader"].as_u64().is_some() && s["recovering"] != true)
                })
            })
        })
    }

    /// Waits (bounded) until [`settled`](Self::settled).
    pub fn wait_settled(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.settled() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.pause(i, false);
            self.kill_9(i);
            if self.tmpfs {
                let _ = Command::new("umount").arg(&self.nodes[i].data).status();
            }
        }
    }
}

/// Mounts a tmpfs of its own on `dir`; whether it could (it needs root).
fn mount_tmpfs(dir: &Path) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={DISK_MIB}m"), "tmpfs"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// Free ports on `ip` (and on 127.0.0.1), found by binding them, below the kernel's ephemeral
/// range (a port picked there can be taken by an outgoing connection before the node binds
/// it). A small race with other programs remains, which tests and the soak accept.
pub fn free_ports(ip: &str, n: usize) -> Vec<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(1_009);
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (LOW + base.wrapping_add(i) % SPAN) as u16;
        if std::net::TcpListener::bind((ip, port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            ports.push(port);
        }
    }
    ports
}
