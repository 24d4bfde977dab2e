//! QoS 2 in a persistent session: a PUBLISH sent again on the next connection (its PUBREC
//! lost with the first), even after a kill of the node, is written once; a PUBREL sent again
//! is answered; a released packet id, or a clean start, makes a new message.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::mqtt::{
    Restartable, connect_v5, connected_at, log_records, publish, read_packet, redis,
};

/// A 3.1.1 CONNECT with clean session 0 (keep-alive 60) for `client`.
fn connect_kept(client: &str) -> Vec<u8> {
    let mut packet = vec![0x10, u8::try_from(12 + client.len()).unwrap()];
    packet.extend(b"\x00\x04MQTT\x04\x00\x00\x3c");
    packet.extend(u16::try_from(client.len()).unwrap().to_be_bytes());
    packet.extend(client.as_bytes());
    packet
}

/// A QoS 2 PUBLISH of `payload` to `t` with packet id `id` (`dup`: a second try); 5.0's
/// has an empty property list.
fn publish_qos2(id: u16, payload: &str, dup: bool, v5: bool) -> Vec<u8> {
    let mut body = b"\x00\x01t".to_vec();
    body.extend(id.to_be_bytes());
    if v5 {
        body.push(0);
    }
    body.extend(payload.as_bytes());
    let mut packet = vec![
        if dup { 0x3c } else { 0x34 },
        u8::try_from(body.len()).unwrap(),
    ];
    packet.extend(body);
    packet
}

/// Sends `packet` and reads the answer: its first byte and packet id.
fn exchange(s: &mut TcpStream, packet: &[u8]) -> (u8, u16) {
    s.write_all(packet).unwrap();
    let (kind, body) = read_packet(s);
    (kind, u16::from_be_bytes([body[0], body[1]]))
}

/// Sends [`publish_qos2`]'s PUBLISH: it is answered PUBREC.
fn received(s: &mut TcpStream, id: u16, payload: &str, dup: bool, v5: bool) {
    let answer = exchange(s, &publish_qos2(id, payload, dup, v5));
    assert_eq!(answer, (0x50, id), "PUBREC for {payload}");
}

/// Sends PUBREL for `id`: it is answered PUBCOMP.
fn released(s: &mut TcpStream, id: u16) {
    let mut pubrel = vec![0x62, 0x02];
    pubrel.extend(id.to_be_bytes());
    assert_eq!(exchange(s, &pubrel), (0x70, id), "PUBCOMP");
}

#[test]
fn a_qos_2_publish_sent_again_on_the_next_connection_is_written_once() {
    let restartable = Restartable::new();
    let start = || restartable.start();
    let node = start();
    let port = node.mqtt_port;

    // Message x, packet id 7: written and PUBREC'd, and the connection drops (the client
    // never saw the PUBREC).
    let (mut s, present) = connected_at(port, &connect_kept("q2"));
    assert!(!present);
    received(&mut s, 7, "x", false, false);
    drop(s);
    // It comes back and sends x again: PUBREC, PUBREL, PUBCOMP; x is there once.
    let (mut s, present) = connected_at(port, &connect_kept("q2"));
    assert!(present, "the session was kept");
    received(&mut s, 7, "x", true, false);
    released(&mut s, 7);
    assert_eq!(log_records(&mut redis(&node), "t"), 1, "x written once");

    // Released, id 7 is free: y with it is a new message. Its PUBREC is lost, and the
    // node is killed before the client comes back and sends y again.
    received(&mut s, 7, "y", false, false);
    drop(s);
    node.process.kill_9();
    let node = start();
    let (mut s, present) = connected_at(port, &connect_kept("q2"));
    assert!(present, "the session was kept across the kill");
    received(&mut s, 7, "y", true, false);
    drop(s);
    // Its PUBCOMP lost too: the PUBREL sent again on the next connection is answered.
    let (mut s, _) = connected_at(port, &connect_kept("q2"));
    released(&mut s, 7);
    released(&mut s, 7);
    assert_eq!(log_records(&mut redis(&node), "t"), 2, "x, then y once");
    // And x again with the id, after its release, is a third message.
    received(&mut s, 7, "x", false, false);
    released(&mut s, 7);
    assert_eq!(log_records(&mut redis(&node), "t"), 3, "x, y, x");

    // mosquitto_pub with a persistent session numbers its packets from 1 each time it
    // runs: the same message sent twice is two messages, in 3.1.1 and 5.0.
    for level in ["mqttv311", "mqttv5"] {
        let args = [
            "-t", level, "-m", "z", "-q", "2", "-c", "-i", "mp2", "-V", level,
        ];
        for _ in 0..2 {
            let (ok, said) = publish(&node, &args);
            assert!(ok, "{said}");
        }
        let stored = log_records(&mut redis(&node), level);
        assert_eq!(stored, 2, "z twice ({level})");
    }
}

#[test]
fn a_clean_start_makes_the_same_publish_a_new_message() {
    let node = common::mqtt::start();
    let port = node.mqtt_port;
    // 5.0, a session of 300 s: w with packet id 9, PUBREC'd, never released.
    let (mut s, _) = connected_at(port, &connect_v5("q2e", 300, None));
    received(&mut s, 9, "w", false, true);
    drop(s);
    // A clean start (its session dropped and made anew): the same PUBLISH is a new message
    // of the new session, not a second try of the old one's.
    let mut clean = connect_v5("q2e", 300, None);
    clean[9] |= 0x02;
    let (mut s, present) = connected_at(port, &clean);
    assert!(!present, "a clean start");
    received(&mut s, 9, "w", false, true);
    released(&mut s, 9);
    assert_eq!(log_records(&mut redis(&node), "t"), 2, "w, and w again");
}
