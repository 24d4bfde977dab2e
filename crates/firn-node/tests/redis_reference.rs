//! Firn against a real `redis-server`: the same commands on one connection to each, the
//! replies compared (see `common/reference.rs`). Each test is a case where an application
//! would notice a difference.

mod common;

/// Consumer `c` of group `g` reads one new entry of stream `s`.
const READ_ONE: &[&str] = &[
    "XREADGROUP",
    "GROUP",
    "g",
    "c",
    "COUNT",
    "1",
    "STREAMS",
    "s",
    ">",
];

use common::reference::{Both, Raw, RedisServer};
use common::*;

/// On a node without users (Redis without a password), AUTH of a password alone is an
/// error, not a sign-in the client would believe in; the default user takes any password;
/// a named user does not exist.
#[tokio::test]
async fn auth_without_users_answers_as_redis_without_a_password() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["AUTH", "secret"], 1),
        (&["AUTH", "default", "secret"], 1),
        (&["AUTH", "alice", "secret"], 1),
        (&["HELLO", "2", "AUTH", "alice", "secret"], 1),
        (&["ACL", "WHOAMI"], 1),
        (&["PING"], 1),
    ])
    .await;
}

/// Unsubscribing from channels a connection never subscribed to answers once per channel,
/// with a count of 0; from nothing, once, with a nil channel.
#[tokio::test]
async fn unsubscribing_from_nothing_answers_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["UNSUBSCRIBE", "a", "b", "c"], 3),
        (&["PUNSUBSCRIBE", "x*", "y*"], 2),
        (&["UNSUBSCRIBE"], 1),
        (&["PUNSUBSCRIBE"], 1),
        (&["PING"], 1),
    ])
    .await;
}

/// PUBSUB NUMPAT counts patterns, not subscriptions: two connections on one pattern are one.
#[tokio::test]
async fn pubsub_numpat_counts_unique_patterns() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let port = node.resp_addr.port();
    let mut subscribers = Vec::new();
    for _ in 0..2 {
        for p in [port, redis.port] {
            let mut c = Raw::connect(p).await;
            c.send(&["PSUBSCRIBE", "sensors.*", "alarms.*"]).await;
            for _ in 0..2 {
                c.read().await;
            }
            subscribers.push(c);
        }
    }
    let mut both = Both::connect(port, &redis).await;
    both.same(&[(&["PUBSUB", "NUMPAT"], 1)]).await;
}

/// The comparison itself: two connections whose replies differ are reported.
#[tokio::test]
async fn the_comparison_reports_a_difference() {
    let redis = RedisServer::start().await;
    let mut both = Both {
        firn: Raw::connect(redis.port).await,
        redis: Raw::connect(redis.port).await,
    };
    both.firn.send(&["CLIENT", "SETNAME", "one"]).await;
    both.firn.read().await;
    let differ = both.differences(&["CLIENT", "GETNAME"], 1).await;
    assert_eq!(differ.len(), 1, "{differ:?}");
    assert!(differ[0].contains("one"), "{differ:?}");
    assert!(both.differences(&["PING"], 1).await.is_empty());
}

/// XADD's trimming as Redis does it: MAXLEN 0 leaves nothing, not even the new entry; MINID
/// above the new id trims it too; an id at the top of its millisecond cannot be followed
/// within it; `~ … LIMIT k` evicts at most k.
#[tokio::test]
async fn xadd_trims_and_refuses_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "e", "MAXLEN", "0", "5-1", "a", "b"], 1),
        (&["XLEN", "e"], 1),
        (&["XADD", "m", "1-1", "a", "b"], 1),
        (&["XADD", "m", "MINID", "9", "2-1", "a", "b"], 1),
        (&["XLEN", "m"], 1),
        (&["XADD", "x", "1-18446744073709551615", "a", "b"], 1),
        (&["XLEN", "x"], 1),
    ])
    .await;
    // The top of a millisecond cannot be followed within it. Redis 7.2 says so as below
    // (7.0, which some systems still ship, said "Elements are too large to be stored").
    both.firn.send(&["XADD", "x", "1-*", "a", "b"]).await;
    assert_eq!(
        common::reference::show(&both.firn.read().await),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item"
    );
    both.same(&[(&["XLEN", "x"], 1), (&["XRANGE", "x", "-", "+"], 1)])
        .await;
    // `~ … LIMIT k` evicts at most k entries. Redis evicts whole nodes of its radix tree
    // (100 entries by default) within the limit, so on a small stream it evicts none; Firn,
    // which trims exactly, evicts the k oldest. Checked on Firn alone, against the bound.
    let firn = &mut both.firn;
    for id in ["1-1", "2-1", "3-1", "4-1", "5-1"] {
        firn.send(&["XADD", "l", id, "a", "b"]).await;
        firn.read().await;
    }
    for (command, answer) in [
        (&["XTRIM", "l", "MAXLEN", "~", "0", "LIMIT", "2"][..], ":2"),
        (&["XLEN", "l"][..], ":3"),
        (&["XTRIM", "l", "MINID", "~", "9", "LIMIT", "1"][..], ":1"),
        (
            &[
                "XADD", "l", "MAXLEN", "~", "0", "LIMIT", "1", "6-1", "a", "b",
            ][..],
            "$\"6-1\"",
        ),
        (
            &["XRANGE", "l", "-", "+"][..],
            "[[$\"5-1\", [$\"a\", $\"b\"]], [$\"6-1\", [$\"a\", $\"b\"]]]",
        ),
        (&["XTRIM", "l", "MAXLEN", "~", "0", "LIMIT", "0"][..], ":2"),
    ] {
        firn.send(command).await;
        assert_eq!(
            common::reference::show(&firn.read().await),
            answer,
            "{command:?}"
        );
    }
}

/// XGROUP's ENTRIESREAD is taken (and ignored where Firn keeps no count); SETID `-` is 0-0.
#[tokio::test]
async fn xgroup_takes_entriesread_and_setid_dash() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "s", "1-1", "a", "b"], 1),
        (&["XADD", "s", "2-1", "a", "b"], 1),
        (&["XGROUP", "CREATE", "s", "g", "0", "ENTRIESREAD", "0"], 1),
        (&["XGROUP", "CREATE", "s", "h", "$", "ENTRIESREAD", "-3"], 1),
        (&["XGROUP", "SETID", "s", "g", "-"], 1),
        (&["XGROUP", "SETID", "s", "h", "0", "ENTRIESREAD", "1"], 1),
        (READ_ONE, 1),
    ])
    .await;
}

/// A message that PUBLISH counted reaches its subscriber before the answer to anything the
/// subscriber sends afterwards: UNSUBSCRIBE right after a burst of publishes loses none.
#[tokio::test]
async fn a_counted_message_reaches_its_subscriber_before_it_unsubscribes() {
    const MESSAGES: usize = 300;
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    for (server, port) in [("Firn", node.resp_addr.port()), ("Redis", redis.port)] {
        for round in 0..5 {
            let mut sub = Raw::connect(port).await;
            sub.send(&["SUBSCRIBE", "ch"]).await;
            sub.read().await;
            let mut publisher = Raw::connect(port).await;
            // Pipelined, so that messages are still queued at the subscriber's node when its
            // UNSUBSCRIBE arrives.
            for i in 0..MESSAGES {
                publisher.send(&["PUBLISH", "ch", &i.to_string()]).await;
            }
            for i in 0..MESSAGES {
                let counted = common::reference::show(&publisher.read().await);
                assert_eq!(counted, ":1", "{server}: PUBLISH {i} counted {counted}");
            }
            sub.send(&["UNSUBSCRIBE", "ch"]).await;
            let mut got = 0;
            loop {
                let frame = common::reference::show(&sub.read().await);
                if frame.starts_with("[$\"unsubscribe\"") {
                    break;
                }
                assert!(frame.starts_with("[$\"message\""), "{server}: {frame}");
                got += 1;
            }
            assert_eq!(
                got, MESSAGES,
                "{server}, round {round}: messages before UNSUBSCRIBE's answer"
            );
        }
    }
}

/// INFO carries the fields clients read, under Redis's names, with true values: a
/// connection waiting in `XREAD … BLOCK` is a blocked client on both.
#[tokio::test]
async fn info_has_the_fields_clients_read() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut waiting = Vec::new();
    for port in [node.resp_addr.port(), redis.port] {
        let mut c = Raw::connect(port).await;
        c.send(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]).await;
        waiting.push(c);
    }
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    let mut fields = Vec::new();
    for c in [&mut both.firn, &mut both.redis] {
        let mut seen = std::collections::HashMap::new();
        for _ in 0..100 {
            c.send(&["INFO"]).await;
            let text = common::reference::show(&c.read().await);
            seen = text
                .split("\\r\\n")
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim_start_matches("$\"").to_string(), v.to_string()))
                .collect();
            if seen.get("blocked_clients").map(String::as_str) == Some("1") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        fields.push(seen);
    }
    for name in [
        "redis_version",
        "redis_mode",
        "os",
        "arch_bits",
        "process_id",
        "run_id",
        "tcp_port",
        "uptime_in_seconds",
        "connected_clients",
        "blocked_clients",
        "maxclients",
        "role",
    ] {
        assert!(fields[0].contains_key(name), "Firn's INFO has no {name}");
        assert!(fields[1].contains_key(name), "Redis's INFO has no {name}");
    }
    for same in ["arch_bits", "blocked_clients", "role", "redis_mode"] {
        assert_eq!(fields[0][same], fields[1][same], "{same}");
    }
    assert_eq!(fields[0]["run_id"].len(), 40);
}

/// XINFO GROUPS has Redis's fields and no more (a client comparing replies sees nothing
/// extra); Firn's delivery options are FIRN.GROUPS's.
#[tokio::test]
async fn xinfo_groups_has_redis_fields_only() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "s", "1-1", "a", "b"], 1),
        (&["XGROUP", "CREATE", "s", "g", "0"], 1),
    ])
    .await;
    let mut names = Vec::new();
    for c in [&mut both.firn, &mut both.redis] {
        c.send(&["XINFO", "GROUPS", "s"]).await;
        let reply = c.read().await;
        let redis_protocol::resp2::types::BytesFrame::Array(groups) = reply else {
            panic!("XINFO GROUPS answers an array")
        };
        let redis_protocol::resp2::types::BytesFrame::Array(fields) = &groups[0] else {
            panic!("a group is a flat array in RESP2")
        };
        names.push(
            fields
                .iter()
                .step_by(2)
                .map(common::reference::show)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(names[0], names[1]);
}

/// A client blocked in XREADGROUP is answered at once when its group is destroyed
/// (`NOGROUP`) or its stream flushed, deleted or replaced (`UNBLOCKED`), with Redis's
/// words; it does not hang until a later XADD.
#[tokio::test]
async fn a_blocked_xreadgroup_hears_when_its_group_goes() {
    let (node, redis) = (start_node(true).await, RedisServer::start().await);
    for end in [
        &["XGROUP", "DESTROY", "s", "g"][..],
        &["FLUSHALL"][..],
        &["DEL", "s"][..],
        &["SET", "s", "v"][..],
    ] {
        let mut answers = Vec::new();
        for (server, port) in [("Firn", node.resp_addr.port()), ("Redis", redis.port)] {
            let mut admin = Raw::connect(port).await;
            for setup in [
                &["XADD", "s", "*", "a", "b"][..],
                &["XGROUP", "CREATE", "s", "g", "$"][..],
            ] {
                admin.send(setup).await;
                admin.read().await;
            }
            let mut blocked = Raw::connect(port).await;
            blocked
                .send(&[
                    "XREADGROUP",
                    "GROUP",
                    "g",
                    "c",
                    "BLOCK",
                    "0",
                    "STREAMS",
                    "s",
                    ">",
                ])
                .await;
            assert!(
                blocked
                    .read_within(std::time::Duration::from_millis(300))
                    .await
                    .is_none(),
                "{server}: XREADGROUP did not block"
            );
            admin.send(end).await;
            admin.read().await;
            let answer = blocked
                .read_within(std::time::Duration::from_secs(3))
                .await
                .map(|f| common::reference::show(&f));
            answers.push(answer.unwrap_or_else(|| panic!("{server} after {end:?}: no answer")));
        }
        assert_eq!(answers[0], answers[1], "after {end:?}: Firn, then Redis");
    }
}

/// XINFO GROUPS' `entries-read` and `lag` as Redis counts them: unknown (nil) for a group
/// made at an id without ENTRIESREAD, known once it reads to the end or is told, and the
/// lag unknown again after a deletion in the part not yet read.
#[tokio::test]
async fn xinfo_groups_counts_entries_read_and_lag_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    let groups = &["XINFO", "GROUPS", "s"][..];
    both.same(&[
        (&["XADD", "s", "1-1", "a", "1"], 1),
        (&["XADD", "s", "2-1", "a", "2"], 1),
        (&["XADD", "s", "3-1", "a", "3"], 1),
        (&["XGROUP", "CREATE", "s", "zero", "0"], 1),
        (&["XGROUP", "CREATE", "s", "mid", "1-1"], 1),
        (&["XGROUP", "CREATE", "s", "end", "$"], 1),
        (
            &["XGROUP", "CREATE", "s", "told", "0", "ENTRIESREAD", "1"],
            1,
        ),
        (groups, 1),
        (
            &[
                "XREADGROUP",
                "GROUP",
                "zero",
                "c",
                "COUNT",
                "1",
                "STREAMS",
                "s",
                ">",
            ],
            1,
        ),
        (groups, 1),
        (&["XREADGROUP", "GROUP", "mid", "c", "STREAMS", "s", ">"], 1),
        (groups, 1),
        (&["XADD", "s", "4-1", "a", "4"], 1),
        (&["XDEL", "s", "3-1"], 1),
        (groups, 1),
        (
            &["XREADGROUP", "GROUP", "zero", "c", "STREAMS", "s", ">"],
            1,
        ),
        (groups, 1),
        (
            &["XGROUP", "SETID", "s", "told", "0", "ENTRIESREAD", "0"],
            1,
        ),
        (groups, 1),
    ])
    .await;
}

/// XAUTOCLAIM counts deleted pending entries toward COUNT, answers their ids in its third
/// element (and drops them from the pending list), and its cursor is where the next call
/// starts (0-0 at the end).
#[tokio::test]
async fn xautoclaim_reports_deleted_entries_and_a_cursor_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "s", "1-1", "a", "b"][..], 1),
        (&["XADD", "s", "2-1", "a", "b"][..], 1),
        (&["XADD", "s", "3-1", "a", "b"][..], 1),
        (&["XADD", "s", "4-1", "a", "b"][..], 1),
        (&["XADD", "s", "5-1", "a", "b"][..], 1),
        (&["XGROUP", "CREATE", "s", "g", "0"][..], 1),
        (
            &["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"][..],
            1,
        ),
        (&["XDEL", "s", "2-1", "3-1"][..], 1),
        (
            &["XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "2"][..],
            1,
        ),
        (
            &["XAUTOCLAIM", "s", "g", "c2", "0", "3-1", "COUNT", "2"][..],
            1,
        ),
        (
            &[
                "XAUTOCLAIM",
                "s",
                "g",
                "c2",
                "0",
                "0",
                "COUNT",
                "10",
                "JUSTID",
            ][..],
            1,
        ),
        (&["XPENDING", "s", "g"][..], 1),
        (&["XAUTOCLAIM", "s", "g", "c3", "0", "5-1"][..], 1),
    ])
    .await;
}

/// XINFO STREAM … FULL: the stream with its entries and groups (pending entries and
/// consumers) in Redis's shape. Times (`seen-time`, delivery times) differ by nature and
/// the radix tree's counts by design (Firn keeps none), so they are masked; Redis 7.2's
/// `active-time`, which the 7.0 some systems ship lacks, is left out of the comparison.
#[tokio::test]
async fn xinfo_stream_full_has_redis_shape() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "s", "1-1", "a", "1"], 1),
        (&["XADD", "s", "2-1", "a", "2"], 1),
        (&["XGROUP", "CREATE", "s", "g", "0"], 1),
        (READ_ONE, 1),
    ])
    .await;
    for command in [
        &["XINFO", "STREAM", "s", "FULL"][..],
        &["XINFO", "STREAM", "s", "FULL", "COUNT", "1"][..],
        &["XINFO", "STREAM", "s", "FULL", "COUNT", "0"][..],
        &["XINFO", "STREAM", "nothing", "FULL"][..],
        &["XINFO", "STREAM", "s", "FULL", "COUNT"][..],
    ] {
        let mut shown = Vec::new();
        for c in [&mut both.firn, &mut both.redis] {
            c.send(command).await;
            shown.push(timeless(&c.read().await));
        }
        assert_eq!(shown[0], shown[1], "{command:?}: Firn, then Redis");
    }
}

/// A reply with times (integers past 10^9, and the values of `seen-time`) written as `T`,
/// the radix tree's counts as `R`, and `active-time` left out; the rest as `show` writes
/// it.
fn timeless(frame: &redis_protocol::resp2::types::BytesFrame) -> String {
    use redis_protocol::resp2::types::BytesFrame;
    match frame {
        BytesFrame::Integer(i) if *i > 1_000_000_000 => ":T".into(),
        BytesFrame::Array(items) => {
            let mut out = Vec::new();
            let mut i = 0;
            while i < items.len() {
                let name = common::reference::show(&items[i]);
                let masked = match name.as_str() {
                    "$\"active-time\"" => Some(None),
                    "$\"seen-time\"" => Some(Some(":T")),
                    "$\"radix-tree-keys\"" | "$\"radix-tree-nodes\"" => Some(Some(":R")),
                    _ => None,
                };
                match masked {
                    Some(value) if i + 1 < items.len() => {
                        if let Some(value) = value {
                            out.push(name);
                            out.push(value.to_string());
                        }
                        i += 2;
                    }
                    _ => {
                        out.push(timeless(&items[i]));
                        i += 1;
                    }
                }
            }
            format!("[{}]", out.join(", "))
        }
        other => common::reference::show(other),
    }
}
