//! Random commands, built from every command the node names in `COMMAND` and from words and
//! values its commands take, each answered — a reply or an error — on a connection that goes
//! on: the node never panics or drops a client on what it sends. And random sequences of the
//! commands left out of that (those that change what a connection is or make it wait),
//! pipelined in one write: every reply readable, the connection never lost. proptest makes
//! them and, on a failure, shrinks it to the smallest input that still fails. Seeded: the
//! seed is printed, and `FIRN_TEST_SEED=<seed>` replays a run; `FIRN_FUZZ_COMMANDS` sets how
//! many commands (or sequences) a test sends.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::fuzz::{on_one_node, on_two_nodes, runner};
use common::*;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redis_protocol::resp3::types::Resp3Frame;

/// Commands left out: they change what the connection is (a subscriber, a watcher, a
/// service worker, RESP3, closed, authenticated) or wait by design (for a reply, a record, a
/// token). The sequences below and their own tests cover them.
const LEFT_OUT: &[&str] = &[
    "quit",
    "hello",
    "reset",
    "auth",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "firn.watch",
    "firn.unwatch",
    "firn.serve",
    "firn.request",
    "firn.reply",
    "firn.after",
];

/// Words the commands take (options, subcommands, modes), and `BLOCK`'s kin left out.
const WORDS: &[&str] = &[
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "NX",
    "XX",
    "GET",
    "KEEPTTL",
    "VERSION",
    "ASOF",
    "EVENTTIME",
    "IFVERSION",
    "COUNT",
    "MATCH",
    "TYPE",
    "LIMIT",
    "MAXLEN",
    "MINID",
    "NOMKSTREAM",
    "STREAMS",
    "GROUP",
    "CREATE",
    "DESTROY",
    "SETID",
    "CREATECONSUMER",
    "DELCONSUMER",
    "MKSTREAM",
    "ENTRIESREAD",
    "IDLE",
    "TIME",
    "RETRYCOUNT",
    "FORCE",
    "JUSTID",
    "LASTID",
    "NOACK",
    "CONSUMERS",
    "GROUPS",
    "STREAM",
    "FULL",
    "HELP",
    "LIST",
    "DROP",
    "MODE",
    "versioned",
    "latest",
    "notify",
    "MAXVERSIONS",
    "MAXAGE",
    "DURABILITY",
    "disk",
    "memory",
    "LOCAL",
    "FOLLOW",
    "on",
    "off",
    "APPEND",
    "NEXT",
    "READ",
    "TAGS",
    "INFO",
    "TRIM",
    "FROM",
    "TO",
    "BEFORE",
    "AFTER",
    "REV",
    "CONSISTENCY",
    "linearizable",
    "lease",
    "local",
    "NODES",
    "SLOTS",
    "SHARDS",
    "MYID",
    "KEYSLOT",
    "DOCS",
    "GETKEYS",
    "SET",
    "RESETSTAT",
    "PREFIX",
    "KEYS",
    "VALUES",
    "TAG",
    "SEQ",
    "FIELDS",
    "ALL",
    "STATUS",
    "POLICY",
    "ACK",
    "CLAIM",
    "~",
    "=",
    "*",
    "$",
    ">",
    "-",
    "+",
    "0",
    "0-0",
    "1-1",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "7",
    "100",
    "10001",
    "65536",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1.5",
    "-0",
    "nan",
    "inf",
    "1e309",
    "0x10",
    " 1",
];

const TIMES: &[&str] = &[
    "2026-11-22T10:00:00Z",
    "2026-11-22T10:00:00.123456+02:00",
    "1970-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2026-13-45T99:99:99Z",
    "1795319950123456-0",
    "1795319950123456-4294967295",
    "18446744073709551615-18446744073709551615",
    "1-",
    "-5",
    "90s",
    "15m",
    "7d",
    "0s",
    "99999999999d",
];

const KEYS: &[&str] = &[
    "k", "k2", "sensor/7", "s/", "{t}a", "{t}b", "stream", "log", "", "a b", "é", "*", "?",
];

/// One word of a command: a word the commands take, a number, a time, a key, random bytes,
/// or a key or value past its limit (a key over 8 KiB, a value over the node's 64 KiB).
fn word() -> impl Strategy<Value = Vec<u8>> {
    let text = |words: &'static [&'static str]| select(words).prop_map(|w| w.as_bytes().to_vec());
    prop_oneof![
        3 => text(WORDS),
        2 => text(NUMBERS),
        1 => text(TIMES),
        2 => text(KEYS),
        1 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => select(&[8_193usize, 70_000][..]).prop_map(|n| vec![b'x'; n]),
    ]
}

fn shown(name: &str, args: &[Vec<u8>]) -> String {
    let mut s = name.to_string();
    for a in args {
        s.push(' ');
        if a.len() > 64 {
            s.push_str(&format!("<{} bytes>", a.len()));
        } else {
            s.push_str(&format!("{:?}", String::from_utf8_lossy(a)));
        }
    }
    s
}

/// The commands the node says it has (`COMMAND`: each entry's first element is its name).
async fn commands(c: &mut MultiplexedConnection) -> Vec<String> {
    let Value::Array(entries) = ok(c, &["COMMAND"]).await else {
        panic!("COMMAND is not an array");
    };
    let names: Vec<String> = entries
        .iter()
        .filter_map(|e| match e {
            Value::Array(fields) => match fields.first() {
                Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).to_lowercase()),
                Some(Value::SimpleString(s)) => Some(s.to_lowercase()),
                _ => None,
            },
            _ => None,
        })
        .filter(|n| !LEFT_OUT.contains(&n.as_str()))
        .collect();
    assert!(
        names.len() >= 40,
        "COMMAND named only {} commands: {names:?}",
        names.len()
    );
    names
}

#[test]
fn random_commands_are_each_answered_and_the_connection_goes_on() {
    on_one_node("resp fuzz (one node)", 3_000, fuzz);
}

/// The same on one node of two with four shards: commands of keys on several shards are
/// split, forwarded to the other node and merged.
#[test]
fn random_commands_across_shards_and_nodes_are_each_answered() {
    on_two_nodes("resp fuzz (two nodes)", 1_500, fuzz);
}

/// Sends `cases` random commands to `node`, each of which must be answered, the connection
/// going on; then the node must still take a write and read it back.
fn fuzz(rt: &tokio::runtime::Runtime, node: &firn_node::RunningNode, seed: u64, cases: u32) {
    let (names, conn) = rt.block_on(async {
        let mut c = redis_conn_patient(node).await;
        let names = commands(&mut c).await;
        // Something for the reads to find: a key, a stream with a group.
        ok(&mut c, &["SET", "k", "v"]).await;
        ok(&mut c, &["XADD", "stream", "*", "f", "v"]).await;
        ok(&mut c, &["XGROUP", "CREATE", "stream", "g", "0"]).await;
        (names, c)
    });
    // A connection the node dropped fails its case; the next case (shrinking goes on after
    // a failure) gets a new one.
    let conn = Mutex::new(Some(conn));
    let outcomes = Mutex::new((0u32, 0u32));

    let mut runner = runner(seed, cases);
    // Most commands take a key first: one in two commands starts with one.
    let key = select(KEYS).prop_map(|k| k.as_bytes().to_vec());
    let args = prop_oneof![
        proptest::collection::vec(word(), 0..8),
        (key, proptest::collection::vec(word(), 0..7)).prop_map(|(k, mut rest)| {
            rest.insert(0, k);
            rest
        }),
    ];
    let command = (select(names), args);
    let result = runner.run(&command, |(name, args)| {
        rt.block_on(async {
            let kept = conn.lock().unwrap().take();
            let mut c = match kept {
                Some(c) => c,
                None => redis_conn_patient(node).await,
            };
            let mut cmd = redis::cmd(&name);
            for a in &args {
                cmd.arg(a);
            }
            let outcome =
                tokio::time::timeout(Duration::from_secs(30), cmd.query_async::<Value>(&mut c))
                    .await;
            let verdict = match outcome {
                Err(_) => Err(format!("not answered within 30 s: {}", shown(&name, &args))),
                Ok(Ok(_)) => {
                    outcomes.lock().unwrap().0 += 1;
                    Ok(())
                }
                // A refusal from the server has its code; anything else (the connection
                // closed, a reply the client could not read) fails the case.
                Ok(Err(e)) if e.code().is_some() => {
                    outcomes.lock().unwrap().1 += 1;
                    Ok(())
                }
                Ok(Err(e)) => Err(format!("{e}: {}", shown(&name, &args))),
            };
            // And the connection must still take a command: a node that answered and then
            // closed it fails this case, not the next.
            let verdict = match verdict {
                Ok(()) => redis::cmd("PING")
                    .query_async::<Value>(&mut c)
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        format!("the connection failed after {}: {e}", shown(&name, &args))
                    }),
                failed => failed,
            };
            if verdict.is_ok() {
                *conn.lock().unwrap() = Some(c);
            }
            verdict.map_err(TestCaseError::fail)
        })
    });
    if let Err(e) = result {
        panic!("{e} (seed {seed})");
    }
    let (answered, refused) = *outcomes.lock().unwrap();
    eprintln!("resp fuzz: {cases} commands, {answered} answered, {refused} refused");
    // Both outcomes must be common, or the words miss what the commands take.
    assert!(answered > cases / 20, "only {answered} of {cases} answered");
    assert!(refused > cases / 20, "only {refused} of {cases} refused");
    // The node still serves: a connection, a write and a read through Raft.
    rt.block_on(async {
        let mut c = redis_conn_patient(node).await;
        assert_usable(&mut c).await;
        ok(&mut c, &["SET", "after-fuzz", "yes"]).await;
        assert_eq!(bulk_text(&ok(&mut c, &["GET", "after-fuzz"]).await), "yes");
    });
}

/// The commands that change what a connection is — subscriptions, a watch, the protocol
/// version, `RESET` — in random sequences, with commands of every other kind among them.
fn mode_command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let channel = select(&["a", "b", "news.*", "*", "", "a b"][..]);
    let channels = proptest::collection::vec(channel, 0..3);
    let words = |name: &'static str, args: Vec<&'static str>| -> Vec<Vec<u8>> {
        std::iter::once(name)
            .chain(args)
            .map(|w| w.as_bytes().to_vec())
            .collect()
    };
    prop_oneof![
        channels.clone().prop_map(move |c| words("SUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("PSUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("SSUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("UNSUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("PUNSUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("SUNSUBSCRIBE", c)),
        channels.clone().prop_map(move |c| words("PUBLISH", c)),
        select(&["2", "3", "4", "x", ""][..]).prop_map(move |v| words("HELLO", vec![v])),
        Just(words("HELLO", vec![])),
        Just(words("RESET", vec![])),
        Just(words("PING", vec![])),
        Just(words("PING", vec!["hi"])),
        Just(words("GET", vec!["k"])),
        Just(words("SET", vec!["k", "v"])),
        Just(words("FIRN.TOKEN", vec![])),
        Just(words("XADD", vec!["stream", "*", "f", "v"])),
        Just(words("PUBSUB", vec!["CHANNELS"])),
        Just(words("INFO", vec![])),
        Just(words(
            "XREAD",
            vec!["BLOCK", "10", "STREAMS", "stream", "$"]
        )),
        Just(words(
            "XREADGROUP",
            vec!["GROUP", "g", "c", "BLOCK", "10", "STREAMS", "stream", ">"]
        )),
        Just(words("FIRN.SERVE", vec!["svc", "BLOCK", "10"])),
        Just(words("FIRN.REQUEST", vec!["svc", "p", "TIMEOUT", "10"])),
        Just(words("CLIENT", vec!["SETNAME", "fuzz"])),
        Just(words("CLIENT", vec!["GETNAME"])),
        Just(words("SELECT", vec!["1"])),
        Just(words("FIRN.WATCH", vec!["k"])),
        Just(words("FIRN.WATCH", vec!["s/", "PREFIX"])),
        Just(words("FIRN.UNWATCH", vec![])),
    ]
}

/// Sends `commands` on a new connection, then `FIRN.UNWATCH`, `RESET` and `ECHO <end>`, and reads until the
/// echo comes back: every reply must be readable (RESP2 or RESP3) and the node must never
/// close the connection.
async fn run_modes(node: &firn_node::RunningNode, commands: &[Vec<Vec<u8>>]) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let end = b"end-of-sequence".to_vec();
    let mut sent = Vec::new();
    for words in commands.iter().cloned().chain([
        // A watch takes only FIRN.UNWATCH, PING and QUIT; RESET ends the rest.
        vec![b"FIRN.UNWATCH".to_vec()],
        vec![b"RESET".to_vec()],
        vec![b"ECHO".to_vec(), end.clone()],
    ]) {
        sent.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
        for w in words {
            sent.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            sent.extend_from_slice(&w);
            sent.extend_from_slice(b"\r\n");
        }
    }
    let mut stream = tokio::net::TcpStream::connect(node.resp_addr)
        .await
        .map_err(|e| e.to_string())?;
    stream.write_all(&sent).await.map_err(|e| e.to_string())?;
    let mut buf: Vec<u8> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Whole frames first: the last one wanted is the echo.
        while let Some((bytes, used)) = next_frame(&buf)? {
            buf.drain(..used);
            if bytes.as_deref() == Some(&end[..]) {
                return Ok(());
            }
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .map_err(|_| "no echo within 10 s".to_string())?
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the node closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..read]);
    }
}

/// A whole frame read off the connection: its bytes if it is a string, and its length.
type Frame = (Option<Vec<u8>>, usize);

/// The first whole frame of `buf`, in RESP2 or (after `HELLO 3`) RESP3; an error if it is
/// neither.
fn next_frame(buf: &[u8]) -> Result<Option<Frame>, String> {
    use redis_protocol::resp2::types::Resp2Frame;
    match redis_protocol::resp2::decode::decode(buf) {
        Ok(Some((frame, used))) => return Ok(Some((frame.as_bytes().map(<[u8]>::to_vec), used))),
        Ok(None) => return Ok(None),
        Err(_) => {}
    }
    match redis_protocol::resp3::decode::complete::decode(buf) {
        Ok(Some((frame, used))) => Ok(Some((frame.as_bytes().map(<[u8]>::to_vec), used))),
        Ok(None) => Ok(None),
        Err(e) => Err(format!(
            "an unreadable reply ({e:?}): {:?}",
            String::from_utf8_lossy(&buf[..buf.len().min(200)])
        )),
    }
}

#[test]
fn sequences_that_change_the_connections_mode_never_lose_it() {
    on_one_node("resp fuzz (connection modes)", 300, mode_fuzz);
}

/// The same on one node of two with four shards: watches of shards led by the other node,
/// messages published across nodes.
#[test]
fn sequences_that_change_the_connections_mode_never_lose_it_on_a_cluster() {
    on_two_nodes("resp fuzz (connection modes, two nodes)", 150, mode_fuzz);
}

fn mode_fuzz(rt: &tokio::runtime::Runtime, node: &firn_node::RunningNode, seed: u64, cases: u32) {
    let result = runner(seed, cases).run(
        &proptest::collection::vec(mode_command(), 1..16),
        |commands| {
            rt.block_on(run_modes(node, &commands)).map_err(|e| {
                let shown: Vec<String> = commands
                    .iter()
                    .map(|c| String::from_utf8_lossy(&c.join(&b' ')).into_owned())
                    .collect();
                TestCaseError::fail(format!("{e}: {shown:?}"))
            })
        },
    );
    if let Err(e) = result {
        panic!("{e} (seed {seed})");
    }
}
