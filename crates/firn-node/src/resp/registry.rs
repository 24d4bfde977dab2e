//! The one list of RESP commands. Dispatch (name → parse, with the arity checked first),
//! `COMMAND`, `COMMAND COUNT/LIST/INFO/DOCS` are all read from [`COMMANDS`], so what the
//! node says it accepts is what it accepts. Adding a command is a file under `cmd/` and one
//! line here.

use std::collections::{HashMap, VecDeque};
use std::sync::LazyLock;

use bytes::Bytes;
use firn_model::FirnError;

use super::args::Args;
use super::cmd::*;
use super::command::{Action, CommandSpec};
use super::reply::Reply;

/// Every command the node accepts, in the order `COMMAND` lists them.
pub const COMMANDS: &[CommandSpec] = &[
    connection::PING,
    connection::ECHO,
    connection::HELLO,
    connection::AUTH,
    connection::ACL,
    connection::SELECT,
    connection::CLIENT,
    server::COMMAND,
    server::CONFIG,
    server::INFO,
    server::DBSIZE,
    get::GET,
    set::SET,
    del::DEL,
    del::UNLINK,
    exists::EXISTS,
    mget::MGET,
    mset::MSET,
    mset::MSETNX,
    change::INCR,
    change::INCRBY,
    change::DECR,
    change::DECRBY,
    change::INCRBYFLOAT,
    change::APPEND,
    change::GETDEL,
    expire::EXPIRE,
    expire::PEXPIRE,
    expire::EXPIREAT,
    expire::PEXPIREAT,
    expire::PERSIST,
    expire::TTL,
    expire::PTTL,
    expire::EXPIRETIME,
    expire::PEXPIRETIME,
    expire::GETEX,
    firn_lease::FIRN_LEASE,
    firn_function::FIRN_FUNCTION,
    fcall::FCALL,
    firn_trigger::FIRN_TRIGGER,
    firn_timer::FIRN_TIMER,
    set::GETSET,
    set::SETNX,
    multi::MULTI,
    multi::EXEC,
    multi::DISCARD,
    multi::WATCH,
    multi::UNWATCH,
    firn_txn::FIRN_TXN,
    idmp::IDMP,
    scan::SCAN,
    get::TYPE,
    server::FLUSHALL,
    server::FLUSHDB,
    connection::QUIT,
    firn_put::FIRN_PUT,
    firn_get::FIRN_GET,
    firn_get::FIRN_MGET,
    firn_del::FIRN_DEL,
    firn_history::FIRN_HISTORY,
    firn_scan::FIRN_SCAN,
    firn_snapshot::FIRN_SNAPSHOT,
    firn_truncate::FIRN_TRUNCATE,
    firn_watch::FIRN_WATCH,
    firn_watch::FIRN_UNWATCH,
    firn_keyspace::FIRN_KEYSPACE,
    firn_watermark::FIRN_WATERMARK,
    firn_twin::FIRN_TWIN,
    firn_local::FIRN_LOCAL,
    firn_log::FIRN_LOG,
    firn_logs::FIRN_LOGS,
    xadd::XADD,
    xadd::XTRIM,
    xdel::XDEL,
    xrange::XRANGE,
    xrange::XREVRANGE,
    xread::XREAD,
    xinfo::XLEN,
    xinfo::XINFO,
    xinfo::FIRN_GROUPS,
    xgroup::XGROUP,
    xreadgroup::XREADGROUP,
    xack::XACK,
    xpending::XPENDING,
    xclaim::XCLAIM,
    xclaim::XAUTOCLAIM,
    cluster::CLUSTER,
    cluster::READONLY,
    cluster::READWRITE,
    cluster::FIRN_CLUSTER,
    session::FIRN_AFTER,
    session::FIRN_TOKEN,
    publish::PUBLISH,
    publish::PUBSUB,
    subscribe::SUBSCRIBE,
    subscribe::PSUBSCRIBE,
    subscribe::UNSUBSCRIBE,
    subscribe::PUNSUBSCRIBE,
    subscribe::RESET,
    service::FIRN_REQUEST,
    service::FIRN_SERVE,
    service::FIRN_REPLY,
];

/// The registry by upper-case name, as frames carry it.
static BY_NAME: LazyLock<HashMap<String, &'static CommandSpec>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .map(|spec| (spec.name.to_ascii_uppercase(), spec))
        .collect()
});

/// Finds the command named `name` (upper case), checks its arity, and parses its arguments.
pub fn dispatch(name: &str, items: VecDeque<Bytes>) -> Result<Action, FirnError> {
    let spec = BY_NAME
        .get(name)
        .ok_or_else(|| unknown_command(name, &items))?;
    dispatch_to(spec, name, items)
}

/// Redis's answer to a command it does not know: the name, then the first arguments, each
/// quoted, up to 128 bytes in all. (The name is shown as this node reads it, upper case.)
pub fn unknown_command(name: &str, args: &VecDeque<Bytes>) -> FirnError {
    let mut shown = String::new();
    for arg in args {
        if shown.len() >= 128 {
            break;
        }
        let text = String::from_utf8_lossy(arg);
        let room = 128 - shown.len();
        let cut: String = text
            .chars()
            .scan(0, |n, c| {
                *n += c.len_utf8();
                (*n <= room).then_some(c)
            })
            .collect();
        shown.push_str(&format!("'{cut}' "));
    }
    let name: String = name.chars().take(128).collect();
    FirnError::UnknownCommand(format!("'{name}', with args beginning with: {shown}"))
}

/// Whether the node knows a command named `name` (upper case).
pub fn knows(name: &str) -> bool {
    BY_NAME.contains_key(name)
}

fn dispatch_to(
    spec: &CommandSpec,
    name: &str,
    items: VecDeque<Bytes>,
) -> Result<Action, FirnError> {
    // Redis counts the name in the arity.
    if !arity_allows(spec.arity, items.len() + 1) {
        return Err(FirnError::WrongArity(spec.name.into()));
    }
    (spec.parse)(Args::new(name.to_string(), items))
}

fn arity_allows(arity: i64, argc: usize) -> bool {
    let n = arity.unsigned_abs() as usize;
    if arity < 0 { argc >= n } else { argc == n }
}

/// `[name, arity, flags, first key, last key, step]`, as `COMMAND` shows a command.
fn command_entry(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::text(spec.name),
        Reply::Int(spec.arity),
        Reply::Array(
            spec.flags
                .iter()
                .map(|f| Reply::Simple(f.as_str().into()))
                .collect(),
        ),
        Reply::Int(spec.keys.first),
        Reply::Int(spec.keys.last),
        Reply::Int(spec.keys.step),
    ])
}

/// `COMMAND` and `COMMAND INFO name…`: every command, or the named ones in the order asked
/// (nil for a name the node does not know), as Redis answers.
pub fn command_entries(names: Option<&[Bytes]>) -> Reply {
    match names {
        None => Reply::Array(COMMANDS.iter().map(command_entry).collect()),
        Some(names) => Reply::Array(
            names
                .iter()
                .map(|n| find(n).map_or(Reply::Nil, command_entry))
                .collect(),
        ),
    }
}

/// `COMMAND DOCS name…`: a map of name → {summary, since, group} for each known name.
/// Without names it answers an empty map rather than every command: redis-cli asks for
/// them all to build its typing hints, and an empty answer leaves it its own (full) hints
/// instead of ours, which have no argument lists. docs/api.md is the reference.
pub fn command_docs(names: &[Bytes]) -> Reply {
    Reply::Map(
        names
            .iter()
            .filter_map(|n| find(n))
            .map(|spec| {
                (
                    Reply::text(spec.name),
                    Reply::Map(vec![
                        (Reply::text("summary"), Reply::text(spec.summary)),
                        (Reply::text("since"), Reply::text(spec.since)),
                        (Reply::text("group"), Reply::text(spec.group.as_str())),
                    ]),
                )
            })
            .collect(),
    )
}

fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    BY_NAME
        .get(&String::from_utf8_lossy(name).to_ascii_uppercase())
        .copied()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn words(words: &[&str]) -> VecDeque<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    fn items(n: usize) -> VecDeque<Bytes> {
        (0..n).map(|i| Bytes::from(format!("x{i}"))).collect()
    }

    /// The fewest arguments (after the name) the spec's arity allows.
    fn fewest(spec: &CommandSpec) -> usize {
        spec.arity.unsigned_abs() as usize - 1
    }

    #[test]
    fn names_are_unique_and_lower_case() {
        let mut seen = HashSet::new();
        for spec in COMMANDS {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase(), "{}", spec.name);
            assert!(seen.insert(spec.name), "{} is listed twice", spec.name);
            assert!(spec.arity != 0, "{} has arity 0", spec.name);
            assert!(!spec.summary.is_empty(), "{} has no summary", spec.name);
        }
    }

    #[test]
    fn every_listed_command_dispatches() {
        for spec in COMMANDS {
            let upper = spec.name.to_ascii_uppercase();
            // Made-up arguments may be refused, but never as an unknown command.
            for n in [fewest(spec), fewest(spec) + 2] {
                if spec.arity > 0 && n != fewest(spec) {
                    continue;
                }
                if let Err(e) = dispatch(&upper, items(n)) {
                    assert!(
                        !matches!(e, FirnError::UnknownCommand(_)),
                        "{} with {n} arguments: {e}",
                        spec.name
                    );
                }
            }
        }
        assert!(matches!(
            dispatch("NOSUCHCOMMAND", items(1)),
            Err(FirnError::UnknownCommand(n)) if n.starts_with("'NOSUCHCOMMAND', with args beginning with: ")
        ));
    }

    #[test]
    fn command_count_and_list_are_the_registry() {
        let count = dispatch("COMMAND", words(&["count"]));
        assert!(matches!(count, Ok(Action::Reply(Reply::Int(n))) if n as usize == COMMANDS.len()));
        let Ok(Action::Reply(Reply::Array(all))) = dispatch("COMMAND", items(0)) else {
            panic!("COMMAND answers an array");
        };
        assert_eq!(all.len(), COMMANDS.len());
        let Ok(Action::Reply(Reply::Array(list))) = dispatch("COMMAND", words(&["LIST"])) else {
            panic!("COMMAND LIST answers an array");
        };
        let names: Vec<Reply> = COMMANDS.iter().map(|s| Reply::text(s.name)).collect();
        assert_eq!(list, names);
    }

    #[test]
    fn command_info_and_docs_describe_the_named_commands() {
        let names: Vec<Bytes> = words(&["get", "NOPE", "FIRN.PUT"]).into();
        let Reply::Array(info) = command_entries(Some(&names)) else {
            panic!("COMMAND INFO answers an array");
        };
        assert_eq!(
            info,
            vec![
                Reply::Array(vec![
                    Reply::text("get"),
                    Reply::Int(2),
                    Reply::Array(vec![
                        Reply::Simple("readonly".into()),
                        Reply::Simple("fast".into())
                    ]),
                    Reply::Int(1),
                    Reply::Int(1),
                    Reply::Int(1),
                ]),
                Reply::Nil,
                command_entry(&firn_put::FIRN_PUT),
            ]
        );
        let Reply::Map(docs) = command_docs(&names) else {
            panic!("COMMAND DOCS answers a map");
        };
        assert_eq!(docs.len(), 2, "an unknown name is left out");
        assert_eq!(docs[0].0, Reply::text("get"));
        assert_eq!(
            docs[0].1,
            Reply::Map(vec![
                (Reply::text("summary"), Reply::text(get::GET.summary)),
                (Reply::text("since"), Reply::text("0.1.0")),
                (Reply::text("group"), Reply::text("string")),
            ])
        );
        assert_eq!(command_docs(&[]), Reply::Map(vec![]));
    }

    #[test]
    fn a_wrong_arity_is_refused_from_the_spec_before_parsing() {
        fn must_not_parse(_: Args) -> Result<Action, FirnError> {
            panic!("parse ran despite a wrong arity");
        }
        let exactly_two = CommandSpec {
            parse: must_not_parse,
            ..get::GET
        };
        for n in [0, 2, 5] {
            let e = dispatch_to(&exactly_two, "GET", items(n)).err();
            assert!(
                matches!(&e, Some(FirnError::WrongArity(name)) if name == "get"),
                "{n} arguments: {e:?}"
            );
        }
        let at_least_three = CommandSpec {
            parse: must_not_parse,
            ..set::SET
        };
        let e = dispatch_to(&at_least_three, "SET", items(1)).err();
        assert!(matches!(&e, Some(FirnError::WrongArity(name)) if name == "set"));
        assert_eq!(
            e.map(|e| e.to_string()).unwrap_or_default(),
            "wrong number of arguments for 'set' command"
        );

        // And every registered command: one argument too few (or, for an exact arity, one
        // too many) is the arity error, whatever parse would have said.
        for spec in COMMANDS {
            let wrong = match spec.arity {
                a if a > 0 => fewest(spec) + 1,
                -1 => continue, // no count is too few
                _ => fewest(spec) - 1,
            };
            let e = dispatch(&spec.name.to_ascii_uppercase(), items(wrong)).err();
            assert!(
                matches!(&e, Some(FirnError::WrongArity(name)) if name == spec.name),
                "{} with {wrong} arguments: {e:?}",
                spec.name
            );
        }
    }
}
