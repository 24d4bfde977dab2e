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

/// A node's data directory and ports, to start it on (again, after a kill).
pub struct Restartable {
    dir: tempfile::TempDir,
    ports: Vec<u16>,
}

impl Restartable {
    pub fn new() -> Restartable {
        Restartable {
            dir: tempfile::tempdir().unwrap(),
            ports: free_ports(4),
        }
    }

    /// The node, started on the directory and ports (RESP, HTTP, peers, MQTT).
    pub fn start(&self) -> Node {
        let addr = |i: usize| format!("127.0.0.1:{}", self.ports[i]);
        let args = [
            "--resp-addr".to_owned(),
            addr(0),
            "--http-addr".to_owned(),
            addr(1),
            "--peer-addr".to_owned(),
            addr(2),
            "--mqtt-addr".to_owned(),
            addr(3),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Node {
            process: FirnProcess::start_with(self.dir.path(), &args),
            mqtt_port: self.ports[3],
            _dir: tempfile::tempdir().unwrap(),
        }
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
    publish_at(node.mqtt_port, args)
}

/// [`publish`] to the MQTT listener on port `mqtt_port`.
pub fn publish_at(mqtt_port: u16, args: &[&str]) -> (bool, String) {
    let out = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &mqtt_port.to_string()])
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
        Sub::start_at(node.mqtt_port, args)
    }

    /// [`Sub::start`] on the MQTT listener on port `mqtt_port`.
    pub fn start_at(mqtt_port: u16, args: &[&str]) -> Sub {
        let mut child = Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &mqtt_port.to_string(), "-v"])
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

/// A `mosquitto_sub` on the MQTT listener on port `mqtt_port` with `args` (a filter that
/// matches `probe`), once a message to topic `probe` has reached it (tried for 20 s at
/// most). Probes sent again may still come after.
pub fn subscribed_at(mqtt_port: u16, args: &[&str], probe: &str) -> Sub {
    let sub = Sub::start_at(mqtt_port, args);
    assert!(
        super::wait_until(Duration::from_secs(20), || {
            publish_at(mqtt_port, &["-t", probe, "-m", "probe", "-q", "1"]);
            sub.lines.recv_timeout(Duration::from_millis(300)).is_ok()
        }),
        "the subscriber never got a probe"
    );
    sub
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

/// A 5.0 CONNECT (keep-alive 60 s, Clean Start 0) for `client`, its Session Expiry Interval
/// `expiry_s`, with a will `(topic, payload, Will Delay Interval in s)` at QoS 1 if given.
pub fn connect_v5(client: &str, expiry_s: u32, will: Option<(&str, &str, u32)>) -> Vec<u8> {
    // Session Expiry Interval (0x11).
    let mut properties = vec![0x11];
    properties.extend(expiry_s.to_be_bytes());
    connect_v5_with(client, &properties, will)
}

/// [`connect_v5`] with the CONNECT's `properties` (their bytes, without their length).
pub fn connect_v5_with(
    client: &str,
    properties: &[u8],
    will: Option<(&str, &str, u32)>,
) -> Vec<u8> {
    let string = |s: &str| {
        let mut b = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
        b.extend_from_slice(s.as_bytes());
        b
    };
    let mut body = string("MQTT");
    // Level 5; flags: the will and its QoS 1, or none.
    body.extend([5, if will.is_some() { 0x0c } else { 0x00 }, 0, 60]);
    body.push(u8::try_from(properties.len()).expect("short properties"));
    body.extend(properties);
    body.extend(string(client));
    if let Some((topic, payload, delay_s)) = will {
        // Will properties: Will Delay Interval (0x18).
        body.extend([5, 0x18]);
        body.extend(delay_s.to_be_bytes());
        body.extend(string(topic));
        body.extend(string(payload));
    }
    let mut packet = vec![0x10, u8::try_from(body.len()).expect("a short CONNECT")];
    assert!(body.len() < 128, "one byte of remaining length");
    packet.extend(body);
    packet
}

/// Reads one whole packet from `stream` (bounded by its read timeout): its first byte and
/// what follows its remaining length.
pub fn read_packet(stream: &mut std::net::TcpStream) -> (u8, Vec<u8>) {
    let kind = read_n(stream, 1)[0];
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let b = read_n(stream, 1)[0];
        len |= usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    (kind, read_n(stream, len))
}

/// A raw connection to the MQTT listener on `port` that sent `connect`: its CONNACK's
/// session present flag (the CONNECT accepted).
pub fn connected_at(port: u16, connect: &[u8]) -> (std::net::TcpStream, bool) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(connect).unwrap();
    let (kind, connack) = read_packet(&mut s);
    assert_eq!(kind, 0x20, "CONNACK");
    assert_eq!(connack[1], 0, "accepted: {connack:x?}");
    (s, connack[0] == 1)
}
