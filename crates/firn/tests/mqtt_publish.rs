//! The MQTT face, with clients no one here wrote: Debian's `mosquitto_pub` and
//! `mosquitto_sub` (MQTT 3.1.1 and 5.0) against a real node. A retained PUBLISH is a version
//! of its key, seen by Redis clients; a subscriber with wildcards gets the retained messages
//! first, then live ones — from MQTT publishers and from Redis PUBLISH alike; a message
//! without retain is a record of the `mqtt` log under its topic's key; a QoS 1 PUBLISH is
//! acknowledged once written, and one over the value limit is refused with its reason and
//! stores nothing; malformed packets close only their own connection. Users sign in and act
//! within their permissions; a QoS 2 PUBLISH is written once.

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::mqtt::{Node, Sub, publish, read_n, redis, start};
use common::{FirnProcess, free_ports, wait_until};

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

    // Nor may he, with its client id, close her connection or, starting clean, drop her
    // session: he is refused before anything of hers is touched.
    let alice_args = [
        "-u",
        "alice",
        "-P",
        "wonderland",
        "-c",
        "-i",
        "shared",
        "-q",
        "1",
    ];
    let alice_live = Sub::start(&node, &[&alice_args[..], &["-t", "sensors/#"]].concat());
    assert!(
        wait_until(Duration::from_secs(20), || {
            run(as_user(
                "alice",
                "wonderland",
                &["-t", "sensors/probe", "-m", "p", "-q", "1"],
            ));
            alice_live
                .lines
                .recv_timeout(Duration::from_millis(300))
                .is_ok()
        }),
        "alice's subscriber never got a probe"
    );
    let (ok, said) = run(as_user(
        "bob",
        "builder",
        &["-i", "shared", "-t", "sensors/2", "-m", "clean", "-q", "1"],
    ));
    assert!(!ok && said.to_lowercase().contains("not authori"), "{said}");
    while alice_live.lines.try_recv().is_ok() {}
    let (ok, said) = run(as_user(
        "alice",
        "wonderland",
        &["-t", "sensors/3", "-m", "still here", "-q", "1"],
    ));
    assert!(ok, "{said}");
    assert_eq!(alice_live.next(), "sensors/3 still here");
    drop(alice_live);
    let (ok, said) = run(as_user(
        "alice",
        "wonderland",
        &["-t", "sensors/4", "-m", "while away", "-q", "1"],
    ));
    assert!(ok, "{said}");
    // Back, she gets what was queued for her (and the retained messages again).
    let back = Sub::start(&node, &[&alice_args[..], &["-t", "sensors/#"]].concat());
    assert!(
        wait_until(Duration::from_secs(10), || {
            back.lines
                .recv_timeout(Duration::from_millis(200))
                .ok()
                .as_deref()
                == Some("sensors/4 while away")
        }),
        "her session was not kept"
    );
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
