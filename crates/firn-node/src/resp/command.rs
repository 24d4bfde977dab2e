//! The shape every RESP command has: a [`CommandSpec`] (name, arity, flags, summary and its
//! `parse`), the [`Action`] its parse hands the connection, and the [`Render`] that shows the
//! router's answer the way the command promises. Commands live one family to a file under
//! `cmd/`; the registry (`registry.rs`) lists them. Nothing here knows any single command.

use firn_model::{Answer, FirnError, Request, Response, WatchRequest};

use super::args::Args;
use super::client::Client;
use super::cmd::scan::RedisScan;
use super::cmd::service::ServiceAction;
use super::cmd::subscribe::PubSubAction;
use super::reply::Reply;

/// One command as the registry knows it: everything `COMMAND`, `COMMAND INFO`,
/// `COMMAND DOCS` and dispatch need, so none of them can drift from what parse accepts.
pub struct CommandSpec {
    /// Lower case, as `COMMAND` lists it.
    pub name: &'static str,
    /// Redis convention: the argument count including the name; negative means at least.
    /// Dispatch checks it before `parse` runs.
    pub arity: i64,
    pub flags: &'static [Flag],
    /// Where the keys are, as `COMMAND` reports them to cluster-aware clients.
    pub keys: KeyPositions,
    pub group: Group,
    /// The Firn version that added the command (`COMMAND DOCS`).
    pub since: &'static str,
    /// One line for `COMMAND DOCS`; docs/api.md has the full reference.
    pub summary: &'static str,
    pub parse: fn(Args) -> Result<Action, FirnError>,
}

/// The Firn release every command so far arrived in.
pub const FIRST_RELEASE: &str = "0.1.0";

/// Command flags, with Redis's names (`COMMAND` shows them as status strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// Changes data: goes through the Raft log.
    Write,
    /// Reads data and changes nothing.
    ReadOnly,
    /// Changes the cluster or the node's settings.
    Admin,
    /// Turns the connection into a stream of pushed messages.
    PubSub,
    /// Constant time (answered by the connection, or one key).
    Fast,
    /// The keys are not at fixed positions (options come first).
    MovableKeys,
}

impl Flag {
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::Write => "write",
            Flag::ReadOnly => "readonly",
            Flag::Admin => "admin",
            Flag::PubSub => "pubsub",
            Flag::Fast => "fast",
            Flag::MovableKeys => "movablekeys",
        }
    }
}

/// The command groups of `COMMAND DOCS`: Redis's names, and `firn` for Firn's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Connection,
    Server,
    Generic,
    String,
    Stream,
    Cluster,
    PubSub,
    Transactions,
    /// FCALL: a function run next to the data (Redis's group for FCALL).
    Scripting,
    Firn,
}

impl Group {
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Connection => "connection",
            Group::Server => "server",
            Group::Generic => "generic",
            Group::String => "string",
            Group::Stream => "stream",
            Group::Cluster => "cluster",
            Group::PubSub => "pubsub",
            Group::Transactions => "transactions",
            Group::Scripting => "scripting",
            Group::Firn => "firn",
        }
    }
}

/// First key, last key (negative: counted from the end) and step, as `COMMAND` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPositions {
    pub first: i64,
    pub last: i64,
    pub step: i64,
}

impl KeyPositions {
    /// No keys, or keys only after options (with [`Flag::MovableKeys`]).
    pub const NONE: KeyPositions = KeyPositions::at(0, 0, 0);
    /// One key, the first argument.
    pub const FIRST: KeyPositions = KeyPositions::at(1, 1, 1);
    /// Every argument is a key.
    pub const ALL: KeyPositions = KeyPositions::at(1, -1, 1);
    /// Key, value, key, value…
    pub const PAIRS: KeyPositions = KeyPositions::at(1, -1, 2);

    pub const fn at(first: i64, last: i64, step: i64) -> Self {
        KeyPositions { first, last, step }
    }
}

/// What the connection does with a parsed command.
pub enum Action {
    /// Answer at once; nothing reaches the router.
    Reply(Reply),
    /// Send the request to the router and show its answer with the command's render.
    Execute(Request, Render),
    /// SCAN with an integer cursor (resolved against the node's cursor table).
    RedisScan(RedisScan),
    Watch(WatchRequest),
    Unwatch,
    /// A connection-local command: it applies itself to the connection's client.
    Client(ClientCommand),
    Info(Option<String>),
    /// CLUSTER subcommands that describe the cluster (upper-cased subcommand).
    Cluster(String),
    /// FIRN.CLUSTER REMOVE id: start removing a node.
    ClusterRemove(u64),
    /// Publish/subscribe: publishing, this connection's subscriptions, PUBSUB, RESET.
    PubSub(PubSubAction),
    /// FIRN.REQUEST, FIRN.SERVE, FIRN.REPLY: run by the connection, whose id names its worker.
    Service(ServiceAction),
    /// A write with an idempotency key (`IDMP producer id …`, `XADD … IDMP producer id`).
    Once(firn_model::IdemKey, Box<Action>),
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: the connection's transaction.
    Transaction(super::cmd::multi::TxnCommand),
}

/// A command that acts on the connection's client alone ([`Client`]): its id, protocol,
/// session, closing. Its file says what it does, as a function of the client.
pub struct ClientCommand {
    apply: Box<dyn FnOnce(&mut Client) -> Reply + Send>,
    /// Answered before the connection has signed in (AUTH, HELLO with AUTH, QUIT).
    before_sign_in: bool,
}

impl ClientCommand {
    pub fn before_sign_in(&self) -> bool {
        self.before_sign_in
    }

    /// Runs the command on `client`: its answer.
    pub fn apply(self, client: &mut Client) -> Reply {
        (self.apply)(client)
    }
}

impl Action {
    /// A command that acts on the connection's client alone.
    pub fn client(apply: impl FnOnce(&mut Client) -> Reply + Send + 'static) -> Action {
        Action::Client(ClientCommand {
            apply: Box::new(apply),
            before_sign_in: false,
        })
    }

    /// [`Action::client`], answered before the connection has signed in too.
    pub fn client_before_sign_in(
        apply: impl FnOnce(&mut Client) -> Reply + Send + 'static,
    ) -> Action {
        Action::Client(ClientCommand {
            apply: Box::new(apply),
            before_sign_in: true,
        })
    }
}

/// How a command shows the router's answer: functions of the command's own file, so adding
/// a command never touches a shared match.
#[derive(Clone, Copy)]
pub struct Render {
    answer: fn(Response) -> Reply,
    error: fn(FirnError) -> Reply,
}

impl Render {
    /// Shows answers with `answer` and errors as Redis error lines.
    pub const fn new(answer: fn(Response) -> Reply) -> Self {
        Render {
            answer,
            error: error_line,
        }
    }

    /// Shows errors with `error` instead (SET answers nil when its condition fails).
    pub const fn errors_as(self, error: fn(FirnError) -> Reply) -> Self {
        Render { error, ..self }
    }

    /// Shows an answer with the command's rendering; a `local` read whose command answers a
    /// map (FIRN.GET; GET is never local) also says how far behind it may be.
    pub fn show(self, result: Result<Answer, FirnError>) -> Reply {
        let answer = match result {
            Ok(answer) => answer,
            Err(e) => return (self.error)(e),
        };
        let stale = answer.staleness;
        let mut reply = (self.answer)(answer.response);
        if let (Reply::Map(fields), Some(stale)) = (&mut reply, stale) {
            fields.push((
                Reply::text("applied_through"),
                Reply::text(stale.applied_through.to_string()),
            ));
            fields.push((
                Reply::text("stale_at_most_us"),
                Reply::Int(stale.at_most_us as i64),
            ));
        }
        reply
    }
}

fn error_line(e: FirnError) -> Reply {
    Reply::error(&e)
}

/// An answer of a kind the command never asked for: a bug, reported rather than hidden.
pub fn unexpected(command: &str, response: Response) -> Reply {
    Reply::error(&FirnError::Internal(format!(
        "{command} cannot show {response:?}"
    )))
}

impl Action {
    /// Runs `request` and shows its answer with `render`.
    pub fn execute(request: impl Into<Request>, render: Render) -> Action {
        Action::Execute(request.into(), render)
    }
}
