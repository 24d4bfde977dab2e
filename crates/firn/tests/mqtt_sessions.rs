//! MQTT sessions: a persistent session gets what it missed, even across a kill of its node;
//! a second connection with a client id takes it over.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::mqtt::{Node, Sub, publish, publish_lines, read_n, start};
use common::{FirnProcess, free_ports, wait_until};

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
