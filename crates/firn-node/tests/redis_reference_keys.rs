//! Firn against a real `redis-server`, for keys: one type a key (strings and streams),
//! the string commands, counters and in-place changes, and transactions (`MULTI`/`EXEC`/
//! `WATCH`), keys that expire — the same commands on one connection to each, the replies
//! compared (see `common/reference.rs`).

mod common;

use common::reference::{Both, Raw, RedisServer};
use common::*;

/// A stream is a key: DEL ends it (and its groups), EXISTS, TYPE and DBSIZE count it, and a
/// key holds one type at a time — a command for another answers WRONGTYPE and changes
/// nothing, while SET replaces a key of any type.
#[tokio::test]
async fn a_key_holds_one_type_at_a_time() {
    let (node, redis) = (start_node(true).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["XADD", "s", "5-0", "a", "1"], 1),
        (&["XGROUP", "CREATE", "s", "g", "0"], 1),
        (&["EXISTS", "s", "s", "nothing"], 1),
        (&["TYPE", "s"], 1),
        (&["DBSIZE"], 1),
        (&["DEL", "s"], 1),
        (&["XLEN", "s"], 1),
        (&["EXISTS", "s"], 1),
        (&["TYPE", "s"], 1),
        (&["DBSIZE"], 1),
        // A stream made again under the name has none of the old one's entries or groups.
        (&["XADD", "s", "1-1", "b", "2"], 1),
        (&["XRANGE", "s", "-", "+"], 1),
        (&["XINFO", "GROUPS", "s"], 1),
        (&["UNLINK", "s"], 1),
        (&["UNLINK", "s"], 1),
        (&["SET", "str", "v"], 1),
        (&["XADD", "str", "1-1", "a", "1"], 1),
        (&["XADD", "str", "NOMKSTREAM", "1-1", "a", "1"], 1),
        (&["XLEN", "str"], 1),
        (&["XRANGE", "str", "-", "+"], 1),
        (&["XREVRANGE", "str", "+", "-"], 1),
        (&["XREAD", "STREAMS", "str", "0"], 1),
        (&["XTRIM", "str", "MAXLEN", "0"], 1),
        (&["XDEL", "str", "1-1"], 1),
        (&["XGROUP", "CREATE", "str", "g", "$", "MKSTREAM"], 1),
        (&["XINFO", "STREAM", "str"], 1),
        (&["XINFO", "GROUPS", "str"], 1),
        (&["XACK", "str", "g", "1-1"], 1),
        (&["XPENDING", "str", "g"], 1),
        (&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "str", ">"], 1),
        (&["GET", "str"], 1),
        (&["TYPE", "str"], 1),
        (&["XADD", "t", "1-1", "a", "1"], 1),
        (&["GET", "t"], 1),
        (&["MGET", "t", "str"], 1),
        (&["SET", "t", "x", "GET"], 1),
        (&["SET", "t", "x", "NX"], 1),
        (&["TYPE", "t"], 1),
        (&["SET", "t", "x"], 1),
        (&["TYPE", "t"], 1),
        (&["GET", "t"], 1),
        (&["XLEN", "t"], 1),
        (&["XADD", "u", "1-1", "a", "1"], 1),
        (&["MSET", "u", "y", "v", "z"], 1),
        (&["MGET", "u", "v"], 1),
        (&["XADD", "u", "2-1", "a", "1"], 1),
        (&["DBSIZE"], 1),
        (&["FLUSHALL"], 1),
        (&["DBSIZE"], 1),
        (&["TYPE", "u"], 1),
    ])
    .await;
}

/// SCAN lists every type, and `TYPE t` keeps those of one (the order of keys differs from
/// Redis's hash order, so the sets are compared).
#[tokio::test]
async fn scan_lists_every_type_and_filters_by_one() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["SET", "a", "1"], 1),
        (&["XADD", "b", "1-1", "f", "v"], 1),
        (&["SET", "c", "1"], 1),
        (&["XADD", "d", "1-1", "f", "v"], 1),
    ])
    .await;
    for filter in [None, Some("string"), Some("stream"), Some("hash")] {
        let mut found = Vec::new();
        for conn in [&mut both.firn, &mut both.redis] {
            let mut cmd = vec!["SCAN", "0", "COUNT", "100"];
            if let Some(t) = filter {
                cmd.extend(["TYPE", t]);
            }
            conn.send(&cmd).await;
            let shown = common::reference::show(&conn.read().await);
            let mut keys: Vec<String> = ["a", "b", "c", "d"]
                .into_iter()
                .filter(|k| shown.contains(&format!("\"{k}\"")))
                .map(String::from)
                .collect();
            keys.sort();
            found.push(keys);
        }
        assert_eq!(found[0], found[1], "SCAN TYPE {filter:?}: Firn, then Redis");
    }
}

/// The string commands and the connection's own, as Redis answers them: SET's conditions
/// and GET, MGET and MSET, DEL and EXISTS of several keys, and the errors for wrong arity,
/// an unknown command and a bad option.
#[tokio::test]
async fn strings_and_connection_commands_answer_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["PING"], 1),
        (&["PING", "hello"], 1),
        (&["ECHO", "x y"], 1),
        (&["SELECT", "0"], 1),
        (&["GET", "a"], 1),
        (&["SET", "a", "1"], 1),
        (&["SET", "a", "2", "NX"], 1),
        (&["SET", "a", "2", "XX"], 1),
        (&["SET", "b", "2", "XX"], 1),
        (&["SET", "a", "3", "GET"], 1),
        (&["SET", "b", "3", "GET"], 1),
        (&["SET", "a", "4", "NX", "GET"], 1),
        (&["SET", "c", "4", "XX", "GET"], 1),
        (&["SET", "a", "5", "NX", "XX"], 1),
        (&["SET", "a", "5", "BOGUS"], 1),
        (&["SET", "a"], 1),
        (&["GET", "a"], 1),
        (&["MSET", "x", "1", "y", "2"], 1),
        (&["MSET", "x", "1", "y"], 1),
        (&["MGET", "x", "nothing", "y", "a"], 1),
        (&["MSETNX", "x", "9", "fresh", "1"], 1),
        (&["MSETNX", "fresh", "1", "fresh2", "2"], 1),
        (&["MSETNX", "fresh"], 1),
        (&["MGET", "x", "fresh", "fresh2"], 1),
        (&["EXISTS", "x", "x", "nothing", "y"], 1),
        (&["DEL", "x", "nothing", "y", "x"], 1),
        (&["EXISTS", "x", "y"], 1),
        (&["TYPE", "a"], 1),
        (&["TYPE", "x"], 1),
        (&["GET", "a", "b"], 1),
        (&["NOSUCHCOMMAND", "a"], 1),
        (&["CLIENT", "SETNAME", "me"], 1),
        (&["CLIENT", "GETNAME"], 1),
        (&["DBSIZE"], 1),
        (&["PING"], 1),
    ])
    .await;
}

/// Counters and in-place changes as Redis answers them: INCR and its kin on absent, integer
/// and non-integer values and at the edges of 64 bits, INCRBYFLOAT, APPEND, GETDEL, GETSET
/// and SETNX, and WRONGTYPE on a stream.
#[tokio::test]
async fn counters_and_in_place_changes_answer_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["INCR", "n"], 1),
        (&["INCR", "n"], 1),
        (&["INCRBY", "n", "10"], 1),
        (&["DECR", "n"], 1),
        (&["DECRBY", "n", "-5"], 1),
        (&["DECRBY", "n", "20"], 1),
        (&["GET", "n"], 1),
        (&["INCRBY", "n", "x"], 1),
        (&["INCRBY", "n", "1.5"], 1),
        (&["SET", "big", "9223372036854775807"], 1),
        (&["INCR", "big"], 1),
        (&["SET", "small", "-9223372036854775808"], 1),
        (&["DECR", "small"], 1),
        (&["DECRBY", "small", "-9223372036854775808"], 1),
        (&["SET", "word", "abc"], 1),
        (&["INCR", "word"], 1),
        (&["SET", "padded", " 1"], 1),
        (&["INCR", "padded"], 1),
        (&["SET", "zero", "01"], 1),
        (&["INCR", "zero"], 1),
        (&["INCRBYFLOAT", "f", "10.5"], 1),
        (&["INCRBYFLOAT", "f", "0.1"], 1),
        (&["INCRBYFLOAT", "f", "-5"], 1),
        (&["INCRBYFLOAT", "h", "5.0e3"], 1),
        (&["INCRBYFLOAT", "f", "abc"], 1),
        (&["INCRBYFLOAT", "word", "1"], 1),
        (&["INCRBYFLOAT", "g", "3"], 1),
        (&["INCRBYFLOAT", "g", "-3"], 1),
        (&["APPEND", "s", "hello"], 1),
        (&["APPEND", "s", " world"], 1),
        (&["GET", "s"], 1),
        (&["GETDEL", "s"], 1),
        (&["GETDEL", "s"], 1),
        (&["EXISTS", "s"], 1),
        (&["GETSET", "gs", "one"], 1),
        (&["GETSET", "gs", "two"], 1),
        (&["SETNX", "gs", "three"], 1),
        (&["SETNX", "nx", "first"], 1),
        (&["GET", "nx"], 1),
        (&["XADD", "st", "1-1", "a", "b"], 1),
        (&["INCR", "st"], 1),
        (&["APPEND", "st", "x"], 1),
        (&["GETDEL", "st"], 1),
        (&["GETSET", "st", "v"], 1),
        (&["TYPE", "st"], 1),
        (&["INCR"], 1),
        (&["APPEND", "s"], 1),
    ])
    .await;
    // Redis adds in `long double` and prints 17 digits, so 5.6 + 5000 shows as
    // 5005.60000000000000009 there; Firn adds in 64-bit floats and prints the shortest
    // decimal that reads back the same. Checked on Firn alone.
    both.firn.send(&["INCRBYFLOAT", "f", "5.0e3"]).await;
    assert_eq!(
        common::reference::show(&both.firn.read().await),
        "$\"5005.6\""
    );
}

/// MULTI/EXEC/DISCARD/WATCH as Redis answers them: queued commands answer QUEUED, EXEC
/// answers each (a command failing inside does not stop the others), every misuse has
/// Redis's words, a refused command aborts EXEC, and a watched key changed by another
/// client makes EXEC answer nil with nothing applied. Keys share a `{tag}`, so that a Redis
/// Cluster would take them too.
#[tokio::test]
async fn multi_exec_and_watch_answer_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["SET", "{t}word", "abc"], 1),
        (&["MULTI"], 1),
        (&["SET", "{t}a", "1"], 1),
        (&["INCR", "{t}a"], 1),
        (&["GET", "{t}a"], 1),
        (&["INCR", "{t}word"], 1),
        (&["MSET", "{t}b", "x", "{t}c", "y"], 1),
        (&["MGET", "{t}a", "{t}b", "{t}c", "{t}none"], 1),
        (&["DEL", "{t}c"], 1),
        (&["EXISTS", "{t}a", "{t}c"], 1),
        (&["XADD", "{t}s", "5-1", "f", "v"], 1),
        (&["XADD", "{t}s", "5-1", "f", "again"], 1),
        (&["XADD", "{t}word", "6-1", "f", "v"], 1),
        (&["XADD", "{t}none", "NOMKSTREAM", "7-1", "f", "v"], 1),
        (&["EXEC"], 1),
        (&["XRANGE", "{t}s", "-", "+"], 1),
        (&["EXISTS", "{t}none"], 1),
        (&["GET", "{t}a"], 1),
        (&["EXEC"], 1),
        (&["DISCARD"], 1),
        (&["MULTI"], 1),
        (&["MULTI"], 1),
        (&["WATCH", "{t}a"], 1),
        (&["SET", "{t}a", "9"], 1),
        (&["DISCARD"], 1),
        (&["GET", "{t}a"], 1),
        (&["MULTI"], 1),
        (&["SET", "{t}a"], 1),
        (&["SET", "{t}a", "5"], 1),
        (&["EXEC"], 1),
        (&["GET", "{t}a"], 1),
        (&["MULTI"], 1),
        (&["NOSUCHCOMMAND"], 1),
        (&["EXEC"], 1),
        (&["MULTI"], 1),
        (&["EXEC"], 1),
        (&["MULTI"], 1),
        (&["PING"], 1),
        (&["ECHO", "x"], 1),
        (&["INCR", "{t}a"], 1),
        (&["EXEC"], 1),
        (&["WATCH", "{t}a", "{t}b"], 1),
        (&["UNWATCH"], 1),
        (&["MULTI"], 1),
        (&["GET", "{t}a"], 1),
        (&["EXEC"], 1),
    ])
    .await;
    // A watched key another client changes: EXEC runs nothing and answers nil. One left
    // alone: EXEC runs.
    for (port, server) in [(node.resp_addr.port(), "Firn"), (redis.port, "Redis")] {
        let (mut me, mut other) = (Raw::connect(port).await, Raw::connect(port).await);
        let say = async |c: &mut Raw, words: &[&str]| {
            c.send(words).await;
            common::reference::show(&c.read().await)
        };
        assert_eq!(
            say(&mut me, &["WATCH", "{t}w", "{t}v"]).await,
            "+OK",
            "{server}"
        );
        assert_eq!(say(&mut other, &["SET", "{t}w", "theirs"]).await, "+OK");
        assert_eq!(say(&mut me, &["MULTI"]).await, "+OK");
        assert_eq!(say(&mut me, &["SET", "{t}v", "mine"]).await, "+QUEUED");
        assert_eq!(
            say(&mut me, &["EXEC"]).await,
            "(nil)",
            "{server}: a changed key"
        );
        assert_eq!(say(&mut me, &["GET", "{t}v"]).await, "(nil)", "{server}");
        assert_eq!(say(&mut me, &["WATCH", "{t}w"]).await, "+OK");
        assert_eq!(say(&mut me, &["MULTI"]).await, "+OK");
        assert_eq!(say(&mut me, &["SET", "{t}v", "mine"]).await, "+QUEUED");
        assert_eq!(
            say(&mut me, &["EXEC"]).await,
            "[+OK]",
            "{server}: nothing changed"
        );
    }
}

/// Keys that expire: SET's expiry options, EXPIRE and kin with their conditions, TTL, PTTL,
/// EXPIRETIME, PERSIST, GETEX, which writes keep or clear an expiry, and Redis's error texts.
/// Times far from now (so that both answer the same second) or already past.
#[tokio::test]
async fn expiring_keys_answer_as_redis() {
    let (node, redis) = (start_node(true).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["SET", "k", "v", "EX", "1000"], 1),
        (&["TTL", "k"], 1),
        (&["SET", "k", "v", "EXAT", "4000000000"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["PEXPIRETIME", "k"], 1),
        (&["SET", "k", "w", "KEEPTTL"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["APPEND", "k", "x"], 1),
        (&["INCR", "k"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["SET", "k", "v"], 1),
        (&["TTL", "k"], 1),
        (&["PTTL", "k"], 1),
        (&["TTL", "absent"], 1),
        (&["PTTL", "absent"], 1),
        (&["EXPIRETIME", "absent"], 1),
        (&["EXPIRE", "absent", "10"], 1),
        (&["PERSIST", "k"], 1),
        (&["EXPIRE", "k", "1000", "XX"], 1),
        (&["EXPIRE", "k", "1000", "GT"], 1),
        (&["EXPIREAT", "k", "4000000000", "NX"], 1),
        (&["EXPIREAT", "k", "4100000000", "NX"], 1),
        (&["EXPIREAT", "k", "3900000000", "GT"], 1),
        (&["EXPIREAT", "k", "4100000000", "GT"], 1),
        (&["PEXPIREAT", "k", "4200000000000", "LT"], 1),
        (&["PEXPIREAT", "k", "3900000000000", "LT"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["EXPIREAT", "k", "4000000000", "XX", "LT"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["PERSIST", "k"], 1),
        (&["PERSIST", "k"], 1),
        (&["TTL", "k"], 1),
        (&["EXPIRE", "k", "1000", "LT"], 1),
        (&["TTL", "k"], 1),
        (&["GETEX", "k"], 1),
        (&["GETEX", "k", "PERSIST"], 1),
        (&["TTL", "k"], 1),
        (&["GETEX", "k", "EXAT", "4000000000"], 1),
        (&["EXPIRETIME", "k"], 1),
        (&["GETEX", "absent", "EX", "10"], 1),
        // Already past: the key goes.
        (&["EXPIRE", "k", "-1"], 1),
        (&["EXISTS", "k"], 1),
        (&["SET", "p", "v", "PXAT", "1"], 1),
        (&["GET", "p"], 1),
        (&["SET", "p", "v"], 1),
        (&["SET", "p", "w", "EXAT", "1", "GET"], 1),
        (&["EXISTS", "p"], 1),
        (&["SET", "q", "v"], 1),
        (&["EXPIREAT", "q", "1"], 1),
        (&["GET", "q"], 1),
        (&["DBSIZE"], 1),
        // Errors, nothing changed.
        (&["SET", "k", "v", "EX", "0"], 1),
        (&["SET", "k", "v", "PX", "-3"], 1),
        (&["SET", "k", "v", "EX", "1.5"], 1),
        (&["SET", "k", "v", "EX", "10", "PX", "10"], 1),
        (&["SET", "k", "v", "EX", "10", "KEEPTTL"], 1),
        (&["SET", "k", "v", "EX"], 1),
        (&["GETEX", "k", "EX", "0"], 1),
        (&["GETEX", "k", "PERSIST", "EX", "10"], 1),
        (&["GETEX", "k", "FOREVER"], 1),
        (&["EXPIRE", "k", "10", "NX", "XX"], 1),
        (&["EXPIRE", "k", "10", "GT", "LT"], 1),
        (&["EXPIRE", "k", "10", "NX", "GT"], 1),
        (&["EXPIRE", "k", "10", "SOON"], 1),
        (&["EXPIRE", "k", "ten"], 1),
        (&["EXISTS", "k"], 1),
        (&["SET", "k", "v"], 1),
        (&["GETEX", "k", "EX", "0"], 1),
        (&["GETEX", "k", "PX", "-1"], 1),
        (&["XADD", "s", "1-1", "f", "v"], 1),
        (&["GETEX", "s", "EX", "0"], 1),
        (&["EXPIRE", "s", "1000"], 1),
        (&["TTL", "s"], 1),
        (&["TTL", "k"], 1),
    ])
    .await;
}
