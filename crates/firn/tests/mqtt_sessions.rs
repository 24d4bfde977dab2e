//! MQTT sessions: a persistent session gets what it missed, even across a kill of its node;
//! a second connection with a client id takes it over, on the same node or another, and a
//! delayed will of the client there is not published; a 5.0 DISCONNECT may set the
//! session's expiry.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::mqtt::{
    Restartable, Sub, connect_v5, connected_at, publish, publish_lines, read_n, redis, start,
    subscribed_at,
};
use common::{Cluster, free_ports, wait_until};

#[test]
fn a_persistent_subscriber_gets_what_it_missed_even_across_a_node_kill() {
    let restartable = Restartable::new();
    let start = || restartable.start();
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

#[test]
fn a_connect_on_another_node_closes_the_clients_connection_and_cancels_its_delayed_will() {
    let ports = free_ports(3);
    let cluster = Cluster::start_each(3, &[], |i| {
        vec!["--mqtt-addr".into(), format!("127.0.0.1:{}", ports[i])]
    });
    cluster.wait_for_leaders(0, None);
    // Node 3 watches for wills.
    let sub = subscribed_at(ports[2], &["-t", "status/#", "-q", "1"], "status/probe");
    // Client x on node 1: a session of 60 s, a will of delay 2 s.
    let will_x = Some(("status/x", "gone", 2));
    let (mut first, present) = connected_at(ports[0], &connect_v5("x", 60, will_x));
    assert!(!present);
    // Client y on node 1, gone without DISCONNECT: its will waits out its delay there.
    let will_y = Some(("status/y", "gone", 2));
    drop(connected_at(ports[0], &connect_v5("y", 60, will_y)));
    // Both connect on node 2, taking their sessions up.
    let (_second_x, present) = connected_at(ports[1], &connect_v5("x", 60, None));
    assert!(present, "x's session, made on node 1");
    let (_second_y, _) = connected_at(ports[1], &connect_v5("y", 60, None));
    // Node 1 closed x's first connection, saying why: DISCONNECT 0x8E Session taken over.
    let mut rest = Vec::new();
    first
        .read_to_end(&mut rest)
        .expect("node 1 closes the first connection");
    assert_eq!(rest.first(), Some(&0xe0), "DISCONNECT: {rest:x?}");
    assert_eq!(rest.get(2), Some(&0x8e), "Session taken over: {rest:x?}");
    // Neither will is published: the clients came back before their delay. (Probes sent
    // again while the subscriber started may still come.)
    let watched = Instant::now();
    while let Some(left) = Duration::from_secs(4).checked_sub(watched.elapsed()) {
        if let Ok(line) = sub.lines.recv_timeout(left) {
            assert!(
                line.starts_with("status/probe"),
                "{line}: a will after its client came back elsewhere"
            );
        }
    }
    // A paused node holds a CONNECT up only for the first round of asking (1 s)...
    cluster.signal(2, "-STOP");
    let started = Instant::now();
    let _ = connected_at(ports[0], &connect_v5("w", 0, None));
    let took = started.elapsed();
    cluster.signal(2, "-CONT");
    assert!(took < Duration::from_secs(3), "{took:?} with a node paused");
    // ...and a node that cannot be reached not past the bound (6 s).
    let mut cluster = cluster;
    cluster.kill_9(2);
    let started = Instant::now();
    let _ = connected_at(ports[0], &connect_v5("z", 0, None));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// A 5.0 DISCONNECT (normal) with Session Expiry Interval `expiry_s`.
fn disconnect_with_expiry(expiry_s: u32) -> Vec<u8> {
    let mut packet = vec![0xe0, 7, 0x00, 5, 0x11];
    packet.extend(expiry_s.to_be_bytes());
    packet
}

#[test]
fn a_disconnect_sets_the_sessions_expiry_but_not_after_a_connect_of_none() {
    let node = start();
    let port = node.mqtt_port;
    let mut r = redis(&node);
    let mut session_kept = |client: &str| {
        redis::cmd("EXISTS")
            .arg(format!("_firn/mqtt/session/{{{client}}}"))
            .query::<i64>(&mut r)
            .unwrap()
            == 1
    };
    let sub = subscribed_at(port, &["-t", "status/#", "-q", "1"], "status/probe");
    // A session of 60 s, cut by its DISCONNECT: to 1 s, gone soon after; to 0, it ends with
    // the connection, and the next CONNECT finds none.
    for (client, expiry_s, within) in [("e1", 1, 6), ("e2", 0, 3)] {
        let (mut s, _) = connected_at(port, &connect_v5(client, 60, None));
        assert!(session_kept(client));
        s.write_all(&disconnect_with_expiry(expiry_s)).unwrap();
        let ended = s.read_to_end(&mut Vec::new());
        assert!(ended.is_ok(), "the connection ends: {ended:?}");
        assert!(
            wait_until(Duration::from_secs(within), || !session_kept(client)),
            "{client}'s session outlived the expiry its DISCONNECT gave, {expiry_s} s"
        );
    }
    let (_s, present) = connected_at(port, &connect_v5("e2", 60, None));
    assert!(!present, "a session ended by its DISCONNECT");
    // A CONNECT of none, then a DISCONNECT that gives one: a protocol error (0x82), not a
    // DISCONNECT — so the will is published.
    let will = Some(("status/e3", "gone", 0));
    let (mut s, _) = connected_at(port, &connect_v5("e3", 0, will));
    s.write_all(&disconnect_with_expiry(30)).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("the connection ends");
    assert_eq!(rest.first(), Some(&0xe0), "DISCONNECT: {rest:x?}");
    assert_eq!(rest.get(2), Some(&0x82), "Protocol Error: {rest:x?}");
    let line = (0..10)
        .map(|_| sub.next())
        .find(|l| !l.starts_with("status/probe"))
        .expect("the will");
    assert_eq!(line, "status/e3 gone");
    assert!(!session_kept("e3"));
}
