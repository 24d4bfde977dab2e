//! Server commands: COMMAND (derived from the registry), CONFIG, INFO, DBSIZE, FLUSHALL,
//! FLUSHDB.

use bytes::Bytes;
use firn_model::{FirnError, KvRead, KvWrite, Response};

use super::{REDIS_COMPAT_VERSION, unknown_subcommand};
use crate::resp::Shared;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::registry;
use crate::resp::reply::Reply;

pub const COMMAND: CommandSpec = CommandSpec {
    name: "command",
    arity: -1,
    flags: &[],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "Describes the commands: COMMAND, COMMAND COUNT, LIST, INFO name…, DOCS name….",
    parse: command,
};

pub const CONFIG: CommandSpec = CommandSpec {
    name: "config",
    arity: -2,
    flags: &[Flag::Admin],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "CONFIG GET: the Redis settings that describe Firn. CONFIG SET is refused.",
    parse: config,
};

pub const INFO: CommandSpec = CommandSpec {
    name: "info",
    arity: -1,
    flags: &[],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "Server, clients, persistence, replication, raft and keyspace facts.",
    parse: info,
};

pub const DBSIZE: CommandSpec = CommandSpec {
    name: "dbsize",
    arity: 1,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "The number of live keys.",
    parse: |_| Ok(Action::execute(KvRead::DbSize, Render::new(show_count))),
};

pub const FLUSHALL: CommandSpec = CommandSpec {
    name: "flushall",
    arity: -1,
    flags: &[Flag::Write, Flag::Admin],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "Drops every key; refused unless the node runs with --allow-flushall.",
    parse: flushall,
};

pub const FLUSHDB: CommandSpec = CommandSpec {
    name: "flushdb",
    summary: "FLUSHALL: Firn has one database.",
    ..FLUSHALL
};

fn command(mut args: Args) -> Result<Action, FirnError> {
    if args.is_empty() {
        return Ok(Action::Reply(registry::command_entries(None)));
    }
    let sub = args.keyword()?;
    let reply = match sub.as_str() {
        "COUNT" => Reply::Int(registry::COMMANDS.len() as i64),
        "LIST" => Reply::Array(
            registry::COMMANDS
                .iter()
                .map(|spec| Reply::text(spec.name))
                .collect(),
        ),
        "INFO" => {
            let names = args.rest();
            registry::command_entries(Some(names.as_slice()).filter(|n| !n.is_empty()))
        }
        "DOCS" => registry::command_docs(&args.rest()),
        _ => return Err(unknown_subcommand("command", &sub)),
    };
    Ok(Action::Reply(reply))
}

/// The Redis settings that describe Firn, as `CONFIG GET` answers them (clients such as
/// redis-benchmark ask for `save` and `appendonly`): every write is logged and fsync'd before
/// it is acknowledged, and there are no RDB snapshots. Everything else Firn takes as flags at
/// start, so other names match nothing.
const REDIS_SETTINGS: [(&str, &str); 3] = [
    ("appendfsync", "always"),
    ("appendonly", "yes"),
    ("save", ""),
];

fn config(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    match sub.as_str() {
        "GET" => {
            let patterns = args.rest();
            if patterns.is_empty() {
                return Err(FirnError::WrongArity("config|get".into()));
            }
            Ok(Action::Reply(config_get(&patterns)))
        }
        "SET" | "RESETSTAT" | "REWRITE" => Err(FirnError::Refused(
            "CONFIG SET is not supported; Firn is configured by flags at start".into(),
        )),
        _ => Err(unknown_subcommand("config", &sub)),
    }
}

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

fn info(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::Info(if args.is_empty() {
        None
    } else {
        Some(args.text()?.to_lowercase())
    }))
}

/// The INFO text: every section, or the one asked for.
pub fn info_text(shared: &Shared, section: Option<&str>) -> String {
    let router = &shared.router;
    let status = router.kernel().replicas().status();
    let shard = status.first();
    let mut sections: Vec<(&str, String)> = vec![
        (
            "server",
            format!(
                "redis_version:{REDIS_COMPAT_VERSION}\r\nfirn_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                usize::BITS,
                std::process::id(),
                shared.run_id,
                shared.resp_port,
                shared.started.elapsed().as_secs(),
                shared.started.elapsed().as_secs() / 86_400
            ),
        ),
        (
            "clients",
            format!(
                "connected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n",
                shared.connected(),
                shared.connections_max,
                shared.blocked.load(std::sync::atomic::Ordering::Relaxed)
            ),
        ),
        ("persistence", "aof_enabled:0\r\nfirn_durability:raft-log-fsync\r\n".to_string()),
        ("replication", "role:master\r\nconnected_slaves:0\r\n".to_string()),
        (
            "raft",
            shard.map_or(String::new(), |s| {
                format!(
                    "shard:{}\r\nnode_id:{}\r\nraft_state:{}\r\nleader:{}\r\nterm:{}\r\nlast_log_index:{}\r\nlast_applied_index:{}\r\nsnapshot_index:{}\r\n",
                    s.shard_id,
                    s.node_id,
                    s.state,
                    s.leader.map_or("none".into(), |l| l.to_string()),
                    s.term,
                    s.last_log_index.unwrap_or(0),
                    s.last_applied_index.unwrap_or(0),
                    s.snapshot_index.unwrap_or(0)
                )
            }),
        ),
        ("keyspace", format!("db0:keys={},expires=0,avg_ttl=0\r\n", router.kernel().replicas().live_keys())),
    ];
    if let Some(wanted) = section.filter(|s| !matches!(*s, "all" | "default" | "everything")) {
        sections.retain(|(name, _)| *name == wanted);
    }
    sections
        .into_iter()
        .map(|(name, body)| {
            let mut title = name.to_string();
            title[..1].make_ascii_uppercase();
            format!("# {title}\r\n{body}")
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("DBSIZE", other),
    }
}

fn flushall(mut args: Args) -> Result<Action, FirnError> {
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
    Ok(Action::execute(
        KvWrite::FlushAll,
        Render::new(|_| Reply::Ok),
    ))
}
