//! Compare, then write, across shards (`FIRN.TXN`): etcd's Txn.
//!
//! ```no_run
//! # async fn demo(client: &firn_client::Client) -> firn_client::Result<()> {
//! use firn_client::txn::{Step, Txn};
//! use firn_model::{CompareOp, CompareTarget};
//! let taken = client
//!     .txn(
//!         &Txn::new()
//!             .compare(b"lock", CompareTarget::Exists(false), CompareOp::Eq)
//!             .then(Step::Put(b"lock".to_vec(), b"me".to_vec()))
//!             .then(Step::IncrBy(b"fence".to_vec(), 1))
//!             .otherwise(Step::Get(b"lock".to_vec())),
//!     )
//!     .await?;
//! println!("took the lock: {}", taken.succeeded);
//! # Ok(()) }
//! ```

use bytes::Bytes;
use firn_model::{CompareOp, CompareTarget};
use redis::Value;

use super::{Client, Result, protocol};

/// One command of a branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    IncrBy(Vec<u8>, i64),
    /// A record appended to a log with its tags (1 to 16), as `FIRN.LOG APPEND`.
    Append {
        log: Vec<u8>,
        tags: Vec<Vec<u8>>,
        payload: Vec<u8>,
    },
}

/// A transaction: compares on keys, the steps that run when they all hold, and the steps
/// that run otherwise.
#[derive(Clone, Debug, Default)]
pub struct Txn {
    compares: Vec<(Vec<u8>, CompareTarget, CompareOp)>,
    then: Vec<Step>,
    otherwise: Vec<Step>,
}

impl Txn {
    pub fn new() -> Self {
        Txn::default()
    }

    pub fn compare(mut self, key: &[u8], target: CompareTarget, op: CompareOp) -> Self {
        self.compares.push((key.to_vec(), target, op));
        self
    }

    pub fn then(mut self, step: Step) -> Self {
        self.then.push(step);
        self
    }

    pub fn otherwise(mut self, step: Step) -> Self {
        self.otherwise.push(step);
        self
    }

    fn command(&self, mut cmd: redis::Cmd) -> redis::Cmd {
        for (key, target, op) in &self.compares {
            cmd.arg("IF").arg(key);
            let op = match op {
                CompareOp::Eq => "=",
                CompareOp::Ne => "!=",
                CompareOp::Lt => "<",
                CompareOp::Le => "<=",
                CompareOp::Gt => ">",
                CompareOp::Ge => ">=",
            };
            match target {
                CompareTarget::Version(v) => cmd.arg("VERSION").arg(op).arg(*v),
                CompareTarget::Value(v) => cmd.arg("VALUE").arg(op).arg(v.as_ref()),
                CompareTarget::Exists(e) => cmd.arg("EXISTS").arg(op).arg(*e as u8),
                CompareTarget::Stamp(t) => cmd.arg("STAMP").arg(op).arg(t.to_string()),
                // The server takes no lease compare from a client (`SET … LEASE` makes its own).
                CompareTarget::Lease(id) => cmd.arg("LEASE").arg(op).arg(*id),
            };
        }
        for (word, steps) in [("THEN", &self.then), ("ELSE", &self.otherwise)] {
            for step in steps {
                cmd.arg(word);
                match step {
                    Step::Put(k, v) => cmd.arg(3).arg("SET").arg(k).arg(v),
                    Step::Delete(k) => cmd.arg(2).arg("DEL").arg(k),
                    Step::Get(k) => cmd.arg(2).arg("GET").arg(k),
                    Step::IncrBy(k, by) => cmd.arg(3).arg("INCRBY").arg(k).arg(*by),
                    Step::Append { log, tags, payload } => cmd
                        .arg(6 + tags.len())
                        .arg("FIRN.LOG")
                        .arg("APPEND")
                        .arg(log)
                        .arg("TAGS")
                        .arg(tags.len())
                        .arg(tags)
                        .arg(payload),
                };
            }
        }
        cmd
    }
}

/// What one step answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepReply {
    /// A put.
    Ok,
    /// A get's value (`None`: no value), or a counter's.
    Value(Option<Bytes>),
    /// A delete's count, an increment's new value.
    Int(i64),
    /// An append's seqs, one per record (`ms-n`).
    Seqs(Vec<String>),
    /// The step failed (and changed nothing): its error line.
    Error(String),
}

/// What a transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether every compare held (the `then` steps ran) or not (the `otherwise` steps).
    pub succeeded: bool,
    /// Each step's answer, of the branch that ran.
    pub replies: Vec<StepReply>,
}

impl Client {
    /// Runs `txn`: all its writes or none, at one stamp, whatever shards its keys are in.
    pub async fn txn(&self, txn: &Txn) -> Result<TxnResult> {
        match self
            .run_write(&txn.command(self.write_cmd("FIRN.TXN")))
            .await?
        {
            Value::Array(parts) if parts.len() == 2 => {
                let succeeded = matches!(parts[0], Value::Int(1));
                let Value::Array(replies) = &parts[1] else {
                    return Err(protocol(parts[1].clone()));
                };
                Ok(TxnResult {
                    succeeded,
                    replies: replies.iter().map(step_reply).collect(),
                })
            }
            v => Err(protocol(v)),
        }
    }
}

fn step_reply(v: &Value) -> StepReply {
    match v {
        Value::Okay | Value::SimpleString(_) => StepReply::Ok,
        Value::Nil => StepReply::Value(None),
        Value::BulkString(b) => StepReply::Value(Some(Bytes::copy_from_slice(b))),
        Value::Int(n) => StepReply::Int(*n),
        Value::Array(seqs) => StepReply::Seqs(
            seqs.iter()
                .map(|s| match s {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect(),
        ),
        Value::ServerError(e) => {
            StepReply::Error(format!("{} {}", e.code(), e.details().unwrap_or_default()))
        }
        other => StepReply::Error(format!("unexpected reply {other:?}")),
    }
}
