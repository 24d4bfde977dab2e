//! MQTT 5.0 topic aliases a client sets: they name its topics in later PUBLISHes on that
//! connection; an invalid one closes the connection with DISCONNECT 0x94 and stores nothing.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::mqtt::{Node, log_records, publish, python, read_n, redis, start};

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

/// What [`PAHO_PUBLISHER`] said for `steps`.
fn paho_publish(node: &Node, steps: &[(&str, u16)]) -> serde_json::Value {
    let steps = serde_json::to_string(steps).unwrap();
    let said = python(PAHO_PUBLISHER, &[&node.mqtt_port.to_string(), &steps]);
    serde_json::from_slice(&said).expect("paho's JSON")
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
