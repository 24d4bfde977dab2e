//! `firn function load|list|info|delete|call` and `firn trigger create|list|info|pause|
//! resume|drop|replay`: functions next to the data (docs/functions.md), over RESP (`FIRN.FUNCTION`,
//! `FCALL`, `FIRN.TRIGGER`).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use firn_client::functions::{Trigger, TriggerCreate};
use firn_model::time::{micros_to_rfc3339, parse_micros};
use firn_model::{EntrySource, FunctionInfo, TriggerFrom};

use crate::{Target, connect, show};

/// A function or trigger, by name, at a node.
#[derive(Args)]
pub struct Named {
    /// Its name (letters, digits, '_', '-', '.').
    name: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Subcommand)]
pub enum FunctionAction {
    /// Load a WebAssembly module as a function (a new version when it exists).
    Load {
        /// The function's name (letters, digits, '_', '-', '.').
        name: String,
        /// The module (.wasm): it must export `run` and import only what Firn provides.
        file: PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// The functions, with their newest versions.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// One function's newest version, size and load time.
    Info(Named),
    /// Delete a function (its versions stay in the key's history).
    Delete(Named),
    /// Run a function once, as one transaction (FCALL), and print its reply.
    Call {
        /// The function's name.
        name: String,
        /// A key the function reads or writes (its `key(i)`); repeat for more.
        #[arg(long = "key", value_name = "KEY")]
        keys: Vec<String>,
        /// The function's arguments (its `arg(i)`), as text.
        args: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
pub enum TriggerAction {
    /// Run a function on every committed change of a key under a prefix, record of a log
    /// tag, or entry of a stream.
    #[command(group(clap::ArgGroup::new("input").required(true).args(["prefix", "log", "stream"])))]
    Create {
        /// The trigger's name.
        name: String,
        /// The keys it follows: every put and delete of a key under this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// The log whose records of `--tag` it follows.
        #[arg(long, requires = "tag")]
        log: Option<String>,
        /// The tag of `--log` whose records it follows.
        #[arg(long, requires = "log")]
        tag: Option<String>,
        /// The stream whose entries it follows.
        #[arg(long)]
        stream: Option<String>,
        /// The function it runs: NAME (its newest version) or NAME@VERSION.
        #[arg(long = "call", value_name = "FUNCTION")]
        function: String,
        /// Where it starts: now (changes from now on), 0 (every change still kept), or a
        /// time (µs since the epoch or RFC 3339).
        #[arg(long, default_value = "now")]
        from: String,
        /// Runs of a failing input after the first, before it goes to the dead letters
        /// (default 3, at most 100).
        #[arg(long)]
        retries: Option<u32>,
        /// The stream failing inputs go to (default `_firn/deadletter/NAME`).
        #[arg(long)]
        deadletter: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// The triggers, each with its counts.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// One trigger's definition, runs, errors, last error and lag.
    Info(Named),
    /// Stop a trigger; it keeps its position.
    Pause(Named),
    /// Start a paused trigger again, from where it stopped.
    Resume(Named),
    /// Delete a trigger and its position.
    Drop(Named),
    /// Run a trigger's function again over the inputs committed between two times, every
    /// key it writes put under another prefix: a trigger of its own, NAME~replay (follow it
    /// with `firn trigger info NAME~replay`, end it with `firn trigger drop NAME~replay`).
    Replay {
        /// The trigger's name.
        name: String,
        /// From this time: µs since the epoch or RFC 3339.
        #[arg(long)]
        from: String,
        /// To this time.
        #[arg(long)]
        to: String,
        /// The prefix its writes go under.
        #[arg(long)]
        into: String,
        #[command(flatten)]
        target: Target,
    },
}

pub async fn run_function(action: FunctionAction) -> Result<(), String> {
    match action {
        FunctionAction::Load { name, file, target } => {
            let module =
                std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            let client = connect(&target).await?;
            let version = client.function_load(&name, &module).await.map_err(show)?;
            println!("function '{name}' loaded: version {version}");
        }
        FunctionAction::List { target } => {
            for f in connect(&target)
                .await?
                .function_list()
                .await
                .map_err(show)?
            {
                println!("{}", function_line(&f));
            }
        }
        FunctionAction::Info(Named { name, target }) => {
            let f = connect(&target)
                .await?
                .function_info(&name)
                .await
                .map_err(show)?;
            println!("{}", function_line(&f));
        }
        FunctionAction::Delete(Named { name, target }) => {
            connect(&target)
                .await?
                .function_delete(&name)
                .await
                .map_err(show)?;
            println!("function '{name}' deleted");
        }
        FunctionAction::Call {
            name,
            keys,
            args,
            target,
        } => {
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let client = connect(&target).await?;
            // The reply alone on stdout, as `firn get` prints a value.
            match client.fcall(&name, &keys, &args).await.map_err(show)? {
                Some(reply) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&reply)
                        .and_then(|()| out.write_all(b"\n"))
                        .map_err(|e| e.to_string())?;
                }
                None => eprintln!("(the function replied nothing)"),
            }
        }
    }
    Ok(())
}

fn function_line(f: &FunctionInfo) -> String {
    format!(
        "{:<24} version={} module_bytes={} loaded={}",
        f.name,
        f.version,
        f.module_bytes,
        micros_to_rfc3339(f.loaded_us)
    )
}

/// `--from`: `now`, `0`, or a time.
fn trigger_from(text: &str) -> Result<TriggerFrom, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "now" => Ok(TriggerFrom::Now),
        "0" => Ok(TriggerFrom::Start),
        _ => parse_micros(text)
            .map(TriggerFrom::TimeUs)
            .map_err(|e| format!("--from: {e}")),
    }
}

pub async fn run_trigger(action: TriggerAction) -> Result<(), String> {
    match action {
        TriggerAction::Create {
            name,
            prefix,
            log,
            tag,
            stream,
            function,
            from,
            retries,
            deadletter,
            target,
        } => {
            let (function, version) = match function.split_once('@') {
                Some((f, v)) => (
                    f,
                    Some(v.parse().map_err(|_| {
                        format!("--call {function}: '{v}' is not a version number")
                    })?),
                ),
                None => (function.as_str(), None),
            };
            let (base, on) = match (prefix, log.zip(tag), stream) {
                (Some(prefix), None, None) => (
                    TriggerCreate::new(&name, prefix.as_bytes(), function),
                    format!("every change under '{prefix}'"),
                ),
                (None, Some((log, tag)), None) => (
                    TriggerCreate::on_entries(
                        &name,
                        EntrySource::Log {
                            log: log.clone().into(),
                            tag: tag.clone().into(),
                        },
                        function,
                    ),
                    format!("every record of tag '{tag}' of log '{log}'"),
                ),
                (None, None, Some(stream)) => (
                    TriggerCreate::on_entries(
                        &name,
                        EntrySource::Stream(stream.clone().into()),
                        function,
                    ),
                    format!("every entry of stream '{stream}'"),
                ),
                _ => return Err("name one of --prefix, --log with --tag, --stream".into()),
            };
            let create = TriggerCreate {
                version,
                from: trigger_from(&from)?,
                retries,
                deadletter: deadletter.map(Into::into),
                ..base
            };
            connect(&target)
                .await?
                .trigger_create(&create)
                .await
                .map_err(show)?;
            println!("trigger '{name}' created: {function} on {on}");
        }
        TriggerAction::List { target } => {
            for t in connect(&target).await?.trigger_list().await.map_err(show)? {
                println!("{}", trigger_lines(&t)[0]);
            }
        }
        TriggerAction::Info(Named { name, target }) => {
            let t = connect(&target)
                .await?
                .trigger_info(&name)
                .await
                .map_err(show)?;
            for line in trigger_lines(&t) {
                println!("{line}");
            }
        }
        TriggerAction::Pause(Named { name, target }) => {
            let client = connect(&target).await?;
            client.trigger_pause(&name).await.map_err(show)?;
            println!("trigger '{name}' paused");
        }
        TriggerAction::Resume(Named { name, target }) => {
            let client = connect(&target).await?;
            client.trigger_resume(&name).await.map_err(show)?;
            println!("trigger '{name}' resumed");
        }
        TriggerAction::Replay {
            name,
            from,
            to,
            into,
            target,
        } => {
            let from_us = parse_micros(&from).map_err(|e| format!("--from: {e}"))?;
            let to_us = parse_micros(&to).map_err(|e| format!("--to: {e}"))?;
            let replay = connect(&target)
                .await?
                .trigger_replay(&name, from_us, to_us, into.as_bytes())
                .await
                .map_err(show)?;
            println!("replay '{replay}' started: its writes go under '{into}'");
        }
        TriggerAction::Drop(Named { name, target }) => {
            let client = connect(&target).await?;
            client.trigger_drop(&name).await.map_err(show)?;
            println!("trigger '{name}' dropped");
        }
    }
    Ok(())
}

/// A trigger in one line (its definition and counts), then its last error when it has one.
fn trigger_lines(t: &Trigger) -> Vec<String> {
    let function = match t.version {
        Some(v) => format!("{}@{v}", t.function),
        None => t.function.clone(),
    };
    let from = match t.from {
        TriggerFrom::Now => "now".to_string(),
        TriggerFrom::Start => "0".to_string(),
        TriggerFrom::TimeUs(us) => micros_to_rfc3339(us),
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let on = match &t.entries {
        None => format!("prefix='{}'", text(&t.prefix)),
        Some(EntrySource::Log { log, tag }) => format!("log='{}' tag='{}'", text(log), text(tag)),
        Some(EntrySource::Stream(stream)) => format!("stream='{}'", text(stream)),
    };
    let mut lines = vec![format!(
        "{:<24} {on} call={function} from={from} retries={} deadletter={} {} runs={} \
         errors={} dead_letters={} lag_ms={}",
        t.name,
        t.retries,
        String::from_utf8_lossy(&t.deadletter),
        if t.paused { "paused" } else { "running" },
        t.runs,
        t.errors,
        t.dead_letters,
        t.lag_ms.map_or("-".into(), |l| l.to_string()),
    )];
    if let Some(e) = &t.last_error {
        lines.push(format!("last error: {e}"));
    }
    lines
}
