//! Redis and `FIRN.*` commands: parsing into the typed [`Request`] (or a connection-local
//! action) and rendering the router's [`Response`] the way each command promises.

use bytes::Bytes;
use firn_model::{
    AdminRequest, CommitTs, FirnError, KeyRange, KeyspaceSpec, KvRead, KvWrite, PutRequest, ReadAt,
    ReadConsistency, Request, Response, SnapshotOf, TruncateBefore, VersionInfo, WatchFrom,
    WatchRequest, WriteCondition, Written, limits::PAGE_ITEMS_DEFAULT,
};

use firn_model::time::parse_duration_us;

use super::args::Args;
use super::reply::Reply;

/// What the connection does with a parsed command.
pub enum Action {
    /// Answer at once; nothing reaches the router.
    Reply(Reply),
    Execute(Request, Render),
    /// SCAN with an integer cursor (resolved against the node's cursor table).
    RedisScan {
        cursor: u64,
        pattern: Option<Bytes>,
        count: usize,
        type_filter: Option<String>,
    },
    Watch(WatchRequest),
    Unwatch,
    Hello {
        proto: Option<u8>,
        setname: Option<Bytes>,
    },
    ClientSetName(Bytes),
    ClientGetName,
    ClientId,
    Info(Option<String>),
    /// CLUSTER subcommands that describe the cluster (upper-cased subcommand).
    Cluster(String),
    /// FIRN.CLUSTER REMOVE id: start removing a node.
    ClusterRemove(u64),
    /// FIRN.AFTER token: what this connection sends from now on comes after the token.
    After(CommitTs),
    /// FIRN.TOKEN: this connection's causality token.
    Token,
    Quit,
}

/// Runs `request` and shows its answer `how`.
fn exec(request: impl Into<Request>, how: Render) -> Action {
    Action::Execute(request.into(), how)
}

/// How a command shows the router's answer.
#[derive(Clone, Copy, Debug)]
pub enum Render {
    Get,
    Set { get: bool },
    DelCount,
    Count,
    MGet,
    Ok,
    Type,
    FirnWritten,
    FirnDel,
    FirnValue,
    FirnValues,
    FirnHistory,
    FirnScan,
    FirnSnapshot,
    Truncated,
    Keyspaces,
}

/// Names `COMMAND` lists, with Redis arity (negative: at least).
pub const COMMANDS: &[(&str, i64)] = &[
    ("ping", -1),
    ("echo", 2),
    ("hello", -1),
    ("auth", -2),
    ("select", 2),
    ("client", -2),
    ("command", -1),
    ("config", -2),
    ("info", -1),
    ("dbsize", 1),
    ("get", 2),
    ("set", -3),
    ("del", -2),
    ("unlink", -2),
    ("exists", -2),
    ("mget", -2),
    ("mset", -3),
    ("scan", -2),
    ("type", 2),
    ("flushall", -1),
    ("flushdb", -1),
    ("quit", 1),
    ("firn.put", -3),
    ("firn.get", -2),
    ("firn.mget", -2),
    ("firn.del", 2),
    ("firn.history", -2),
    ("firn.scan", -2),
    ("firn.snapshot", -3),
    ("firn.truncate", 5),
    ("firn.watch", -2),
    ("firn.unwatch", 1),
    ("firn.keyspace", -2),
    ("cluster", -2),
    ("readonly", 1),
    ("readwrite", 1),
    ("firn.cluster", 1),
    ("firn.after", 2),
    ("firn.token", 1),
];

fn unknown_subcommand(cmd: &str, sub: &str) -> FirnError {
    FirnError::BadArgument(format!("unknown subcommand '{sub}' for '{cmd}'"))
}

fn exact_arity(args: &Args, n: usize) -> Result<(), FirnError> {
    if args.len() != n {
        return Err(FirnError::WrongArity(args.name.to_lowercase()));
    }
    Ok(())
}

/// Parses `[CONSISTENCY linearizable|lease|local]` and the read-position options shared by reads.
fn read_options(
    args: &mut Args,
    allow_version: bool,
) -> Result<(ReadAt, ReadConsistency), FirnError> {
    let mut at = ReadAt::Latest;
    let mut consistency = ReadConsistency::Linearizable;
    let set_at = |new: ReadAt, at: &mut ReadAt| {
        if *at != ReadAt::Latest {
            return Err(FirnError::BadArgument(
                "give at most one of VERSION, ASOF, EVENTTIME".into(),
            ));
        }
        *at = new;
        Ok(())
    };
    while let Some(kw) = args.peek_keyword() {
        match kw.as_str() {
            "VERSION" if allow_version => {
                args.bytes()?;
                let v = args.u64("VERSION")?;
                set_at(ReadAt::Version(v), &mut at)?;
            }
            "ASOF" => {
                args.bytes()?;
                let t = args.read_time()?;
                set_at(ReadAt::AsOf(t), &mut at)?;
            }
            "EVENTTIME" => {
                args.bytes()?;
                let t = args.micros()?;
                set_at(ReadAt::EventTime(t), &mut at)?;
            }
            "CONSISTENCY" => {
                args.bytes()?;
                consistency = args.text()?.parse()?;
            }
            _ => break,
        }
    }
    Ok((at, consistency))
}

pub fn parse(name: &str, mut args: Args) -> Result<Action, FirnError> {
    let action = match name {
        "PING" => match args.len() {
            0 => Action::Reply(Reply::Simple("PONG".into())),
            1 => Action::Reply(Reply::Bulk(args.bytes()?)),
            _ => return Err(FirnError::WrongArity("ping".into())),
        },
        "ECHO" => {
            exact_arity(&args, 1)?;
            Action::Reply(Reply::Bulk(args.bytes()?))
        }
        "QUIT" => Action::Quit,
        "HELLO" => {
            let proto = if args.is_empty() {
                None
            } else {
                let v = args.text()?;
                match v.as_str() {
                    "2" => Some(2),
                    "3" => Some(3),
                    _ => {
                        return Ok(Action::Reply(Reply::Error(
                            "NOPROTO unsupported protocol version".into(),
                        )));
                    }
                }
            };
            let mut setname = None;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    // No users or passwords exist on a Firn node: any credentials are accepted.
                    "AUTH" => {
                        args.bytes()?;
                        args.bytes()?;
                    }
                    "SETNAME" => setname = Some(args.bytes()?),
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "syntax error in HELLO near '{other}'"
                        )));
                    }
                }
            }
            Action::Hello { proto, setname }
        }
        "AUTH" => {
            if args.is_empty() || args.len() > 2 {
                return Err(FirnError::WrongArity("auth".into()));
            }
            Action::Reply(Reply::Ok)
        }
        "SELECT" => {
            exact_arity(&args, 1)?;
            match args.text()?.as_str() {
                "0" => Action::Reply(Reply::Ok),
                _ => {
                    return Err(FirnError::BadArgument(
                        "DB index is out of range (Firn has one database, 0)".into(),
                    ));
                }
            }
        }
        "CLIENT" => {
            let sub = args.keyword()?;
            match sub.as_str() {
                "SETNAME" => {
                    exact_arity(&args, 1)?;
                    Action::ClientSetName(args.bytes()?)
                }
                "GETNAME" => Action::ClientGetName,
                "ID" => Action::ClientId,
                // Client libraries announce themselves (redis-py, go-redis); nothing to keep.
                "SETINFO" => Action::Reply(Reply::Ok),
                _ => return Err(unknown_subcommand("client", &sub)),
            }
        }
        "COMMAND" => match args.peek_keyword().as_deref() {
            None => Action::Reply(Reply::Array(
                COMMANDS
                    .iter()
                    .map(|(n, arity)| {
                        Reply::Array(vec![
                            Reply::text(n),
                            Reply::Int(*arity),
                            Reply::Array(vec![]),
                            Reply::Int(1),
                            Reply::Int(1),
                            Reply::Int(1),
                        ])
                    })
                    .collect(),
            )),
            Some("COUNT") => Action::Reply(Reply::Int(COMMANDS.len() as i64)),
            // Documentation is in docs/api.md; an empty answer keeps redis-cli's hints quiet.
            Some("DOCS") | Some("INFO") => Action::Reply(Reply::Array(vec![])),
            Some("LIST") => Action::Reply(Reply::Array(
                COMMANDS.iter().map(|(n, _)| Reply::text(n)).collect(),
            )),
            Some(other) => return Err(unknown_subcommand("command", other)),
        },
        "CONFIG" => {
            let sub = args.keyword()?;
            match sub.as_str() {
                "GET" => {
                    let patterns = args.rest();
                    if patterns.is_empty() {
                        return Err(FirnError::WrongArity("config|get".into()));
                    }
                    Action::Reply(config_get(&patterns))
                }
                "SET" | "RESETSTAT" | "REWRITE" => {
                    return Err(FirnError::Refused(
                        "CONFIG SET is not supported; Firn is configured by flags at start".into(),
                    ));
                }
                _ => return Err(unknown_subcommand("config", &sub)),
            }
        }
        "READONLY" | "READWRITE" => {
            // Every replica serves linearizable reads, so there is no mode to switch.
            args.done()?;
            Action::Reply(Reply::Ok)
        }
        "CLUSTER" => {
            let sub = args.keyword()?;
            match sub.as_str() {
                "KEYSLOT" => {
                    exact_arity(&args, 1)?;
                    Action::Reply(Reply::Int(firn_model::slot::slot_of(&args.bytes()?) as i64))
                }
                "SLOTS" | "SHARDS" | "NODES" | "INFO" | "MYID" => {
                    args.done()?;
                    Action::Cluster(sub)
                }
                _ => return Err(unknown_subcommand("cluster", &sub)),
            }
        }
        "FIRN.AFTER" => {
            exact_arity(&args, 1)?;
            Action::After(args.read_time()?)
        }
        "FIRN.TOKEN" => {
            exact_arity(&args, 0)?;
            Action::Token
        }
        "FIRN.CLUSTER" => {
            if args.is_empty() {
                Action::Cluster("FIRN".into())
            } else {
                let sub = args.text()?.to_uppercase();
                match sub.as_str() {
                    "STATUS" => {
                        args.done()?;
                        Action::Cluster("FIRN".into())
                    }
                    "REMOVE" => {
                        let id = args.u64("node id")?;
                        args.done()?;
                        Action::ClusterRemove(id)
                    }
                    _ => return Err(unknown_subcommand("firn.cluster", &sub)),
                }
            }
        }
        "INFO" => Action::Info(if args.is_empty() {
            None
        } else {
            Some(args.text()?.to_lowercase())
        }),
        "DBSIZE" => {
            args.done()?;
            exec(KvRead::DbSize, Render::Count)
        }
        "GET" => {
            exact_arity(&args, 1)?;
            let key = args.key()?;
            exec(
                KvRead::Get {
                    key,
                    at: ReadAt::Latest,
                    consistency: ReadConsistency::Linearizable,
                },
                Render::Get,
            )
        }
        "TYPE" => {
            exact_arity(&args, 1)?;
            let key = args.key()?;
            exec(
                KvRead::Get {
                    key,
                    at: ReadAt::Latest,
                    consistency: ReadConsistency::Linearizable,
                },
                Render::Type,
            )
        }
        "SET" => {
            if args.len() < 2 {
                return Err(FirnError::WrongArity("set".into()));
            }
            let key = args.key()?;
            let value = args.bytes()?;
            let mut put = PutRequest::new(key, value);
            while !args.is_empty() {
                let opt = args.keyword()?;
                match opt.as_str() {
                    "NX" | "XX" if put.condition != WriteCondition::Always => {
                        return Err(FirnError::BadArgument(
                            "syntax error: NX and XX exclude each other".into(),
                        ));
                    }
                    "NX" => put.condition = WriteCondition::IfVersion(0),
                    "XX" => put.condition = WriteCondition::IfPresent,
                    "GET" => put.return_previous = true,
                    "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" => {
                        return Err(FirnError::Refused(format!(
                            "SET {opt} is not supported: Firn has no expiring keys yet; use a keyspace with a max age"
                        )));
                    }
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "syntax error: unknown SET option '{other}'"
                        )));
                    }
                }
            }
            let get = put.return_previous;
            exec(KvWrite::Put(put), Render::Set { get })
        }
        "DEL" | "UNLINK" => exec(KvWrite::Delete { keys: args.keys()? }, Render::DelCount),
        "EXISTS" => exec(
            KvRead::Exists {
                keys: args.keys()?,
                consistency: ReadConsistency::Linearizable,
            },
            Render::Count,
        ),
        "MGET" => exec(
            KvRead::MGet {
                keys: args.keys()?,
                at: ReadAt::Latest,
                consistency: ReadConsistency::Linearizable,
            },
            Render::MGet,
        ),
        "MSET" => {
            if args.is_empty() || !args.len().is_multiple_of(2) {
                return Err(FirnError::WrongArity("mset".into()));
            }
            let mut items = Vec::with_capacity(args.len() / 2);
            while !args.is_empty() {
                let k = args.key()?;
                items.push((k, args.bytes()?));
            }
            exec(KvWrite::MSet { items }, Render::Ok)
        }
        "SCAN" => {
            let cursor_text = args.text()?;
            let cursor = cursor_text
                .parse::<u64>()
                .map_err(|_| FirnError::BadArgument("invalid cursor".into()))?;
            let (mut pattern, mut count, mut type_filter) = (None, 10usize, None);
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "MATCH" => pattern = Some(args.bytes()?),
                    "COUNT" => count = args.usize("COUNT")?,
                    "TYPE" => type_filter = Some(args.text()?.to_lowercase()),
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "syntax error: unknown SCAN option '{other}'"
                        )));
                    }
                }
            }
            Action::RedisScan {
                cursor,
                pattern,
                count,
                type_filter,
            }
        }
        "FLUSHALL" | "FLUSHDB" => {
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "ASYNC" | "SYNC" => {}
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "syntax error near '{other}'"
                        )));
                    }
                }
            }
            exec(KvWrite::FlushAll, Render::Ok)
        }
        "FIRN.PUT" => {
            if args.len() < 2 {
                return Err(FirnError::WrongArity("firn.put".into()));
            }
            let key = args.key()?;
            let mut put = PutRequest::new(key, args.bytes()?);
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "IFVERSION" => {
                        put.condition = WriteCondition::IfVersion(args.u64("IFVERSION")?)
                    }
                    "EVENTTIME" => put.event_time_us = Some(args.micros()?),
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.PUT option '{other}'; use IFVERSION n, EVENTTIME t"
                        )));
                    }
                }
            }
            exec(KvWrite::Put(put), Render::FirnWritten)
        }
        "FIRN.GET" => {
            let key = args.key()?;
            let (at, consistency) = read_options(&mut args, true)?;
            args.done()?;
            exec(
                KvRead::Get {
                    key,
                    at,
                    consistency,
                },
                Render::FirnValue,
            )
        }
        "FIRN.MGET" => {
            let (at, consistency) = read_options(&mut args, false)?;
            exec(
                KvRead::MGet {
                    keys: args.keys()?,
                    at,
                    consistency,
                },
                Render::FirnValues,
            )
        }
        "FIRN.DEL" => {
            exact_arity(&args, 1)?;
            exec(
                KvWrite::Delete {
                    keys: vec![args.key()?],
                },
                Render::FirnDel,
            )
        }
        "FIRN.HISTORY" => {
            let key = args.key()?;
            let (mut from, mut to, mut limit, mut as_of, mut consistency) = (
                1,
                None,
                PAGE_ITEMS_DEFAULT,
                None,
                ReadConsistency::Linearizable,
            );
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "FROM" => from = args.u64("FROM")?,
                    "TO" => to = Some(args.u64("TO")?),
                    "LIMIT" => limit = args.usize("LIMIT")?,
                    "ASOF" => as_of = Some(args.read_time()?),
                    "CONSISTENCY" => consistency = args.text()?.parse()?,
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.HISTORY option '{other}'; use FROM, TO, LIMIT, ASOF, CONSISTENCY"
                        )));
                    }
                }
            }
            exec(
                KvRead::History {
                    key,
                    from,
                    to,
                    limit,
                    as_of,
                    consistency,
                },
                Render::FirnHistory,
            )
        }
        "FIRN.SCAN" => {
            let prefix = args.bytes()?;
            let (mut cursor, mut limit, mut pattern) = (None, PAGE_ITEMS_DEFAULT, None);
            let mut at = ReadAt::Latest;
            let mut consistency = ReadConsistency::Linearizable;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "CURSOR" => cursor = Some(args.bytes()?).filter(|c| !c.is_empty()),
                    "COUNT" | "LIMIT" => limit = args.usize("COUNT")?,
                    "MATCH" => pattern = Some(args.bytes()?),
                    "ASOF" => at = ReadAt::AsOf(args.read_time()?),
                    "EVENTTIME" => at = ReadAt::EventTime(args.micros()?),
                    "CONSISTENCY" => consistency = args.text()?.parse()?,
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.SCAN option '{other}'; use CURSOR, COUNT, MATCH, ASOF, EVENTTIME, CONSISTENCY"
                        )));
                    }
                }
            }
            exec(
                KvRead::Scan {
                    prefix,
                    cursor,
                    limit,
                    pattern,
                    at,
                    consistency,
                },
                Render::FirnScan,
            )
        }
        "FIRN.SNAPSHOT" => {
            let mut at = None;
            let of = loop {
                match args.keyword()?.as_str() {
                    "AT" => at = Some(args.read_time()?),
                    "KEYS" => break SnapshotOf::Keys(args.keys()?),
                    "PREFIX" => {
                        let prefix = args.bytes()?;
                        let (mut cursor, mut limit) = (None, PAGE_ITEMS_DEFAULT);
                        while !args.is_empty() {
                            match args.keyword()?.as_str() {
                                "CURSOR" => cursor = Some(args.bytes()?).filter(|c| !c.is_empty()),
                                "COUNT" | "LIMIT" => limit = args.usize("COUNT")?,
                                other => {
                                    return Err(FirnError::BadArgument(format!(
                                        "unknown FIRN.SNAPSHOT PREFIX option '{other}'; use CURSOR, COUNT"
                                    )));
                                }
                            }
                        }
                        break SnapshotOf::Prefix {
                            prefix,
                            cursor,
                            limit,
                        };
                    }
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.SNAPSHOT option '{other}'; use [AT t] KEYS k… or [AT t] PREFIX p [CURSOR c] [COUNT n]"
                        )));
                    }
                }
            };
            exec(KvRead::Snapshot { of, at }, Render::FirnSnapshot)
        }
        "FIRN.TRUNCATE" => {
            exact_arity(&args, 4)?;
            let target = match args.keyword()?.as_str() {
                "KEY" => KeyRange::Key(args.key()?),
                "PREFIX" => KeyRange::Prefix(args.bytes()?),
                other => {
                    return Err(FirnError::BadArgument(format!(
                        "FIRN.TRUNCATE takes KEY k or PREFIX p, not '{other}'"
                    )));
                }
            };
            let before = match args.keyword()?.as_str() {
                "VERSION" => TruncateBefore::Version(args.u64("VERSION")?),
                "TIME" => TruncateBefore::Time(args.read_time()?),
                other => {
                    return Err(FirnError::BadArgument(format!(
                        "FIRN.TRUNCATE takes VERSION n or TIME t, not '{other}'"
                    )));
                }
            };
            exec(KvWrite::Truncate { target, before }, Render::Truncated)
        }
        "FIRN.WATCH" => {
            let subject = args.bytes()?;
            let mut prefix = false;
            let mut from = WatchFrom::Now;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "PREFIX" => prefix = true,
                    "VERSION" => from = WatchFrom::Version(args.u64("VERSION")?),
                    "TIME" => from = WatchFrom::Time(args.read_time()?),
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.WATCH option '{other}'; use PREFIX, VERSION n, TIME t"
                        )));
                    }
                }
            }
            let target = if prefix {
                KeyRange::Prefix(subject)
            } else {
                KeyRange::Key(firn_model::Key::new(subject)?)
            };
            Action::Watch(WatchRequest { target, from })
        }
        "FIRN.UNWATCH" => Action::Unwatch,
        "FIRN.KEYSPACE" => {
            let sub = args.keyword()?;
            match sub.as_str() {
                "LIST" => exec(AdminRequest::KeyspaceList, Render::Keyspaces),
                "DROP" => {
                    exact_arity(&args, 1)?;
                    exec(
                        AdminRequest::KeyspaceDrop {
                            prefix: args.text()?,
                        },
                        Render::Ok,
                    )
                }
                "CREATE" => {
                    let mut spec = KeyspaceSpec {
                        prefix: args.text()?,
                        ..KeyspaceSpec::default_keyspace()
                    };
                    while !args.is_empty() {
                        match args.keyword()?.as_str() {
                            "MODE" => spec.mode = args.text()?.parse()?,
                            "MAXVERSIONS" => spec.max_versions = Some(args.u64("MAXVERSIONS")?),
                            "MAXAGE" => spec.max_age_us = Some(parse_duration_us(&args.text()?)?),
                            "DURABILITY" => spec.durability = args.text()?.parse()?,
                            other => {
                                return Err(FirnError::BadArgument(format!(
                                    "unknown keyspace option '{other}'; use MODE, MAXVERSIONS, MAXAGE, DURABILITY"
                                )));
                            }
                        }
                    }
                    exec(AdminRequest::KeyspaceCreate(spec), Render::Ok)
                }
                _ => return Err(unknown_subcommand("firn.keyspace", &sub)),
            }
        }
        _ => return Err(FirnError::UnknownCommand(name.to_lowercase())),
    };
    Ok(action)
}

pub fn version_map(info: &VersionInfo) -> Reply {
    Reply::Map(vec![
        (Reply::text("version"), Reply::Int(info.version as i64)),
        (
            Reply::text("commit_ts"),
            Reply::text(info.commit_ts.to_string()),
        ),
        (
            Reply::text("event_time"),
            info.event_time_us
                .map_or(Reply::Nil, |t| Reply::Int(t as i64)),
        ),
        (Reply::text("deleted"), Reply::Int(info.deleted as i64)),
        (
            Reply::text("value"),
            info.value.clone().map_or(Reply::Nil, Reply::Bulk),
        ),
    ])
}

fn written_pair(w: &Written) -> Reply {
    Reply::Array(vec![
        Reply::Int(w.version as i64),
        Reply::text(w.commit_ts.to_string()),
    ])
}

/// Renders a router answer for the command that asked.
/// The Redis settings that describe Firn, as `CONFIG GET` answers them (clients such as
/// redis-benchmark ask for `save` and `appendonly`): every write is logged and fsync'd before
/// it is acknowledged, and there are no RDB snapshots. Everything else Firn takes as flags at
/// start, so other names match nothing.
const REDIS_SETTINGS: [(&str, &str); 3] = [
    ("appendfsync", "always"),
    ("appendonly", "yes"),
    ("save", ""),
];

/// `CONFIG GET pattern …`: the settings matching any pattern (glob, case-insensitive).
fn config_get(patterns: &[Bytes]) -> Reply {
    let matches = |name: &str| {
        patterns
            .iter()
            .any(|p| firn_store::glob::glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
    };
    Reply::Map(
        REDIS_SETTINGS
            .iter()
            .filter(|(name, _)| matches(name))
            .map(|(name, value)| (Reply::text(*name), Reply::text(*value)))
            .collect(),
    )
}

pub fn render(render: Render, result: Result<Response, FirnError>) -> Reply {
    let response = match result {
        Ok(r) => r,
        // SET NX / XX whose condition fails answers nil, as Redis does.
        Err(FirnError::Conflict { .. }) if matches!(render, Render::Set { .. }) => {
            return Reply::Nil;
        }
        Err(e) => return Reply::error(&e),
    };
    match (render, response) {
        (Render::Get, Response::Value(v)) => {
            v.and_then(|i| i.value).map_or(Reply::Nil, Reply::Bulk)
        }
        (Render::Type, Response::Value(v)) => {
            Reply::Simple(if v.is_some() { "string" } else { "none" }.into())
        }
        (Render::Set { get: false }, Response::Written(_)) => Reply::Ok,
        (Render::Set { get: true }, Response::Written(w)) => w
            .first()
            .and_then(|w| w.previous.as_ref())
            .and_then(|p| p.value.clone())
            .map_or(Reply::Nil, Reply::Bulk),
        (Render::DelCount, Response::Written(w)) => {
            Reply::Int(w.iter().filter(|w| w.existed).count() as i64)
        }
        (Render::Count, Response::Count(n)) => Reply::Int(n as i64),
        (Render::MGet, Response::Values(vs)) => Reply::Array(
            vs.into_iter()
                .map(|v| v.and_then(|i| i.value).map_or(Reply::Nil, Reply::Bulk))
                .collect(),
        ),
        (Render::Ok, _) => Reply::Ok,
        (Render::FirnWritten, Response::Written(w)) => w.first().map_or(Reply::Nil, written_pair),
        (Render::FirnDel, Response::Written(w)) => w
            .first()
            .filter(|w| w.existed)
            .map_or(Reply::Nil, written_pair),
        (Render::FirnValue, Response::Value(v)) => v.as_ref().map_or(Reply::Nil, version_map),
        (Render::FirnValues, Response::Values(vs)) => Reply::Array(
            vs.iter()
                .map(|v| v.as_ref().map_or(Reply::Nil, version_map))
                .collect(),
        ),
        (Render::FirnHistory, Response::History(h)) => {
            Reply::Array(h.iter().map(version_map).collect())
        }
        (Render::FirnScan, Response::Scan { keys, next_cursor }) => Reply::Array(vec![
            Reply::Bulk(next_cursor.unwrap_or_default()),
            Reply::Array(
                keys.into_iter()
                    .map(|(k, _)| Reply::Bulk(k.bytes().clone()))
                    .collect(),
            ),
        ]),
        (Render::FirnSnapshot, Response::Snapshot { at, read }) => {
            let mut fields = vec![(Reply::text("at"), Reply::text(at.to_string()))];
            match *read {
                Response::Values(vs) => fields.push((
                    Reply::text("values"),
                    Reply::Array(
                        vs.iter()
                            .map(|v| v.as_ref().map_or(Reply::Nil, version_map))
                            .collect(),
                    ),
                )),
                Response::Scan { keys, next_cursor } => {
                    fields.push((
                        Reply::text("cursor"),
                        Reply::Bulk(next_cursor.unwrap_or_default()),
                    ));
                    fields.push((
                        Reply::text("keys"),
                        Reply::Array(
                            keys.iter()
                                .map(|(k, info)| match version_map(info) {
                                    Reply::Map(mut m) => {
                                        m.insert(
                                            0,
                                            (Reply::text("key"), Reply::Bulk(k.bytes().clone())),
                                        );
                                        Reply::Map(m)
                                    }
                                    other => other,
                                })
                                .collect(),
                        ),
                    ));
                }
                other => {
                    return Reply::error(&FirnError::Internal(format!(
                        "a snapshot answered {other:?}"
                    )));
                }
            }
            Reply::Map(fields)
        }
        (Render::Truncated, Response::Truncated { versions_removed }) => {
            Reply::Int(versions_removed as i64)
        }
        (Render::Keyspaces, Response::Keyspaces(specs)) => Reply::Array(
            specs
                .iter()
                .map(|s| {
                    Reply::Map(vec![
                        (Reply::text("prefix"), Reply::text(&s.prefix)),
                        (Reply::text("mode"), Reply::text(s.mode.to_string())),
                        (
                            Reply::text("max_versions"),
                            s.max_versions.map_or(Reply::Nil, |n| Reply::Int(n as i64)),
                        ),
                        (
                            Reply::text("max_age_us"),
                            s.max_age_us.map_or(Reply::Nil, |n| Reply::Int(n as i64)),
                        ),
                        (Reply::text("durability"), Reply::text("disk")),
                    ])
                })
                .collect(),
        ),
        (render, other) => Reply::error(&FirnError::Internal(format!(
            "{render:?} cannot show {other:?}"
        ))),
    }
}
