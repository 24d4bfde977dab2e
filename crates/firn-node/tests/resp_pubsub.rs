//! Publish/subscribe on one node: confirmations, messages and refusals as Redis writes
//! them, in RESP2 (arrays; other commands refused while subscribed) and RESP3 (push frames;
//! other commands keep working). Raw frames, so every reply is checked byte for byte in
//! shape; one test goes through the `redis` crate's own pub/sub client.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client that writes commands and reads replies as compact text: `+OK`, `-ERR …`, `:3`,
/// `"bulk"`, `nil`, `[…]` (array), `>[…]` (push), `%{k: v}` (map).
struct Raw {
    stream: TcpStream,
    input: Vec<u8>,
}

impl Raw {
    async fn connect(node: &firn_node::RunningNode) -> Raw {
        Raw {
            stream: TcpStream::connect(node.resp_addr).await.unwrap(),
            input: Vec::new(),
        }
    }

    async fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.stream.write_all(&out).await.unwrap();
    }

    /// The next reply, within 5 s.
    async fn read(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some((text, used)) = parse(&self.input) {
                    self.input.drain(..used);
                    return text;
                }
                let mut buf = [0u8; 4096];
                let n = self.stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the connection closed");
                self.input.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .expect("a reply within 5 s")
    }

    async fn call(&mut self, args: &[&str]) -> String {
        self.send(args).await;
        self.read().await
    }

    /// The next `n` replies, sorted (messages for a channel and a matching pattern arrive
    /// in either order).
    async fn read_sorted(&mut self, n: usize) -> Vec<String> {
        let mut got = Vec::new();
        for _ in 0..n {
            got.push(self.read().await);
        }
        got.sort();
        got
    }

    /// Nothing arrives within `ms`.
    async fn silent_for(&mut self, ms: u64) {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_millis(ms), self.stream.read(&mut buf));
        assert!(read.await.is_err(), "unexpected input");
    }
}

/// One frame from the front of `b`, as text, and the bytes it used.
fn parse(b: &[u8]) -> Option<(String, usize)> {
    let end = b.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&b[1..end]).unwrap();
    let mut at = end + 2;
    let text = match b.first()? {
        b'+' => format!("+{line}"),
        b'-' => format!("-{line}"),
        b':' => format!(":{line}"),
        b'_' => "nil".into(),
        b'$' if line == "-1" => "nil".into(),
        b'*' if line == "-1" => "nil".into(),
        b'$' => {
            let n: usize = line.parse().unwrap();
            if b.len() < at + n + 2 {
                return None;
            }
            let s = format!("{:?}", String::from_utf8_lossy(&b[at..at + n]));
            at += n + 2;
            s
        }
        kind @ (b'*' | b'>' | b'%') => {
            let n: usize = line.parse().unwrap();
            let items = if *kind == b'%' { 2 * n } else { n };
            let mut parts = Vec::new();
            for _ in 0..items {
                let (part, used) = parse(&b[at..])?;
                parts.push(part);
                at += used;
            }
            match kind {
                b'*' => format!("[{}]", parts.join(",")),
                b'>' => format!(">[{}]", parts.join(",")),
                _ => format!(
                    "%{{{}}}",
                    parts
                        .chunks(2)
                        .map(|kv| format!("{}: {}", kv[0], kv[1]))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            }
        }
        other => panic!("unexpected frame type {:?}", *other as char),
    };
    Some((text, at))
}

#[tokio::test]
async fn resp2_subscribe_publish_unsubscribe_answer_as_redis_does() {
    let node = start_node(false).await;
    let mut sub = Raw::connect(&node).await;
    let mut publisher = Raw::connect(&node).await;

    sub.send(&["SUBSCRIBE", "news", "sport"]).await;
    assert_eq!(sub.read().await, r#"["subscribe","news",:1]"#);
    assert_eq!(sub.read().await, r#"["subscribe","sport",:2]"#);
    assert_eq!(publisher.call(&["PUBLISH", "news", "hello"]).await, ":1");
    assert_eq!(sub.read().await, r#"["message","news","hello"]"#);
    assert_eq!(publisher.call(&["PUBLISH", "weather", "rain"]).await, ":0");
    // A message is bounded as a value is (this node: 64 KiB), a channel as a key is.
    let big = "x".repeat(70_000);
    assert_eq!(
        publisher.call(&["PUBLISH", "news", &big]).await,
        "-ERR value is 70000 bytes; the limit is 65536"
    );
    assert_eq!(
        publisher.call(&["PUBLISH", &"c".repeat(9_000), "x"]).await,
        "-ERR key is 9000 bytes; the limit is 8192"
    );

    assert_eq!(
        publisher.call(&["PUBSUB", "CHANNELS"]).await,
        r#"["news","sport"]"#
    );
    assert_eq!(
        publisher.call(&["PUBSUB", "CHANNELS", "n*"]).await,
        r#"["news"]"#
    );
    assert_eq!(
        publisher
            .call(&["PUBSUB", "NUMSUB", "news", "weather"])
            .await,
        r#"["news",:1,"weather",:0]"#
    );

    assert_eq!(
        sub.call(&["UNSUBSCRIBE", "news"]).await,
        r#"["unsubscribe","news",:1]"#
    );
    assert_eq!(publisher.call(&["PUBLISH", "news", "gone"]).await, ":0");
    // Without names: every channel left, one reply each.
    assert_eq!(
        sub.call(&["UNSUBSCRIBE"]).await,
        r#"["unsubscribe","sport",:0]"#
    );
    sub.silent_for(100).await;
    // Out of subscribed mode, other commands work again; nothing left to leave is nil.
    assert_eq!(sub.call(&["GET", "k"]).await, "nil");
    assert_eq!(
        sub.call(&["UNSUBSCRIBE"]).await,
        r#"["unsubscribe",nil,:0]"#
    );
    assert_eq!(
        sub.call(&["PUNSUBSCRIBE"]).await,
        r#"["punsubscribe",nil,:0]"#
    );
    node.shutdown().await;
}

#[tokio::test]
async fn resp2_patterns_deliver_pmessages_and_count_with_channels() {
    let node = start_node(false).await;
    let mut sub = Raw::connect(&node).await;
    let mut publisher = Raw::connect(&node).await;

    sub.send(&["PSUBSCRIBE", "news.*", "h?llo"]).await;
    assert_eq!(sub.read().await, r#"["psubscribe","news.*",:1]"#);
    assert_eq!(sub.read().await, r#"["psubscribe","h?llo",:2]"#);
    assert_eq!(
        sub.call(&["SUBSCRIBE", "news.tech"]).await,
        r#"["subscribe","news.tech",:3]"#
    );
    assert_eq!(publisher.call(&["PUBSUB", "NUMPAT"]).await, ":2");

    // A channel subscription and a matching pattern: two receivers, two messages.
    assert_eq!(
        publisher.call(&["PUBLISH", "news.tech", "rust"]).await,
        ":2"
    );
    assert_eq!(
        sub.read_sorted(2).await,
        [
            r#"["message","news.tech","rust"]"#,
            r#"["pmessage","news.*","news.tech","rust"]"#
        ]
    );
    assert_eq!(publisher.call(&["PUBLISH", "hallo", "x"]).await, ":1");
    assert_eq!(sub.read().await, r#"["pmessage","h?llo","hallo","x"]"#);
    assert_eq!(publisher.call(&["PUBLISH", "sports", "x"]).await, ":0");

    assert_eq!(
        sub.call(&["PUNSUBSCRIBE", "news.*"]).await,
        r#"["punsubscribe","news.*",:2]"#
    );
    assert_eq!(
        publisher.call(&["PUBLISH", "news.tech", "again"]).await,
        ":1"
    );
    assert_eq!(sub.read().await, r#"["message","news.tech","again"]"#);
    node.shutdown().await;
}

#[tokio::test]
async fn resp2_subscribed_connection_refuses_other_commands_with_redis_words() {
    let node = start_node(false).await;
    let mut sub = Raw::connect(&node).await;
    sub.call(&["SUBSCRIBE", "c"]).await;
    assert_eq!(
        sub.call(&["GET", "k"]).await,
        "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    );
    assert_eq!(
        sub.call(&["PUBLISH", "c", "x"]).await,
        "-ERR Can't execute 'publish': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    );
    assert!(
        sub.call(&["NOSUCH"])
            .await
            .starts_with("-ERR unknown command"),
        "an unknown command is still unknown"
    );
    assert_eq!(sub.call(&["PING"]).await, r#"["pong",""]"#);
    assert_eq!(sub.call(&["PING", "hi"]).await, r#"["pong","hi"]"#);
    // RESET leaves subscribed mode.
    assert_eq!(sub.call(&["RESET"]).await, "+RESET");
    assert_eq!(sub.call(&["PING"]).await, "+PONG");
    assert_eq!(sub.call(&["GET", "k"]).await, "nil");
    assert_eq!(sub.call(&["QUIT"]).await, "+OK");
    node.shutdown().await;
}

#[tokio::test]
async fn resp3_messages_are_pushes_and_other_commands_keep_working() {
    let node = start_node(false).await;
    let mut sub = Raw::connect(&node).await;
    let mut publisher = Raw::connect(&node).await;
    assert!(sub.call(&["HELLO", "3"]).await.starts_with("%{"));

    assert_eq!(
        sub.call(&["SUBSCRIBE", "news"]).await,
        r#">["subscribe","news",:1]"#
    );
    assert_eq!(
        sub.call(&["PSUBSCRIBE", "n*"]).await,
        r#">["psubscribe","n*",:2]"#
    );
    assert_eq!(sub.call(&["SET", "k", "v"]).await, "+OK");
    assert_eq!(sub.call(&["GET", "k"]).await, r#""v""#);
    assert_eq!(sub.call(&["PING"]).await, "+PONG");

    assert_eq!(publisher.call(&["PUBLISH", "news", "hello"]).await, ":2");
    assert_eq!(
        sub.read_sorted(2).await,
        [
            r#">["message","news","hello"]"#,
            r#">["pmessage","n*","news","hello"]"#
        ]
    );
    // A subscribed RESP3 connection may publish too, and hears its own message.
    assert_eq!(sub.call(&["PUBLISH", "news", "mine"]).await, ":2");
    assert_eq!(
        sub.read_sorted(2).await,
        [
            r#">["message","news","mine"]"#,
            r#">["pmessage","n*","news","mine"]"#
        ]
    );
    assert_eq!(
        sub.call(&["UNSUBSCRIBE", "news"]).await,
        r#">["unsubscribe","news",:1]"#
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_closed_subscriber_is_no_longer_counted() {
    let node = start_node(false).await;
    let mut publisher = Raw::connect(&node).await;
    {
        let mut sub = Raw::connect(&node).await;
        sub.call(&["SUBSCRIBE", "c"]).await;
        assert_eq!(publisher.call(&["PUBLISH", "c", "x"]).await, ":1");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while publisher.call(&["PUBLISH", "c", "x"]).await != ":0" {
        assert!(tokio::time::Instant::now() < deadline, "still counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await;
}

#[tokio::test]
async fn the_redis_crates_pubsub_client_receives_messages() {
    let node = start_node(false).await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("orders").await.unwrap();
    pubsub.psubscribe("order*").await.unwrap();
    let mut c = redis_conn(&node).await;
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg("orders")
        .arg("42")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(receivers, 2);
    let mut messages = pubsub.on_message();
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .unwrap()
            .unwrap();
        let payload: String = m.get_payload().unwrap();
        got.push((m.get_channel_name().to_string(), payload, m.from_pattern()));
    }
    got.sort();
    assert_eq!(
        got,
        [
            ("orders".to_string(), "42".to_string(), false),
            ("orders".to_string(), "42".to_string(), true)
        ]
    );
    drop(messages);
    node.shutdown().await;
}
