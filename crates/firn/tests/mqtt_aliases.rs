//! MQTT 5.0 topic aliases a client sets: they name its topics in later PUBLISHes on that
//! connection; an invalid one closes the connection with DISCONNECT 0x94 and stores nothing.
//! And those the server sets: a client that takes aliases gets one for each of its first
//! topics, then the alias alone.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::mqtt::{
    Node, connect_v5_with, connected_at, log_records, publish, python, read_n, read_packet, redis,
    start,
};

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

/// A raw 5.0 subscriber on `port` to `filter` at QoS 0, its CONNECT's Topic Alias Maximum
/// `alias_max` (0: none said).
fn raw_subscriber(port: u16, client: &str, alias_max: u16, filter: &str) -> TcpStream {
    let mut properties = Vec::new();
    if alias_max > 0 {
        // Topic Alias Maximum (0x22).
        properties.push(0x22);
        properties.extend(alias_max.to_be_bytes());
    }
    let (mut s, _) = connected_at(port, &connect_v5_with(client, &properties, None));
    // SUBSCRIBE: packet id 1, no properties, the filter at QoS 0.
    let mut body = vec![0, 1, 0];
    body.extend(u16::try_from(filter.len()).unwrap().to_be_bytes());
    body.extend(filter.as_bytes());
    body.push(0);
    let mut packet = vec![0x82, u8::try_from(body.len()).unwrap()];
    packet.extend(body);
    s.write_all(&packet).unwrap();
    assert_eq!(read_packet(&mut s).0, 0x90, "SUBACK");
    s
}

/// A QoS 0 PUBLISH read from `s`: its topic (empty when its alias stands for it) and its
/// Topic Alias, if it has one (the only property Firn sends).
fn read_publish(s: &mut TcpStream) -> (String, Option<u16>) {
    let (kind, body) = read_packet(s);
    assert_eq!(kind & 0xf0, 0x30, "PUBLISH: {kind:x} {body:x?}");
    let topic_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
    let topic = String::from_utf8(body[2..2 + topic_len].to_vec()).unwrap();
    // QoS 0: no packet id; then the properties' length (one byte here) and the properties.
    let properties = &body[3 + topic_len..3 + topic_len + usize::from(body[2 + topic_len])];
    let alias = match properties {
        [] => None,
        [0x23, hi, lo] => Some(u16::from_be_bytes([*hi, *lo])),
        other => panic!("properties {other:x?}"),
    };
    (topic, alias)
}

/// A paho-mqtt (Python) client at 5.0 that takes 2 topic aliases (its CONNECT's Topic Alias
/// Maximum), subscribes to `pa/#`, publishes one message to each topic of its argument (a
/// JSON list) at QoS 1, and prints, as JSON, the topic and Topic Alias of each message it
/// got back, as paho read them (paho does not resolve aliases). Arguments: PORT TOPICS.
const PAHO_ALIASED_SUBSCRIBER: &str = r#"
import json, sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

port, topics = int(sys.argv[1]), json.loads(sys.argv[2])
got, done, subscribed = [], threading.Event(), threading.Event()

def on_message(client, userdata, m):
    got.append([m.topic, getattr(m.properties, "TopicAlias", None)])
    if len(got) == len(topics):
        done.set()

c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
c.on_message = on_message
c.on_subscribe = lambda *args: subscribed.set()
connect = Properties(PacketTypes.CONNECT)
connect.TopicAliasMaximum = 2
c.connect("127.0.0.1", port, properties=connect)
c.loop_start()
c.subscribe("pa/#", qos=0)
assert subscribed.wait(10), "no SUBACK"
for topic in topics:
    c.publish(topic, "m", qos=1).wait_for_publish(10)
done.wait(10)
c.disconnect()
c.loop_stop()
print(json.dumps(got))
"#;

#[test]
fn a_client_that_takes_topic_aliases_gets_one_for_each_of_its_first_topics() {
    let node = start();
    let port = node.mqtt_port;
    // A raw subscriber that takes 2 aliases, and one that takes none.
    let mut two = raw_subscriber(port, "takes2", 2, "al/#");
    let mut none = raw_subscriber(port, "takes0", 0, "al/#");
    let topics = ["al/a", "al/a", "al/b", "al/c", "al/c", "al/a"];
    for topic in topics {
        let (ok, said) = publish(&node, &["-t", topic, "-m", "m", "-q", "1"]);
        assert!(ok, "{said}");
    }
    // The first two topics get aliases 1 and 2, set with their first delivery and alone
    // after it; the third goes in full, past the client's maximum.
    let expected = [
        ("al/a", Some(1)),
        ("", Some(1)),
        ("al/b", Some(2)),
        ("al/c", None),
        ("al/c", None),
        ("", Some(1)),
    ];
    let got: Vec<(String, Option<u16>)> = (0..6).map(|_| read_publish(&mut two)).collect();
    let got: Vec<(&str, Option<u16>)> = got.iter().map(|(t, a)| (t.as_str(), *a)).collect();
    assert_eq!(got, expected);
    // A client that takes none gets every topic in full.
    for topic in topics {
        assert_eq!(read_publish(&mut none), (topic.to_owned(), None));
    }
    // paho reads the same from the packets Firn sends.
    let topics: Vec<String> = topics.iter().map(|t| t.replace("al/", "pa/")).collect();
    let said = python(
        PAHO_ALIASED_SUBSCRIBER,
        &[&port.to_string(), &serde_json::to_string(&topics).unwrap()],
    );
    let said: serde_json::Value = serde_json::from_slice(&said).expect("paho's JSON");
    let expected: Vec<(String, Option<u16>)> = expected
        .iter()
        .map(|(t, a)| (t.replace("al/", "pa/"), *a))
        .collect();
    assert_eq!(said, serde_json::json!(expected));
}
