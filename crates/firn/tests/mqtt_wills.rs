//! MQTT wills: published when a client goes without DISCONNECT, not after one; a 5.0 will
//! waits out its delay (or its session's expiry) unless the client comes back first, and
//! DISCONNECT "with Will Message" publishes it.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::mqtt::{Sub, log_records, publish, python, redis, start};
use common::wait_until;

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
