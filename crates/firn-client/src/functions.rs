//! Functions next to the data over RESP (docs/functions.md): load a WebAssembly module as a
//! function (`FIRN.FUNCTION`), call it as one transaction (`FCALL`), and run it on every
//! committed change of a prefix, record of a log tag or entry of a stream (`FIRN.TRIGGER`).
//!
//! ```no_run
//! # async fn demo(client: &firn_client::Client) -> firn_client::Result<()> {
//! use firn_client::functions::TriggerCreate;
//! let module = std::fs::read("copy.wasm").unwrap();
//! let version = client.function_load("copy", &module).await?;
//! let reply = client.fcall("copy", &[&b"out/1"[..]], &[&b"hello"[..]]).await?;
//! client
//!     .trigger_create(&TriggerCreate::new("copier", b"in/", "copy"))
//!     .await?;
//! # Ok(()) }
//! ```

use bytes::Bytes;
use firn_model::{EntrySource, FunctionInfo, TriggerFrom, Version};
use redis::Value;

use super::{Client, Result, as_bytes, as_text, as_u64, pairs, protocol};

/// A trigger to create (`FIRN.TRIGGER CREATE`).
#[derive(Clone, Debug)]
pub struct TriggerCreate {
    pub name: String,
    /// Every committed change of a key under it is an input.
    pub prefix: Bytes,
    /// Instead of a prefix: every record of a log tag, or entry of a stream.
    pub entries: Option<EntrySource>,
    pub function: String,
    /// The function's version it runs (`None`: the newest, whenever it changes).
    pub version: Option<Version>,
    pub from: TriggerFrom,
    /// Runs of a failing input after the first (`None`: the server's default, 3).
    pub retries: Option<u32>,
    /// The stream a failing input goes to (`None`: `_firn/deadletter/<name>`).
    pub deadletter: Option<Bytes>,
}

impl TriggerCreate {
    /// A trigger from now on, of the function's newest version, with the defaults.
    pub fn new(name: &str, prefix: &[u8], function: &str) -> Self {
        TriggerCreate {
            name: name.into(),
            prefix: Bytes::copy_from_slice(prefix),
            entries: None,
            function: function.into(),
            version: None,
            from: TriggerFrom::Now,
            retries: None,
            deadletter: None,
        }
    }

    /// A trigger on the records of a log tag or the entries of a stream, from now on.
    pub fn on_entries(name: &str, entries: EntrySource, function: &str) -> Self {
        TriggerCreate {
            entries: Some(entries),
            ..TriggerCreate::new(name, b"", function)
        }
    }
}

/// A trigger as `FIRN.TRIGGER INFO` and `LIST` answer it: its definition and what the node
/// that answered counted of it since it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub name: String,
    /// Empty for a trigger on a log tag or a stream.
    pub prefix: Bytes,
    pub entries: Option<EntrySource>,
    pub function: String,
    pub version: Option<Version>,
    pub from: TriggerFrom,
    pub retries: u32,
    /// The stream its failing inputs go to.
    pub deadletter: Bytes,
    pub paused: bool,
    pub runs: u64,
    pub errors: u64,
    pub dead_letters: u64,
    pub last_error: Option<String>,
    /// How far behind its inputs it is: the age of the oldest input not yet committed, in ms
    /// (0 when caught up; `None` before the answering node ran a round).
    pub lag_ms: Option<u64>,
}

fn function_info(v: &Value) -> Result<FunctionInfo> {
    let mut info = FunctionInfo {
        name: String::new(),
        version: 0,
        module_bytes: 0,
        loaded_us: 0,
    };
    for (field, v) in pairs(v)? {
        match field.as_str() {
            "name" => info.name = as_text(&v)?,
            "version" => info.version = as_u64(&v)?,
            "module_bytes" => info.module_bytes = as_u64(&v)?,
            "loaded_us" => info.loaded_us = as_u64(&v)?,
            _ => {}
        }
    }
    Ok(info)
}

fn optional<T>(v: &Value, read: impl Fn(&Value) -> Result<T>) -> Result<Option<T>> {
    match v {
        Value::Nil => Ok(None),
        v => read(v).map(Some),
    }
}

fn trigger(v: &Value) -> Result<Trigger> {
    let mut t = Trigger {
        name: String::new(),
        prefix: Bytes::new(),
        entries: None,
        function: String::new(),
        version: None,
        from: TriggerFrom::Now,
        retries: 0,
        deadletter: Bytes::new(),
        paused: false,
        runs: 0,
        errors: 0,
        dead_letters: 0,
        last_error: None,
        lag_ms: None,
    };
    let (mut log, mut tag) = (None, None);
    for (field, v) in pairs(v)? {
        match field.as_str() {
            "name" => t.name = as_text(&v)?,
            "prefix" => t.prefix = as_bytes(&v).ok_or_else(|| protocol(&v))?,
            "stream" => {
                t.entries = Some(EntrySource::Stream(
                    as_bytes(&v).ok_or_else(|| protocol(&v))?,
                ))
            }
            "log" => log = Some(as_bytes(&v).ok_or_else(|| protocol(&v))?),
            "tag" => tag = Some(as_bytes(&v).ok_or_else(|| protocol(&v))?),
            // `fn@3` when it runs one version of the function.
            "function" => {
                let text = as_text(&v)?;
                match text.split_once('@') {
                    Some((name, version)) => {
                        t.function = name.into();
                        t.version = Some(version.parse().map_err(|_| protocol(&v))?);
                    }
                    None => t.function = text,
                }
            }
            "from" => {
                t.from = match (&v, as_text(&v).ok().as_deref()) {
                    (Value::Int(_), _) => TriggerFrom::TimeUs(as_u64(&v)?),
                    (_, Some("now")) => TriggerFrom::Now,
                    (_, Some("0")) => TriggerFrom::Start,
                    _ => return Err(protocol(&v)),
                }
            }
            "retries" => t.retries = u32::try_from(as_u64(&v)?).map_err(|_| protocol(&v))?,
            "deadletter" => t.deadletter = as_bytes(&v).ok_or_else(|| protocol(&v))?,
            "paused" => t.paused = as_u64(&v)? == 1,
            "runs" => t.runs = as_u64(&v)?,
            "errors" => t.errors = as_u64(&v)?,
            "dead_letters" => t.dead_letters = as_u64(&v)?,
            "last_error" => t.last_error = optional(&v, as_text)?,
            "lag_ms" => t.lag_ms = optional(&v, as_u64)?,
            _ => {}
        }
    }
    if let (Some(log), Some(tag)) = (log, tag) {
        t.entries = Some(EntrySource::Log { log, tag });
    }
    Ok(t)
}

impl Client {
    /// Loads `module` (a WebAssembly module) as the function `name`; its version (a new one
    /// each load). A module that does not parse, export `run` or import only what Firn
    /// provides is refused, with why.
    pub async fn function_load(&self, name: &str, module: &[u8]) -> Result<Version> {
        let mut cmd = redis::cmd("FIRN.FUNCTION");
        cmd.arg("LOAD").arg(name).arg(module);
        as_u64(&self.run(&cmd).await?)
    }

    pub async fn function_list(&self) -> Result<Vec<FunctionInfo>> {
        match self.run(redis::cmd("FIRN.FUNCTION").arg("LIST")).await? {
            Value::Array(items) => items.iter().map(function_info).collect(),
            v => Err(protocol(v)),
        }
    }

    pub async fn function_info(&self, name: &str) -> Result<FunctionInfo> {
        function_info(
            &self
                .run(redis::cmd("FIRN.FUNCTION").arg("INFO").arg(name))
                .await?,
        )
    }

    pub async fn function_delete(&self, name: &str) -> Result<()> {
        self.run(redis::cmd("FIRN.FUNCTION").arg("DELETE").arg(name))
            .await
            .map(|_| ())
    }

    /// Runs the function once on `keys` and `args`, its writes committed as one
    /// transaction (`FCALL`); what it replied (`None`: nothing). A run that fails answers
    /// `ERR function failed: …` and writes nothing.
    pub async fn fcall(&self, name: &str, keys: &[&[u8]], args: &[&[u8]]) -> Result<Option<Bytes>> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(name).arg(keys.len());
        for part in keys.iter().chain(args) {
            cmd.arg(*part);
        }
        match self.run(&cmd).await? {
            Value::Nil => Ok(None),
            v => as_bytes(&v).map(Some).ok_or_else(|| protocol(&v)),
        }
    }

    pub async fn trigger_create(&self, t: &TriggerCreate) -> Result<()> {
        let function = match t.version {
            Some(v) => format!("{}@{v}", t.function),
            None => t.function.clone(),
        };
        let mut cmd = redis::cmd("FIRN.TRIGGER");
        cmd.arg("CREATE").arg(&t.name).arg("ON");
        match &t.entries {
            None => cmd.arg("PREFIX").arg(t.prefix.as_ref()),
            Some(EntrySource::Log { log, tag }) => cmd
                .arg("LOG")
                .arg(log.as_ref())
                .arg("TAG")
                .arg(tag.as_ref()),
            Some(EntrySource::Stream(stream)) => cmd.arg("STREAM").arg(stream.as_ref()),
        };
        cmd.arg("CALL").arg(function);
        cmd.arg("FROM").arg(match t.from {
            TriggerFrom::Now => "now".to_string(),
            TriggerFrom::Start => "0".to_string(),
            TriggerFrom::TimeUs(us) => us.to_string(),
        });
        if let Some(n) = t.retries {
            cmd.arg("RETRIES").arg(n);
        }
        if let Some(stream) = &t.deadletter {
            cmd.arg("DEADLETTER").arg(stream.as_ref());
        }
        self.run(&cmd).await.map(|_| ())
    }

    pub async fn trigger_list(&self) -> Result<Vec<Trigger>> {
        match self.run(redis::cmd("FIRN.TRIGGER").arg("LIST")).await? {
            Value::Array(items) => items.iter().map(trigger).collect(),
            v => Err(protocol(v)),
        }
    }

    pub async fn trigger_info(&self, name: &str) -> Result<Trigger> {
        trigger(
            &self
                .run(redis::cmd("FIRN.TRIGGER").arg("INFO").arg(name))
                .await?,
        )
    }

    /// Stops running the trigger; it keeps its position, and [`Client::trigger_resume`]
    /// goes on from there.
    pub async fn trigger_pause(&self, name: &str) -> Result<()> {
        self.trigger_named("PAUSE", name).await
    }

    pub async fn trigger_resume(&self, name: &str) -> Result<()> {
        self.trigger_named("RESUME", name).await
    }

    /// Deletes the trigger and its position.
    pub async fn trigger_drop(&self, name: &str) -> Result<()> {
        self.trigger_named("DROP", name).await
    }

    /// Runs the trigger's function again over the inputs committed from `from_us` to `to_us`
    /// (µs since the epoch), every key it writes put under `into`: a trigger of its own,
    /// whose name this answers (`<name>~replay`; [`Client::trigger_info`] shows its
    /// progress, [`Client::trigger_drop`] ends it).
    pub async fn trigger_replay(
        &self,
        name: &str,
        from_us: u64,
        to_us: u64,
        into: &[u8],
    ) -> Result<String> {
        let mut cmd = redis::cmd("FIRN.TRIGGER");
        cmd.arg("REPLAY").arg(name);
        cmd.arg("FROM")
            .arg(from_us)
            .arg("TO")
            .arg(to_us)
            .arg("INTO")
            .arg(into);
        self.run(&cmd).await?;
        Ok(firn_model::function::replay_name(name))
    }

    async fn trigger_named(&self, subcommand: &str, name: &str) -> Result<()> {
        self.run(redis::cmd("FIRN.TRIGGER").arg(subcommand).arg(name))
            .await
            .map(|_| ())
    }
}
