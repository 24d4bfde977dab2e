//! The MQTT face as the tests reach it: a node with an MQTT listener, Debian's
//! `mosquitto_pub` and `mosquitto_sub` run against it, a Redis connection to look at what was
//! stored, paho-mqtt (Python) scripts, and raw packets read back.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{FirnProcess, free_ports};

/// A node serving MQTT, and its data directory (removed when dropped).
pub struct Node {
    pub process: FirnProcess,
    pub mqtt_port: u16,
    pub _dir: tempfile::TempDir,
}

/// A node of its own, MQTT on a free port.
pub fn start() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1)[0];
    let addr = format!("127.0.0.1:{port}");
    let process = FirnProcess::start(dir.path(), &["--mqtt-addr", &addr]);
    Node {
        process,
        mqtt_port: port,
        _dir: dir,
    }
}

/// A Redis connection to `node`.
pub fn redis(node: &Node) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{}/", node.process.resp_addr())).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

/// `mosquitto_pub` with `args`: its exit status and what it said.
pub fn publish(node: &Node, args: &[&str]) -> (bool, String) {
    let out = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
        .args(args)
        .output()
        .expect("mosquitto_pub (Debian's mosquitto-clients)");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// A `mosquitto_sub` running in the background, printing `topic payload` lines.
pub struct Sub {
    child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Sub {
    pub fn start(node: &Node, args: &[&str]) -> Sub {
        let mut child = Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string(), "-v"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("mosquitto_sub (Debian's mosquitto-clients)");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Sub { child, lines }
    }

    /// The next line, within 10 s.
    pub fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(10))
            .expect("mosquitto_sub printed nothing within 10 s")
    }

    pub fn nothing_for(&self, d: Duration) -> bool {
        self.lines.recv_timeout(d).is_err()
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mosquitto_pub -l`: each of `lines` a QoS 1 message to `topic`, over one connection;
/// true once every one was acknowledged.
pub fn publish_lines(node: &Node, topic: &str, lines: &[String]) -> bool {
    let mut child = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
        .args(["-t", topic, "-q", "1", "-l"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("mosquitto_pub (Debian's mosquitto-clients)");
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    child.wait().unwrap().success()
}

/// Reads exactly `n` bytes from `stream` (bounded by its read timeout).
pub fn read_n(stream: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    stream
        .read_exact(&mut buf)
        .expect("an answer from the broker");
    buf
}

/// Runs the Python `script` (paho-mqtt 2.x at hand) with `args`: what it printed.
pub fn python(script: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 with paho-mqtt 2.x");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The records of the `mqtt` log under topic `topic`'s key (none before the log's first).
pub fn log_records(r: &mut redis::Connection, topic: &str) -> usize {
    let records = redis::cmd("FIRN.LOG")
        .arg("RANGE")
        .arg("mqtt")
        .arg(format!("mqtt/{topic}"))
        .arg("-")
        .arg("+")
        .query::<Vec<redis::Value>>(r);
    match records {
        Ok(records) => records.len(),
        Err(e) if e.code() == Some("NOLOG") => 0,
        Err(e) => panic!("FIRN.LOG RANGE: {e}"),
    }
}
