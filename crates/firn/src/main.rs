//! `firn`: run a node (`firn serve`) or talk to one (`put`, `get`, `history`, `watch`, `del`,
//! `keyspace`, `cluster`, `backup`, `restore`, `log` for the shared log, `function` and
//! `trigger` for functions next to the data, and `hash-password` for a users file).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use firn_client::{Client, ClientError};

mod backup;
mod cluster;
mod config;
mod file;
mod followed;
mod functions;
mod group;
mod hash_password;
mod http;
mod keyspace;
mod kv;
mod log;
mod logs;
mod mount;
mod request;
mod serve;
mod txn;

use cluster::{ClusterAction, run_cluster};
use functions::{FunctionAction, TriggerAction, run_function, run_trigger};
use group::{GroupAction, run_group};
use keyspace::{KeyspaceAction, run_keyspace};
use log::{LogAction, run_log};
use request::{RequestArgs, run_request};
use serve::{ServeArgs, serve};

/// mimalloc instead of glibc's malloc: the hot paths allocate small buffers on many threads,
/// where glibc's per-thread arenas cost time and hold memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "firn",
    version,
    about = "A consistent, temporal state store that speaks the Redis protocol"
)]
struct Cli {
    /// The CA (PEM) that signs the node's certificate: the client subcommands then reach a
    /// node started with --tls-cert over TLS, RESP and HTTP alike (before the subcommand:
    /// `firn --ca ca.pem get k`).
    #[arg(long, env = "FIRN_CA", value_name = "PATH")]
    ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Target {
    /// RESP address of the node to talk to.
    #[arg(
        long,
        env = "FIRN_ADDR",
        default_value = "127.0.0.1:7379",
        global = true
    )]
    addr: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no flags: a single node on loopback, data in ./firn-data).
    Serve(Box<ServeArgs>),
    /// Write a new version of a key.
    Put(kv::PutArgs),
    /// Read a key: latest, an exact version, as of a commit time, or by event time.
    Get(kv::GetArgs),
    /// List a key's versions, oldest first.
    History(kv::HistoryArgs),
    /// Read keys, or the keys under a prefix, as of one time across every shard: one
    /// consistent cut. Without --at, the newest time every shard involved has closed.
    Snapshot(kv::SnapshotArgs),
    /// Print every new version of a key (or of every key under a prefix) as it commits.
    Watch(kv::WatchArgs),
    /// Mount the store's file view (keys as files, prefixes as directories, DIR/@T/ at any
    /// time) read-only through FUSE, until interrupted or unmounted.
    Mount(mount::MountArgs),
    /// Delete a key (writes a tombstone version).
    Del(kv::DelArgs),
    /// Compare, then write, across shards, as one transaction: when every --if holds the
    /// --then commands run, else the --else commands.
    Txn(txn::TxnArgs),
    /// Write one consistent cut of the store at one closed time to a file: every key's
    /// value, every log record and stream entry, and the consumer groups.
    Backup(backup::BackupArgs),
    /// Load a backup into a new, empty cluster.
    Restore(backup::RestoreArgs),
    /// Manage keyspaces.
    Keyspace {
        #[command(subcommand)]
        action: KeyspaceAction,
    },
    /// The tagged shared log (over the node's HTTP API: --http-addr).
    Log {
        #[command(subcommand)]
        action: LogAction,
    },
    /// Consumer groups of streams (over the node's HTTP API: --http-addr).
    Group {
        #[command(subcommand)]
        action: GroupAction,
    },
    /// Send one request to a service's workers and print the reply (FIRN.REQUEST).
    Request(RequestArgs),
    /// Functions next to the data: WebAssembly modules, loaded and called (FCALL).
    Function {
        #[command(subcommand)]
        action: FunctionAction,
    },
    /// Triggers: a function run on every committed change of a prefix.
    Trigger {
        #[command(subcommand)]
        action: TriggerAction,
    },
    /// Inspect the cluster.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Hash a password or bearer token for a users file (`firn serve --users`): reads it
    /// from standard input (`printf %s SECRET | firn hash-password`) and prints an argon2id
    /// hash (19 MiB, 2 passes, 1 lane, a random salt) to give as `password` or in `tokens`.
    HashPassword,
}

fn main() -> ExitCode {
    let cli = config::parse_firn();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("firn: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("firn: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(target: &Target) -> Result<Client, String> {
    Client::connect_with(&target.addr, http::client_tls())
        .await
        .map_err(|e| unreachable_error(&target.addr, e))
}

/// "cannot reach ADDR: WHY", with a password in ADDR (`user:password@host:port`) shown as
/// `***`, there and wherever the reason repeats it: an error message is read, pasted and
/// logged.
pub(crate) fn unreachable_error(addr: &str, e: impl std::fmt::Display) -> String {
    let why = with_hint(e.to_string(), http::client_tls().is_some());
    let secret = addr
        .rsplit_once('@')
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match secret {
        Some(password) => format!(
            "cannot reach {}: {}",
            addr.replacen(&format!(":{password}@"), ":***@", 1),
            why.replace(password, "***")
        ),
        None => format!("cannot reach {addr}: {why}"),
    }
}

fn show(e: ClientError) -> String {
    with_hint(e.to_string(), http::client_tls().is_some())
}

/// `why` a connection failed, with what to do about the causes a user can fix: a plain-text
/// connection a TLS-only node closed, and a node certificate marked as a CA that `--ca` does
/// not hold.
fn with_hint(why: String, tls: bool) -> String {
    let closed = [
        "broken pipe",
        "connection reset",
        "Connection reset",
        "unexpected end",
    ]
    .iter()
    .any(|s| why.contains(s));
    if closed && !tls {
        return format!(
            "{why} (a node started with --tls-required closes plain-text connections: give \
             its CA with --ca or FIRN_CA)"
        );
    }
    if why.contains("CaUsedAsEndEntity") {
        return format!(
            "{why} (the node presents a certificate marked as a CA, as `openssl req -x509` \
             makes by default, that --ca does not hold: give that certificate itself, or the \
             CA that signed it, with --ca; see docs/deploy.md, TLS)"
        );
    }
    why
}

async fn run(cli: Cli) -> Result<(), String> {
    if let Some(path) = &cli.ca {
        http::set_client_tls(firn_client::TlsCa::load(path).map_err(show)?);
    }
    match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Put(args) => kv::put(args).await,
        Command::Get(args) => kv::get(args).await,
        Command::History(args) => kv::history(args).await,
        Command::Snapshot(args) => kv::snapshot(args).await,
        Command::Watch(args) => kv::watch(args).await,
        Command::Del(args) => kv::delete(args).await,
        Command::Txn(args) => txn::txn(args).await,
        Command::Mount(args) => mount::mount(args).await,
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Keyspace { action } => run_keyspace(action).await,
        Command::Log { action } => run_log(action).await,
        Command::Group { action } => run_group(action).await,
        Command::Request(args) => run_request(args).await,
        Command::Function { action } => run_function(action).await,
        Command::Trigger { action } => run_trigger(action).await,
        Command::Cluster { action } => run_cluster(action).await,
        Command::HashPassword => hash_password::hash_password(),
    }
}

#[cfg(test)]
mod tests {
    use super::unreachable_error;

    #[test]
    fn a_connection_closed_for_tls_or_refused_for_a_ca_certificate_says_what_to_do() {
        let said = super::with_hint("connection: broken pipe".into(), false);
        assert!(said.contains("--ca"), "{said}");
        let said = super::with_hint("connection: broken pipe".into(), true);
        assert_eq!(said, "connection: broken pipe");
        let said = super::with_hint("invalid peer certificate: CaUsedAsEndEntity".into(), true);
        assert!(said.contains("give that certificate itself"), "{said}");
    }

    #[test]
    fn an_unreachable_address_is_shown_without_its_password() {
        let said = unreachable_error(
            "alice:s3cret@127.0.0.1:7379",
            "WRONGPASS for alice:s3cret@127.0.0.1:7379",
        );
        assert!(!said.contains("s3cret"), "{said}");
        assert!(said.contains("alice:***@127.0.0.1:7379"), "{said}");
        assert_eq!(
            unreachable_error("127.0.0.1:7379", "refused"),
            "cannot reach 127.0.0.1:7379: refused"
        );
    }
}

#[cfg(test)]
mod help {
    use clap::CommandFactory;

    /// Every subcommand, argument and flag of the CLI says what it is for in `--help`.
    #[test]
    fn every_command_argument_and_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && path != " firn" {
                missing.push(format!("{path} (the command)"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                let generated = matches!(
                    arg.get_action(),
                    clap::ArgAction::Help
                        | clap::ArgAction::HelpShort
                        | clap::ArgAction::HelpLong
                        | clap::ArgAction::Version
                );
                if generated || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() != "help" {
                    walk(sub, &path, missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
