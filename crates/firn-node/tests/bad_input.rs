//! Bad input gets a clear error, changes nothing, and the connection stays usable.

mod common;

use common::*;
use redis::{AsyncCommands, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends raw bytes and reads until the reply(ies) arrive.
async fn raw_exchange(stream: &mut TcpStream, bytes: &[u8], expect_lines: usize) -> String {
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.iter().filter(|&&b| b == b'\n').count() < expect_lines {
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "connection closed; got so far: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn err_of(c: &mut redis::aio::MultiplexedConnection, cmd: &redis::Cmd) -> redis::RedisError {
    cmd.query_async::<Value>(c)
        .await
        .expect_err("the command should fail")
}

async fn assert_still_usable(c: &mut redis::aio::MultiplexedConnection) {
    let pong: String = redis::cmd("PING").query_async(c).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn oversized_key_and_value_are_refused_with_the_limit_named() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let big_key = vec![b'k'; 8193];
    let e = err_of(&mut c, redis::cmd("SET").arg(&big_key).arg("v")).await;
    assert!(
        e.to_string()
            .contains("key is 8193 bytes; the limit is 8192"),
        "{e}"
    );
    // Above the inline limit a value goes beside the log (large_values.rs); above RESP's
    // limit it is refused. MSET carries inline values only.
    let big_value = vec![b'v'; firn_model::limits::RESP_VALUE_BYTES_MAX + 1];
    let e = err_of(&mut c, redis::cmd("SET").arg("k").arg(&big_value)).await;
    assert!(
        e.to_string()
            .contains("value is 67108865 bytes; the limit is 67108864"),
        "{e}"
    );
    let e = err_of(
        &mut c,
        redis::cmd("MSET").arg("k").arg(&big_value[..64 * 1024 + 1]),
    )
    .await;
    assert!(
        e.to_string()
            .contains("MSET carries values of at most 65536 bytes"),
        "{e}"
    );
    // A token far ahead of the node's clock is refused: a write after it would stamp
    // everything after it in the future.
    let ahead = format!("{}-0", firn_model::hlc::system_wall_us() + 3_600_000_000);
    let e = err_of(&mut c, redis::cmd("FIRN.AFTER").arg(&ahead)).await;
    assert!(e.to_string().contains("in the future"), "{e}");
    let stamp: Vec<redis::Value> = redis::cmd("FIRN.PUT")
        .arg("stamped")
        .arg("v")
        .query_async(&mut c)
        .await
        .unwrap();
    let redis::Value::BulkString(ts) = &stamp[1] else {
        panic!("{stamp:?}")
    };
    let wall: u64 = std::str::from_utf8(ts)
        .unwrap()
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        wall < firn_model::hlc::system_wall_us() + 1_000_000,
        "a write after a refused token is stamped {wall}, in the future"
    );
    redis::cmd("DEL")
        .arg("stamped")
        .exec_async(&mut c)
        .await
        .unwrap();
    assert_still_usable(&mut c).await;
    assert_eq!(
        redis::cmd("DBSIZE")
            .query_async::<i64>(&mut c)
            .await
            .unwrap(),
        0
    );
    assert_eq!(c.get::<_, Option<String>>("k").await.unwrap(), None);
    node.shutdown().await;
}

#[tokio::test]
async fn wrong_arity_unknown_commands_and_bad_options_are_errors() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let e = err_of(&mut c, &redis::cmd("GET")).await;
    assert!(
        e.to_string()
            .contains("wrong number of arguments for 'get'"),
        "{e}"
    );
    let e = err_of(&mut c, redis::cmd("SET").arg("only-key")).await;
    assert!(
        e.to_string()
            .contains("wrong number of arguments for 'set'"),
        "{e}"
    );
    let e = err_of(&mut c, redis::cmd("MSET").arg("k1").arg("v1").arg("k2")).await;
    assert!(
        e.to_string()
            .contains("wrong number of arguments for 'mset'"),
        "{e}"
    );
    let e = err_of(&mut c, redis::cmd("NOSUCHCOMMAND").arg("x")).await;
    assert!(
        e.to_string().contains("unknown command 'NOSUCHCOMMAND'"),
        "{e}"
    );
    let e = err_of(&mut c, redis::cmd("SET").arg("k").arg("v").arg("BOGUS")).await;
    assert!(e.to_string().contains("syntax error"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("SET").arg("k").arg("v").arg("NX").arg("XX"),
    )
    .await;
    assert!(e.to_string().contains("syntax error"), "{e}");
    let long_prefix = vec![b'p'; 8193];
    let e = err_of(&mut c, redis::cmd("FIRN.SCAN").arg(&long_prefix)).await;
    assert!(
        e.to_string()
            .contains("prefix is 8193 bytes; the limit is 8192"),
        "{e}"
    );
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.TRUNCATE")
            .arg("PREFIX")
            .arg(&long_prefix)
            .arg("VERSION")
            .arg(1),
    )
    .await;
    assert!(e.to_string().contains("prefix is 8193 bytes"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.WATCH").arg(&long_prefix).arg("PREFIX"),
    )
    .await;
    assert!(e.to_string().contains("prefix is 8193 bytes"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.HISTORY").arg("k").arg("LIMIT").arg(0),
    )
    .await;
    assert!(e.to_string().contains("out of range"), "{e}");
    assert_still_usable(&mut c).await;
    assert_eq!(
        redis::cmd("DBSIZE")
            .query_async::<i64>(&mut c)
            .await
            .unwrap(),
        0
    );
    node.shutdown().await;
}

#[tokio::test]
async fn bad_times_and_unknown_keyspace_modes_are_errors() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let _: () = c.set("k", "v").await.unwrap();
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.GET").arg("k").arg("ASOF").arg("yesterday"),
    )
    .await;
    assert!(e.to_string().contains("not a time"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.PUT")
            .arg("k")
            .arg("v2")
            .arg("EVENTTIME")
            .arg("13:00"),
    )
    .await;
    assert!(e.to_string().contains("not a time"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("MODE")
            .arg("forever"),
    )
    .await;
    assert!(
        e.to_string()
            .contains("unknown keyspace mode 'forever'; use versioned, latest or notify"),
        "{e}"
    );
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("MAXVERSIONS")
            .arg(0),
    )
    .await;
    assert!(e.to_string().contains("at least 1"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("DURABILITY")
            .arg("ssd"),
    )
    .await;
    assert!(e.to_string().contains("unknown durability 'ssd'"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("LOCAL")
            .arg("maybe"),
    )
    .await;
    assert!(e.to_string().contains("LOCAL takes on or off"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("FOLLOW")
            .arg("sometimes"),
    )
    .await;
    assert!(e.to_string().contains("use on, off or a node id"), "{e}");
    // A pin to a node the cluster does not have is refused, not kept.
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg("x/")
            .arg("FOLLOW")
            .arg("2"),
    )
    .await;
    assert!(e.to_string().contains("the cluster has no node 2"), "{e}");
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.GET")
            .arg("k")
            .arg("CONSISTENCY")
            .arg("sometimes"),
    )
    .await;
    assert!(e.to_string().contains("unknown consistency"), "{e}");
    assert_still_usable(&mut c).await;
    let keyspaces: Vec<Value> = redis::cmd("FIRN.KEYSPACE")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(keyspaces.len(), 1, "only the default keyspace exists");
    let history: Vec<Value> = redis::cmd("FIRN.HISTORY")
        .arg("k")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(history.len(), 1, "no failed write made a version");
    node.shutdown().await;
}

#[tokio::test]
async fn failed_conditions_write_nothing() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let _: () = c.set("k", "v1").await.unwrap();
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.PUT")
            .arg("k")
            .arg("v2")
            .arg("IFVERSION")
            .arg(0),
    )
    .await;
    assert_eq!(e.code(), Some("CONFLICT"));
    let e = err_of(
        &mut c,
        redis::cmd("FIRN.PUT")
            .arg("k")
            .arg("v2")
            .arg("IFVERSION")
            .arg(7),
    )
    .await;
    assert!(e.to_string().contains("current version is 1"), "{e}");
    assert_eq!(c.get::<_, String>("k").await.unwrap(), "v1");
    let history: Vec<Value> = redis::cmd("FIRN.HISTORY")
        .arg("k")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    node.shutdown().await;
}

#[tokio::test]
async fn malformed_resp_gets_a_protocol_error_and_the_connection_goes_on() {
    let node = start_node(false).await;
    let mut s = TcpStream::connect(node.resp_addr).await.unwrap();
    // A bulk string whose length is not a number.
    let reply = raw_exchange(&mut s, b"*1\r\n$abc\r\nPING\r\n", 1).await;
    assert!(reply.starts_with("-ERR Protocol error"), "{reply}");
    let reply = raw_exchange(&mut s, b"*1\r\n$4\r\nPING\r\n", 1).await;
    assert_eq!(reply, "+PONG\r\n");
    // An array of integers instead of bulk strings is still read as arguments; a nested
    // array is refused.
    let reply = raw_exchange(&mut s, b"*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\nx\r\n", 1).await;
    assert!(reply.starts_with("-ERR Protocol error"), "{reply}");
    // Inline commands, as typed into telnet.
    let reply = raw_exchange(&mut s, b"PING\r\n", 1).await;
    assert_eq!(reply, "+PONG\r\n");
    let reply = raw_exchange(&mut s, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 1).await;
    assert_eq!(reply, "+OK\r\n");
    node.shutdown().await;
}

/// A node that is still joining knows no layout: every request, snapshots and watches
/// included, is refused with CLUSTERDOWN — the connection stays usable, nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_layout_refuses_requests_and_keeps_the_connection() {
    let config = firn_node::NodeConfig {
        resp_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        in_memory: true,
        // Nobody listens there: the node stays a joining node without a layout.
        join: Some("127.0.0.1:9".into()),
        ..firn_node::NodeConfig::default()
    };
    let node = firn_node::RunningNode::start(config)
        .await
        .expect("node starts");
    let mut con = redis_conn(&node).await;
    let commands: Vec<Vec<&str>> = vec![
        vec!["FIRN.SNAPSHOT", "KEYS", "a", "b"],
        vec!["FIRN.SNAPSHOT", "PREFIX", "a"],
        vec!["GET", "a"],
        vec!["MGET", "a", "b"],
        vec!["SET", "a", "1"],
        vec!["FIRN.SCAN", ""],
        vec!["DBSIZE"],
    ];
    for command in commands {
        let mut cmd = redis::cmd(command[0]);
        for arg in &command[1..] {
            cmd.arg(*arg);
        }
        let err = cmd
            .query_async::<redis::Value>(&mut con)
            .await
            .expect_err(&format!("{command:?} is refused"));
        assert_eq!(err.code(), Some("CLUSTERDOWN"), "{command:?}: {err}");
    }
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG", "the connection is still usable");
    // Over HTTP too.
    let url = format!("http://{}/v1/snapshot?key=a", node.http_addr);
    let status = match ureq::get(&url).call() {
        Err(ureq::Error::Status(code, _)) => code,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(status, 503);
    node.shutdown().await;
}
