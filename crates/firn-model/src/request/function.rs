//! Requests of functions next to the data: modules loaded under a name, called directly
//! (`FCALL`), run by triggers on each committed change of a prefix, or by timers
//! (docs/architecture.md, "Functions next to the data").

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::FirnError;
use crate::key::{Key, Version};
use crate::limits::FUNCTION_NAME_BYTES_MAX;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FunctionRequest {
    /// `FIRN.FUNCTION LOAD name module`: checks the module and stores it as the function's
    /// next version. Answers [`crate::Response::Functions`] with it.
    Load {
        name: String,
        module: Bytes,
    },
    /// `FIRN.FUNCTION LIST`.
    List,
    /// `FIRN.FUNCTION INFO name`.
    Info {
        name: String,
    },
    /// `FIRN.FUNCTION DELETE name`.
    Delete {
        name: String,
    },
    /// `FCALL name numkeys key… arg…`: one run, its writes committed as one transaction.
    /// Answers [`crate::Response::Called`].
    Call {
        name: String,
        keys: Vec<Key>,
        args: Vec<Bytes>,
    },
    Trigger(TriggerRequest),
    Timer(TimerRequest),
    /// `request` made by `user` (with `--users`): a call runs with the user's rights, and a
    /// trigger or timer it makes acts with them. Put on by the session that checked the
    /// user, never by a client.
    As {
        user: String,
        request: Box<FunctionRequest>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TriggerRequest {
    Create(Box<TriggerSpec>),
    Pause(String),
    Resume(String),
    Drop(String),
    Info(String),
    List,
    /// `FIRN.TRIGGER REPLAY name FROM t1 TO t2 INTO prefix`: the trigger's function run again
    /// over the inputs committed from `t1` to `t2`, each reading the cut at its stamp, its
    /// writes under `into` — as a trigger of its own, [`replay_name`].
    Replay {
        name: String,
        from_us: u64,
        to_us: u64,
        into: Bytes,
    },
}

/// Where a new trigger starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TriggerFrom {
    /// The changes committed after it is created.
    Now,
    /// Every change still kept (`FROM 0`).
    Start,
    /// Changes committed at or after this time, µs since the epoch.
    TimeUs(u64),
}

/// A trigger's definition, as `_firn/trigger/<name>` holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSpec {
    pub name: String,
    /// The keys it follows: every committed change of a key under this prefix (empty for a
    /// trigger on a log tag or a stream).
    pub prefix: Bytes,
    /// A trigger on the records of a log tag or the entries of a stream, instead of a
    /// prefix's changes.
    #[serde(default)]
    pub entries: Option<EntrySource>,
    pub function: String,
    /// The function's version it runs; none: the newest.
    pub version: Option<Version>,
    pub from: TriggerFrom,
    /// Runs of one input after the first that failed, before it goes to the dead letters.
    pub retries: u32,
    /// The stream a failing input goes to; none: `_firn/deadletter/<name>`.
    pub deadletter: Option<Bytes>,
    pub paused: bool,
    /// The user that created it (with `--users`): the trigger acts with that user's rights.
    pub creator: Option<String>,
    /// When it was created, µs since the epoch (`FROM now` starts here).
    pub created_us: u64,
    /// A replay's end: inputs committed after it are not its (none: a live trigger).
    #[serde(default)]
    pub until_us: Option<u64>,
    /// A replay's prefix: every key its runs write is written under it instead.
    #[serde(default)]
    pub into: Option<Bytes>,
}

/// The records a trigger on a log follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntrySource {
    /// `ON LOG l TAG t`: each record of tag `t` of log `l`, its payload the run's argument.
    Log { log: Bytes, tag: Bytes },
    /// `ON STREAM s`: each entry added to stream `s`, its id and then its fields and values
    /// the run's arguments.
    Stream(Bytes),
}

impl EntrySource {
    /// The log and tag the records are read from (a stream is the tag of its own name).
    pub fn log_and_tag(&self) -> (&Bytes, &Bytes) {
        match self {
            EntrySource::Log { log, tag } => (log, tag),
            EntrySource::Stream(s) => (s, s),
        }
    }
}

/// What a replay of trigger `name` is called: a name no trigger can take (`~`).
pub fn replay_name(name: &str) -> String {
    format!("{name}~replay")
}

/// Keys under this prefix are Firn's own (functions, triggers, timers, their cursors): a
/// client reads them but writes them only through the commands that keep them.
pub const RESERVED_PREFIX: &[u8] = b"_firn/";

/// Retries of a failing input by default.
pub const TRIGGER_RETRIES_DEFAULT: u32 = 3;
/// The most retries a trigger may ask for.
pub const TRIGGER_RETRIES_MAX: u32 = 100;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimerRequest {
    /// `FIRN.TIMER SET name AT t | IN ms CALL fn PAYLOAD p`, or `… XADD stream field value…`
    /// (`entry`; `function` empty): a stream entry delivered at a time.
    Set {
        name: String,
        at_us: u64,
        function: String,
        payload: Bytes,
        #[serde(default)]
        entry: Option<DelayedEntry>,
    },
    Cancel(String),
    List,
}

/// A timer, as `_firn/timer/<name>` holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerSpec {
    pub name: String,
    pub at_us: u64,
    /// The function it runs, with `payload` its argument (empty for a delayed entry).
    pub function: String,
    pub payload: Bytes,
    pub creator: Option<String>,
    /// A stream entry added when it is due, instead of a function's run.
    #[serde(default)]
    pub entry: Option<DelayedEntry>,
}

/// A stream entry a timer adds when it is due (`FIRN.TIMER SET … XADD stream field value…`):
/// a delayed job, its id given at delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayedEntry {
    pub stream: Bytes,
    pub fields: Vec<(Bytes, Bytes)>,
}

/// A function as `LIST` and `INFO` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionInfo {
    pub name: String,
    pub version: Version,
    pub module_bytes: u64,
    /// When this version was loaded, µs since the epoch.
    pub loaded_us: u64,
}

/// A trigger as `INFO` and `LIST` show it: its definition and how it is doing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerInfo {
    pub spec: TriggerSpec,
    /// Inputs run and committed, failed runs and inputs sent to the dead letters, as the
    /// nodes that answered counted them since they started.
    pub runs: u64,
    pub errors: u64,
    pub dead_letters: u64,
    pub last_error: Option<String>,
    /// How far behind its inputs it is: how long ago the oldest input not yet committed was
    /// committed, the most over the shards the answering node leads (ms; 0 when caught up;
    /// none before a round ran there).
    pub lag_ms: Option<u64>,
}

/// A name of a function, trigger or timer: 1 to 128 bytes of letters, digits, `_`, `-`, `.`.
pub fn check_name(kind: &str, name: &str) -> Result<(), FirnError> {
    let ok = !name.is_empty()
        && name.len() <= FUNCTION_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(FirnError::BadArgument(format!(
            "a {kind} name is 1 to {FUNCTION_NAME_BYTES_MAX} letters, digits, '_', '-' or '.'; got '{name}'"
        )))
    }
}

impl FunctionRequest {
    pub fn is_write(&self) -> bool {
        if let FunctionRequest::As { request, .. } = self {
            return request.is_write();
        }
        !matches!(
            self,
            FunctionRequest::List
                | FunctionRequest::Info { .. }
                | FunctionRequest::Trigger(TriggerRequest::Info(_) | TriggerRequest::List)
                | FunctionRequest::Timer(TimerRequest::List)
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            FunctionRequest::Load { .. } => "function_load",
            FunctionRequest::List => "function_list",
            FunctionRequest::Info { .. } => "function_info",
            FunctionRequest::Delete { .. } => "function_delete",
            FunctionRequest::Call { .. } => "fcall",
            FunctionRequest::Trigger(_) => "trigger",
            FunctionRequest::Timer(_) => "timer",
            FunctionRequest::As { request, .. } => request.name(),
        }
    }
}
