//! The MQTT face, with clients no one here wrote: Debian's `mosquitto_pub` and
//! `mosquitto_sub` (MQTT 3.1.1 and 5.0) against a real node. A retained PUBLISH is a version
//! of its key, seen by Redis clients; a subscriber with wildcards gets the retained messages
//! first, then live ones — from MQTT publishers and from Redis PUBLISH alike; a message
//! without retain is a record of the `mqtt` log under its topic's key; a QoS 1 PUBLISH is
//! acknowledged once written, and one over the value limit is refused with its reason and
//! stores nothing; malformed packets close only their own connection.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{FirnProcess, free_ports, wait_until};

struct Node {
    process: FirnProcess,
    mqtt_port: u16,
    _dir: tempfile::TempDir,
}

fn start() -> Node {
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

fn redis(node: &Node) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{}/", node.process.resp_addr())).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

/// `mosquitto_pub` with `args`: its exit status and what it said.
fn publish(node: &Node, args: &[&str]) -> (bool, String) {
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
struct Sub {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Sub {
    fn start(node: &Node, args: &[&str]) -> Sub {
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
    fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(10))
            .expect("mosquitto_sub printed nothing within 10 s")
    }

    fn nothing_for(&self, d: Duration) -> bool {
        self.lines.recv_timeout(d).is_err()
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mosquitto_clients_publish_and_subscribe_through_keys_and_the_log() {
    let node = start();
    let mut r = redis(&node);

    // Retained, QoS 1, MQTT 3.1.1 and 5.0: versions of the topic's key.
    let (ok, said) = publish(
        &node,
        &["-t", "sensors/1/temp", "-m", "21.5", "-r", "-q", "1"],
    );
    assert!(ok, "{said}");
    let (ok, said) = publish(
        &node,
        &[
            "-t",
            "sensors/1/temp",
            "-m",
            "21.7",
            "-r",
            "-q",
            "1",
            "-V",
            "mqttv5",
        ],
    );
    assert!(ok, "{said}");
    let value: Option<String> = redis::cmd("GET")
        .arg("mqtt/sensors/1/temp")
        .query(&mut r)
        .unwrap();
    assert_eq!(value.as_deref(), Some("21.7"));
    let history: Vec<redis::Value> = redis::cmd("FIRN.HISTORY")
        .arg("mqtt/sensors/1/temp")
        .query(&mut r)
        .unwrap();
    assert_eq!(history.len(), 2, "the topic's history is the key's");
    // (At QoS 1: acknowledged once written and delivered, so that the subscriber below,
    // started after, gets them as retained messages only.)
    let (ok, _) = publish(
        &node,
        &["-t", "sensors/2/temp", "-m", "19.0", "-r", "-q", "1"],
    );
    assert!(ok);
    let (ok, _) = publish(&node, &["-t", "other/x", "-m", "no", "-r", "-q", "1"]);
    assert!(ok);

    // A subscriber with a wildcard: the retained messages it matches first...
    let sub = Sub::start(&node, &["-t", "sensors/+/temp", "-q", "1"]);
    let mut retained = vec![sub.next(), sub.next()];
    retained.sort();
    assert_eq!(retained, ["sensors/1/temp 21.7", "sensors/2/temp 19.0"]);
    if let Ok(extra) = sub.lines.recv_timeout(Duration::from_millis(300)) {
        panic!("only what the filter matches, not {extra:?}");
    }
    // ...then live ones: MQTT without retain (a record of the log), and Redis PUBLISH.
    let (ok, said) = publish(&node, &["-t", "sensors/3/temp", "-m", "live", "-q", "1"]);
    assert!(ok, "{said}");
    assert_eq!(sub.next(), "sensors/3/temp live");
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg("mqtt/sensors/4/temp")
        .arg("from redis")
        .query(&mut r)
        .unwrap();
    assert!(receivers >= 1);
    assert_eq!(sub.next(), "sensors/4/temp from redis");
    let (ok, _) = publish(&node, &["-t", "sensors/5/humidity", "-m", "not matched"]);
    assert!(ok);
    assert!(sub.nothing_for(Duration::from_millis(300)));
    // The message without retain is in the log, under its topic's key; no key was written.
    let records: Vec<redis::Value> = redis::cmd("FIRN.LOG")
        .arg("RANGE")
        .arg("mqtt")
        .arg("mqtt/sensors/3/temp")
        .arg("-")
        .arg("+")
        .query(&mut r)
        .unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    let none: Option<String> = redis::cmd("GET")
        .arg("mqtt/sensors/3/temp")
        .query(&mut r)
        .unwrap();
    assert_eq!(none, None);

    // An MQTT message reaches a Redis subscriber.
    let mut pubsub_con = redis(&node);
    let mut pubsub = pubsub_con.as_pubsub();
    pubsub.subscribe("mqtt/alerts/door").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (ok, _) = publish(&node, &["-t", "alerts/door", "-m", "open"]);
    assert!(ok);
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "open");
    drop(pubsub);

    // An empty retained message deletes the key (the tombstone is a version).
    let (ok, _) = publish(&node, &["-t", "sensors/2/temp", "-n", "-r", "-q", "1"]);
    assert!(ok);
    let gone: Option<String> = redis::cmd("GET")
        .arg("mqtt/sensors/2/temp")
        .query(&mut r)
        .unwrap();
    assert_eq!(gone, None);

    // Over the value limit (1 MiB by default), MQTT 5.0 at QoS 1: refused with its reason
    // in the PUBACK (mosquitto_pub warns "Quota exceeded"), nothing stored; over the largest
    // packet the CONNACK announces, the client does not even send it.
    let big = tempfile::NamedTempFile::new().unwrap();
    for (size, says) in [((1 << 20) + 1_000, Some("quota exceeded")), (2 << 20, None)] {
        std::fs::write(big.path(), vec![b'x'; size]).unwrap();
        let file = big.path().to_str().unwrap();
        let (_, said) = publish(
            &node,
            &["-t", "big/one", "-f", file, "-r", "-q", "1", "-V", "mqttv5"],
        );
        if let Some(says) = says {
            assert!(said.to_lowercase().contains(says), "{size} bytes: {said}");
        }
        let big_value: Option<String> =
            redis::cmd("GET").arg("mqtt/big/one").query(&mut r).unwrap();
        assert_eq!(big_value, None, "{size} bytes");
    }

    // Malformed input closes that connection only; the node goes on.
    for garbage in [
        &b"\x10\x02\x00\x04"[..],                             // a CONNECT cut short
        &b"\x10\x0c\x00\x04MQTT\x09\x02\x00\x3c\x00\x00"[..], // an unknown protocol level
        &b"\xff\xff\xff\xff\xff"[..],                         // no packet at all
    ] {
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", node.mqtt_port)).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(12))).unwrap();
        raw.write_all(garbage).unwrap();
        let started = Instant::now();
        let mut sink = [0u8; 64];
        let closed = loop {
            match raw.read(&mut sink) {
                Ok(0) | Err(_) => break true,
                Ok(_) => continue,
            }
        };
        assert!(closed && started.elapsed() < Duration::from_secs(12));
    }
    let (ok, said) = publish(&node, &["-t", "still/up", "-m", "yes", "-r", "-q", "1"]);
    assert!(ok, "{said}");
    assert!(wait_until(Duration::from_secs(5), || {
        redis::cmd("GET")
            .arg("mqtt/still/up")
            .query::<Option<String>>(&mut r)
            .ok()
            .flatten()
            .as_deref()
            == Some("yes")
    }));
}

#[test]
fn mqtt_clients_sign_in_as_users_and_act_within_their_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.toml");
    std::fs::write(
        &users,
        "[users.alice]\npassword = \"wonderland\"\nread = [\"mqtt/\"]\nwrite = [\"mqtt/sensors/\"]\n\n\
         [users.bob]\npassword = \"builder\"\nread = [\"mqtt/sensors/\"]\nwrite = []\n",
    )
    .unwrap();
    let port = free_ports(1)[0];
    let addr = format!("127.0.0.1:{port}");
    let data = tempfile::tempdir().unwrap();
    let process = FirnProcess::start(
        data.path(),
        &["--mqtt-addr", &addr, "--users", users.to_str().unwrap()],
    );
    let node = Node {
        process,
        mqtt_port: port,
        _dir: data,
    };
    let as_user = |user: &str, pass: &str, rest: &[&str]| {
        let mut args = vec!["-u", user, "-P", pass];
        args.extend_from_slice(rest);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        publish(&node, &refs)
    };
    // No user, or a wrong password: refused at CONNECT.
    let (ok, said) = publish(&node, &["-t", "sensors/1", "-m", "x", "-q", "1"]);
    assert!(!ok && said.to_lowercase().contains("not authori"), "{said}");
    let (ok, said) = run(as_user(
        "alice",
        "nope",
        &["-t", "sensors/1", "-m", "x", "-q", "1"],
    ));
    assert!(!ok && said.to_lowercase().contains("password"), "{said}");
    // Alice writes under sensors/, retained or not.
    let (ok, said) = run(as_user(
        "alice",
        "wonderland",
        &["-t", "sensors/1", "-m", "21.5", "-r", "-q", "1"],
    ));
    assert!(ok, "{said}");
    let (ok, said) = run(as_user(
        "alice",
        "wonderland",
        &["-t", "sensors/1", "-m", "live", "-q", "1"],
    ));
    assert!(ok, "{said}");
    // Bob may not write: 5.0 tells him in the PUBACK; nothing is stored.
    let (_, said) = run(as_user(
        "bob",
        "builder",
        &[
            "-t",
            "sensors/2",
            "-m",
            "no",
            "-r",
            "-q",
            "1",
            "-V",
            "mqttv5",
        ],
    ));
    assert!(said.to_lowercase().contains("not authori"), "{said}");
    let mut r = {
        let client = redis::Client::open(format!(
            "redis://alice:wonderland@{}/",
            node.process.resp_addr()
        ))
        .unwrap();
        client.get_connection().unwrap()
    };
    let stored: Option<String> = redis::cmd("GET")
        .arg("mqtt/sensors/2")
        .query(&mut r)
        .unwrap();
    assert_eq!(stored, None);
    let stored: Option<String> = redis::cmd("GET")
        .arg("mqtt/sensors/1")
        .query(&mut r)
        .unwrap();
    assert_eq!(stored.as_deref(), Some("21.5"));
    // Bob reads what he may: the retained message under sensors/.
    let sub = Sub::start(
        &node,
        &["-u", "bob", "-P", "builder", "-t", "sensors/#", "-C", "1"],
    );
    assert_eq!(sub.next(), "sensors/1 21.5");

    // A persistent session is its user's: Bob may not take Alice's by its client id.
    let subscribe_for = |user: &str, pass: &str| {
        Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
            .args(["-u", user, "-P", pass, "-c", "-i", "shared", "-q", "1"])
            .args(["-t", "sensors/#", "-W", "1"])
            .output()
            .unwrap()
    };
    let alice = subscribe_for("alice", "wonderland");
    assert!(
        !String::from_utf8_lossy(&alice.stderr).contains("refused"),
        "{alice:?}"
    );
    let bob = subscribe_for("bob", "builder");
    let said = String::from_utf8_lossy(&bob.stdout).to_lowercase()
        + &String::from_utf8_lossy(&bob.stderr).to_lowercase();
    assert!(said.contains("not authori"), "{said}");
}

/// `mosquitto_pub -l`: each of `lines` a QoS 1 message to `topic`, over one connection;
/// true once every one was acknowledged.
fn publish_lines(node: &Node, topic: &str, lines: &[String]) -> bool {
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

#[test]
fn a_persistent_subscriber_gets_what_it_missed_even_across_a_node_kill() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(4);
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);
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
    let start = || Node {
        process: FirnProcess::start_with(dir.path(), &args),
        mqtt_port: ports[3],
        _dir: tempfile::tempdir().unwrap(),
    };
    let node = start();
    // A QoS 1 subscriber with a session that outlives its connection (`-c`: clean
    // session 0), known once a probe reaches it.
    let keeper = ["-c", "-i", "keeper", "-q", "1", "-t", "plant/#"];
    let sub = Sub::start(&node, &keeper);
    assert!(
        wait_until(Duration::from_secs(10), || {
            publish(&node, &["-t", "plant/probe", "-m", "p", "-q", "1"]);
            sub.lines.recv_timeout(Duration::from_millis(300)).is_ok()
        }),
        "the subscriber never got a probe"
    );
    // It goes away (killed: no DISCONNECT), and misses messages on two topics...
    drop(sub);
    let sent = |topic: &str| -> Vec<String> { (0..50).map(|i| format!("{topic}-{i}")).collect() };
    for topic in ["a", "b"] {
        assert!(publish_lines(
            &node,
            &format!("plant/{topic}"),
            &sent(topic)
        ));
    }
    // ...and the node is killed and started again before it comes back.
    node.process.kill_9();
    let node = start();
    let sub = Sub::start(&node, &keeper);
    let mut got: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    while got.values().map(Vec::len).sum::<usize>() < 100 {
        let line = sub.next();
        let (topic, payload) = line.split_once(' ').unwrap();
        if topic == "plant/probe" {
            continue; // given again: QoS 1 is at least once
        }
        let seen = got.entry(topic.to_owned()).or_default();
        if !seen.contains(&payload.to_owned()) {
            seen.push(payload.to_owned());
        }
    }
    assert_eq!(
        got["plant/a"],
        sent("a"),
        "every message, in order per topic"
    );
    assert_eq!(
        got["plant/b"],
        sent("b"),
        "every message, in order per topic"
    );
}

#[test]
fn a_clients_will_is_published_when_it_goes_without_disconnect() {
    let node = start();
    let sub = Sub::start(&node, &["-t", "status/#", "-q", "1"]);
    // A device with a will, keeping its connection open (`-l` reads stdin)...
    let device = |id: &str| {
        Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
            .args(["-i", id, "-t", "telemetry", "-l", "-q", "1"])
            .args(["--will-topic", &format!("status/{id}")])
            .args([
                "--will-payload",
                "offline",
                "--will-qos",
                "1",
                "--will-retain",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .expect("mosquitto_pub (Debian's mosquitto-clients)")
    };
    let mut first = device("dev1");
    let mut stdin = first.stdin.take().unwrap();
    writeln!(stdin, "hello").unwrap();
    let mut r = redis(&node);
    assert!(wait_until(Duration::from_secs(10), || {
        redis::cmd("FIRN.LOG")
            .arg("RANGE")
            .arg("mqtt")
            .arg("mqtt/telemetry")
            .arg("-")
            .arg("+")
            .query::<Vec<redis::Value>>(&mut r)
            .is_ok_and(|v| !v.is_empty())
    }));
    assert!(
        sub.nothing_for(Duration::from_millis(300)),
        "no will while connected"
    );
    // ...dropped without DISCONNECT (killed): its will is published, retained.
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(sub.next(), "status/dev1 offline");
    let retained: Option<String> = redis::cmd("GET")
        .arg("mqtt/status/dev1")
        .query(&mut r)
        .unwrap();
    assert_eq!(retained.as_deref(), Some("offline"));
    // One that says DISCONNECT leaves no will.
    let mut second = device("dev2");
    drop(second.stdin.take());
    assert!(second.wait().unwrap().success());
    assert!(
        sub.nothing_for(Duration::from_millis(500)),
        "a will after a clean DISCONNECT"
    );
    drop(stdin);
}

/// Reads exactly `n` bytes from `stream` (bounded by its read timeout).
fn read_n(stream: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    stream
        .read_exact(&mut buf)
        .expect("an answer from the broker");
    buf
}

#[test]
fn a_qos_2_publish_is_written_once_even_when_sent_again_before_its_release() {
    let node = start();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.mqtt_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // CONNECT (3.1.1, clean session, keep-alive 60, client id "q2").
    s.write_all(b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02q2")
        .unwrap();
    assert_eq!(read_n(&mut s, 4), b"\x20\x02\x00\x00", "CONNACK accepted");
    // PUBLISH QoS 2 to "t", packet id 7, then the same again with DUP (its PUBREC "lost").
    s.write_all(b"\x34\x06\x00\x01t\x00\x07x").unwrap();
    assert_eq!(read_n(&mut s, 4), b"\x50\x02\x00\x07", "PUBREC");
    s.write_all(b"\x3c\x06\x00\x01t\x00\x07x").unwrap();
    assert_eq!(read_n(&mut s, 4), b"\x50\x02\x00\x07", "PUBREC again");
    // PUBREL: PUBCOMP. The id is free again: a new message with it is a new message.
    s.write_all(b"\x62\x02\x00\x07").unwrap();
    assert_eq!(read_n(&mut s, 4), b"\x70\x02\x00\x07", "PUBCOMP");
    s.write_all(b"\x34\x06\x00\x01t\x00\x07y").unwrap();
    assert_eq!(read_n(&mut s, 4), b"\x50\x02\x00\x07", "PUBREC of the next");
    s.write_all(b"\x62\x02\x00\x07").unwrap();
    assert_eq!(
        read_n(&mut s, 4),
        b"\x70\x02\x00\x07",
        "PUBCOMP of the next"
    );
    let mut r = redis(&node);
    let records: Vec<redis::Value> = redis::cmd("FIRN.LOG")
        .arg("RANGE")
        .arg("mqtt")
        .arg("mqtt/t")
        .arg("-")
        .arg("+")
        .query(&mut r)
        .unwrap();
    assert_eq!(records.len(), 2, "x once, then y: {records:?}");
    // And mosquitto_pub at QoS 2 goes through the whole exchange.
    let (ok, said) = publish(&node, &["-t", "t2", "-m", "z", "-q", "2", "-V", "mqttv5"]);
    assert!(ok, "{said}");
}

#[test]
fn a_second_connection_with_a_client_id_takes_it_over() {
    let node = start();
    let connect = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", node.mqtt_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // CONNECT (3.1.1, clean session, keep-alive 60, client id "twin").
        s.write_all(b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04twin")
            .unwrap();
        assert_eq!(read_n(&mut s, 4), b"\x20\x02\x00\x00", "CONNACK accepted");
        s
    };
    let mut first = connect();
    let mut second = connect();
    // The first is closed (end of stream); the second goes on.
    let mut rest = Vec::new();
    first
        .read_to_end(&mut rest)
        .expect("the first connection is closed");
    second.write_all(b"\xc0\x00").unwrap();
    assert_eq!(
        read_n(&mut second, 2),
        b"\xd0\x00",
        "PINGRESP on the second"
    );
}

/// A paho-mqtt (Python) client at MQTT 5.0 that publishes, at QoS 1, one message per step
/// `(topic, alias)` (its payload `m{i}`), each once the one before was acknowledged or the
/// connection closed. It prints, as JSON, the Topic Alias Maximum of the CONNACK, the
/// reason code of each PUBACK, and that of the DISCONNECT that ended the connection (the
/// server's, or 0 for its own at the end).
const PAHO_PUBLISHER: &str = r#"
import json, sys, threading, time
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

port, steps = int(sys.argv[1]), json.loads(sys.argv[2])
said = {"alias_max": None, "acks": [], "disconnect": None}
connected, gone = threading.Event(), threading.Event()

def on_connect(client, userdata, flags, reason, props):
    said["alias_max"] = getattr(props, "TopicAliasMaximum", 0)
    connected.set()

def on_publish(client, userdata, mid, reason, props):
    said["acks"].append(reason.value)

def on_disconnect(client, userdata, flags, reason, props):
    said["disconnect"] = reason.value
    gone.set()

c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
c.on_connect, c.on_publish, c.on_disconnect = on_connect, on_publish, on_disconnect
c.connect("127.0.0.1", port)
c.loop_start()
connected.wait(10)
for i, (topic, alias) in enumerate(steps):
    props = Properties(PacketTypes.PUBLISH)
    props.TopicAlias = alias
    c.publish(topic, f"m{i}", qos=1, properties=props)
    deadline = time.time() + 10
    while len(said["acks"]) <= i and not gone.is_set() and time.time() < deadline:
        time.sleep(0.02)
    if gone.is_set():
        break
if not gone.is_set():
    c.disconnect()
    gone.wait(10)
c.loop_stop()
print(json.dumps(said))
"#;

/// Runs the Python `script` (paho-mqtt 2.x at hand) with `args`: what it printed.
fn python(script: &str, args: &[&str]) -> Vec<u8> {
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

/// What [`PAHO_PUBLISHER`] said for `steps`.
fn paho_publish(node: &Node, steps: &[(&str, u16)]) -> serde_json::Value {
    let steps = serde_json::to_string(steps).unwrap();
    let said = python(PAHO_PUBLISHER, &[&node.mqtt_port.to_string(), &steps]);
    serde_json::from_slice(&said).expect("paho's JSON")
}

/// The records of the `mqtt` log under topic `topic`'s key (none before the log's first).
fn log_records(r: &mut redis::Connection, topic: &str) -> usize {
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

#[test]
fn a_topic_alias_set_by_a_client_names_its_topic_in_later_publishes() {
    let node = start();
    let mut r = redis(&node);
    // mosquitto_pub at 5.0 with an alias sends the topic once, then only the alias.
    let mut child = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
        .args(["-V", "mqttv5", "-t", "aliased/m", "-q", "1", "-l"])
        .args(["-D", "publish", "topic-alias", "3"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mosquitto_pub (Debian's mosquitto-clients)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\nthree\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("failed"), "{said}");
    assert_eq!(log_records(&mut r, "aliased/m"), 3);
    // paho: the CONNACK says how many aliases a client may set; alias 1 set, used, set to
    // another topic, used again; alias 64 (the last) too.
    let said = paho_publish(
        &node,
        &[
            ("aliased/p", 1),
            ("", 1),
            ("aliased/q", 1),
            ("", 1),
            ("aliased/r", 64),
            ("", 64),
        ],
    );
    assert_eq!(said["alias_max"], 64, "{said}");
    assert_eq!(
        said["acks"],
        serde_json::json!([0, 0, 0, 0, 0, 0]),
        "{said}"
    );
    assert_eq!(said["disconnect"], 0, "{said}");
    for (topic, records) in [("aliased/p", 2), ("aliased/q", 2), ("aliased/r", 2)] {
        assert_eq!(log_records(&mut r, topic), records, "{topic}");
    }
    // Aliases are per connection: the next connection has none set.
    let said = paho_publish(&node, &[("", 1)]);
    assert_eq!(said["disconnect"], 148, "{said}");
}

#[test]
fn an_invalid_topic_alias_closes_the_connection_and_stores_nothing() {
    let node = start();
    let mut r = redis(&node);
    // An empty topic with an alias not set, and an alias above the maximum: DISCONNECT
    // 0x94 "Topic Alias invalid", read by paho; what came before is written, the rest not.
    let said = paho_publish(&node, &[("bad/a", 1), ("", 2), ("bad/a", 1)]);
    assert_eq!(said["acks"], serde_json::json!([0]), "{said}");
    assert_eq!(said["disconnect"], 148, "{said}");
    let said = paho_publish(&node, &[("bad/b", 65)]);
    assert_eq!(said["acks"], serde_json::json!([]), "{said}");
    assert_eq!(said["disconnect"], 148, "{said}");
    // mosquitto_pub does not check the alias against the CONNACK's maximum either.
    let (_, said) = publish(
        &node,
        &["-V", "mqttv5", "-t", "bad/c", "-m", "x", "-q", "1"]
            .into_iter()
            .chain(["-D", "publish", "topic-alias", "65"])
            .collect::<Vec<_>>(),
    );
    assert_eq!(log_records(&mut r, "bad/a"), 1);
    assert_eq!(log_records(&mut r, "bad/b"), 0);
    assert_eq!(log_records(&mut r, "bad/c"), 0, "{said}");
    // Alias 0, which no client here will send: CONNECT (5.0, client id "z"), then a
    // PUBLISH at QoS 1 to "t" with Topic Alias 0. DISCONNECT 0x94, then the end.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.mqtt_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x01z")
        .unwrap();
    let connack = read_n(&mut s, 2);
    assert_eq!(connack[0], 0x20, "CONNACK");
    assert_eq!(
        read_n(&mut s, usize::from(connack[1]))[..2],
        [0, 0],
        "accepted"
    );
    s.write_all(b"\x32\x0a\x00\x01t\x00\x09\x03\x23\x00\x00x")
        .unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("the connection closes");
    assert_eq!(rest.first(), Some(&0xe0), "DISCONNECT: {rest:x?}");
    assert_eq!(rest.get(2), Some(&0x94), "Topic Alias invalid: {rest:x?}");
    assert_eq!(log_records(&mut r, "t"), 0);
    // The node goes on.
    let (ok, said) = publish(&node, &["-t", "bad/after", "-m", "y", "-q", "1"]);
    assert!(ok, "{said}");
    assert_eq!(log_records(&mut r, "bad/after"), 1);
}

/// A paho-mqtt (Python) client at 5.0, client id `ID`, with a will (`status/ID`, payload
/// "gone", QoS 1) of Will Delay Interval `DELAY_S` and a session expiry of `EXPIRY_S`, that
/// connects and says DISCONNECT: plain (`plain`), or "Disconnect with Will Message"
/// (`with_will`). Arguments: PORT ID DELAY_S EXPIRY_S HOW.
const PAHO_WILL: &str = r#"
import sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

port, client_id, delay_s, expiry_s, how = sys.argv[1:6]
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
will = Properties(PacketTypes.WILLMESSAGE)
will.WillDelayInterval = int(delay_s)
c.will_set(f"status/{client_id}", "gone", qos=1, properties=will)
connect = Properties(PacketTypes.CONNECT)
connect.SessionExpiryInterval = int(expiry_s)
connected = threading.Event()
c.on_connect = lambda *args: connected.set()
c.connect("127.0.0.1", int(port), properties=connect)
c.loop_start()
assert connected.wait(10), "no CONNACK"
if how == "with_will":
    c.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=4))
else:
    c.disconnect()
c.loop_stop()
"#;

#[test]
fn a_will_waits_out_its_delay_or_its_session_unless_the_client_comes_back_first() {
    let node = start();
    let sub = Sub::start(&node, &["-t", "status/#", "-q", "1"]);
    let mut r = redis(&node);
    // mosquitto_pub at 5.0 with a will of delay `delay_s`, a session of expiry `expiry_s`,
    // its connection held open (`-l`) until it is killed (no DISCONNECT).
    let mut device = |id: &str, delay_s: u32, expiry_s: u32| {
        let mut child = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &node.mqtt_port.to_string()])
            .args(["-V", "mqttv5", "-i", id, "-x", &expiry_s.to_string()])
            .args(["-t", &format!("telemetry/{id}"), "-l", "-q", "1"])
            .args([
                "--will-topic",
                &format!("status/{id}"),
                "--will-payload",
                "gone",
            ])
            .args(["-D", "will", "will-delay-interval", &delay_s.to_string()])
            .stdin(Stdio::piped())
            .spawn()
            .expect("mosquitto_pub (Debian's mosquitto-clients)");
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "hello").unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || log_records(
                &mut r,
                &format!("telemetry/{id}")
            ) > 0),
            "{id} never connected"
        );
        (child, stdin)
    };
    // Killed: the will comes after its delay (2 s), not before.
    let (mut dev, _stdin) = device("dev1", 2, 60);
    dev.kill().unwrap();
    dev.wait().unwrap();
    let gone_at = Instant::now();
    assert!(
        sub.nothing_for(Duration::from_millis(1_200)),
        "a will before its delay"
    );
    assert_eq!(sub.next(), "status/dev1 gone");
    let waited = gone_at.elapsed();
    assert!(waited >= Duration::from_millis(1_900), "{waited:?}");
    // Killed, then back (taking its session up) within the delay: no will at all.
    let (mut dev, _stdin) = device("dev2", 2, 60);
    dev.kill().unwrap();
    dev.wait().unwrap();
    let (ok, said) = publish(
        &node,
        &[
            "-V", "mqttv5", "-c", "-i", "dev2", "-x", "60", "-t", "t", "-m", "back",
        ],
    );
    assert!(ok, "{said}");
    assert!(
        sub.nothing_for(Duration::from_secs(3)),
        "a will after the client came back"
    );
    // The session ends first (expiry 1 s, delay 60 s): the will goes with it.
    let (mut dev, _stdin) = device("dev3", 60, 1);
    dev.kill().unwrap();
    dev.wait().unwrap();
    let gone_at = Instant::now();
    assert_eq!(sub.next(), "status/dev3 gone");
    let waited = gone_at.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn disconnect_with_will_message_publishes_the_will_after_its_delay() {
    let node = start();
    let sub = Sub::start(&node, &["-t", "status/#", "-q", "1"]);
    // paho at 5.0: a plain DISCONNECT leaves no will; "Disconnect with Will Message"
    // (0x04) sends it, after its delay (1 s).
    let paho = |id: &str, how: &str| {
        python(
            PAHO_WILL,
            &[&node.mqtt_port.to_string(), id, "1", "60", how],
        );
    };
    paho("dev4", "plain");
    assert!(
        sub.nothing_for(Duration::from_millis(1_500)),
        "a will after a plain DISCONNECT"
    );
    paho("dev5", "with_will");
    let gone_at = Instant::now();
    assert!(
        sub.nothing_for(Duration::from_millis(600)),
        "a will before its delay"
    );
    assert_eq!(sub.next(), "status/dev5 gone");
    assert!(gone_at.elapsed() >= Duration::from_millis(900));
}
