//! FIRN.REQUEST, FIRN.SERVE and FIRN.REPLY: request/response over a service's consumer
//! group (see `services/`, which does the work). They parse into a
//! [`ServiceAction`] rather than a model request, because a worker's consumer name is its
//! connection's, and the connection runs it (giving up when the client goes away).

use bytes::Bytes;
use firn_model::{CallContext, FirnError};

use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;
use crate::router::Router;
use crate::services::{
    REQUEST_TIMEOUT_MS_MAX, ServeOptions, ServedRequest, ServicePolicy, check_timeout_ms,
};

pub const FIRN_REQUEST: CommandSpec = CommandSpec {
    name: "firn.request",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "FIRN.REQUEST service payload [KEY k] [TIMEOUT ms]: sends a request to a service's workers and answers their reply.",
    parse: request,
};

pub const FIRN_SERVE: CommandSpec = CommandSpec {
    name: "firn.serve",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "FIRN.SERVE service [POLICY first|roundrobin|hrw] [ACKWAIT ms] [BLOCK ms]: takes one request as this connection's worker: [id, payload, key], or nil.",
    parse: serve,
};

pub const FIRN_REPLY: CommandSpec = CommandSpec {
    name: "firn.reply",
    arity: 3,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "FIRN.REPLY id payload: answers a request FIRN.SERVE gave; 1 if its requester took the reply, 0 if it was dropped.",
    parse: reply,
};

/// A parsed service command, run by the connection.
pub enum ServiceAction {
    Request {
        service: Bytes,
        payload: Bytes,
        key: Option<Bytes>,
        timeout_ms: u64,
    },
    Serve {
        service: Bytes,
        options: ServeOptions,
    },
    Reply {
        id: Bytes,
        payload: Bytes,
    },
}

fn request(mut args: Args) -> Result<Action, FirnError> {
    let service = args.bytes()?;
    let payload = args.bytes()?;
    let mut key = None;
    let mut timeout_ms = None;
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "KEY" if key.is_none() => key = Some(args.bytes()?),
            "TIMEOUT" if timeout_ms.is_none() => timeout_ms = Some(args.u64("TIMEOUT")?),
            other => return Err(option_error("FIRN.REQUEST", other, "KEY k, TIMEOUT ms")),
        }
    }
    Ok(Action::Service(ServiceAction::Request {
        service,
        payload,
        key,
        timeout_ms: check_timeout_ms(timeout_ms)?,
    }))
}

fn serve(mut args: Args) -> Result<Action, FirnError> {
    let service = args.bytes()?;
    let mut options = ServeOptions::default();
    let mut seen: Vec<String> = Vec::new();
    while !args.is_empty() {
        let word = args.keyword()?;
        if seen.contains(&word) {
            return Err(option_error("FIRN.SERVE", &word, "each option once"));
        }
        match word.as_str() {
            "POLICY" => {
                options.policy = match args.keyword()?.as_str() {
                    "FIRST" => ServicePolicy::First,
                    "ROUNDROBIN" => ServicePolicy::RoundRobin,
                    "HRW" => ServicePolicy::Hrw,
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "POLICY is '{}'; it must be first, roundrobin or hrw",
                            other.to_lowercase()
                        )));
                    }
                }
            }
            "ACKWAIT" => options.ack_wait_ms = bounded(&mut args, "ACKWAIT", 1)?,
            "BLOCK" => options.block_ms = bounded(&mut args, "BLOCK", 0)?,
            other => {
                return Err(option_error(
                    "FIRN.SERVE",
                    other,
                    "POLICY first|roundrobin|hrw, ACKWAIT ms, BLOCK ms",
                ));
            }
        }
        seen.push(word);
    }
    Ok(Action::Service(ServiceAction::Serve { service, options }))
}

/// A millisecond option from `min` to one hour.
fn bounded(args: &mut Args, what: &str, min: u64) -> Result<u64, FirnError> {
    let ms = args.u64(what)?;
    if ms < min || ms > REQUEST_TIMEOUT_MS_MAX {
        return Err(FirnError::BadArgument(format!(
            "{what} is {ms} ms; it must be {min} to {REQUEST_TIMEOUT_MS_MAX}"
        )));
    }
    Ok(ms)
}

fn reply(mut args: Args) -> Result<Action, FirnError> {
    let id = args.bytes()?;
    let payload = args.bytes()?;
    Ok(Action::Service(ServiceAction::Reply { id, payload }))
}

fn option_error(command: &str, word: &str, allowed: &str) -> FirnError {
    FirnError::BadArgument(format!(
        "syntax error: {command} does not take '{word}' here (options: {allowed})"
    ))
}

/// Runs `action` for the connection whose worker name is `consumer`, and shows its answer.
pub async fn run(
    router: &Router,
    ctx: &CallContext,
    action: ServiceAction,
    consumer: Bytes,
) -> Reply {
    let shown = match action {
        ServiceAction::Request {
            service,
            payload,
            key,
            timeout_ms,
        } => router
            .services()
            .request(ctx, service, payload, key, timeout_ms)
            .await
            .map(Reply::Bulk),
        ServiceAction::Serve { service, options } => router
            .services()
            .serve(ctx, service, consumer, options)
            .await
            .map(|served| served.map_or(Reply::Nil, served_reply)),
        ServiceAction::Reply { id, payload } => router
            .services()
            .reply(ctx, &id, payload)
            .await
            .map(|delivered| Reply::Int(i64::from(delivered))),
    };
    shown.unwrap_or_else(|e| Reply::error(&e))
}

fn served_reply(served: ServedRequest) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(served.id),
        Reply::Bulk(served.payload),
        served.key.map_or(Reply::Nil, Reply::Bulk),
    ])
}

impl ServiceAction {
    /// A service is its stream (`firn.svc:{S}`): a request writes it, a worker reads and
    /// writes it (its group), and a reply, whose id names the service, writes it too (it
    /// acks and deletes the request's entry there). So a worker given one service's stream
    /// replies to that service's requests and to no other's.
    pub fn access(&self) -> Result<Vec<firn_model::Access>, FirnError> {
        use firn_model::Access;
        Ok(match self {
            ServiceAction::Request { service, .. } => {
                vec![Access::write_key(&crate::services::service_stream(
                    service,
                )?)]
            }
            ServiceAction::Serve { service, .. } => {
                let stream = crate::services::service_stream(service)?;
                vec![Access::read_key(&stream), Access::write_key(&stream)]
            }
            ServiceAction::Reply { id, .. } => {
                let id = crate::services::RequestId::parse(id)?;
                vec![Access::write_key(&crate::services::service_stream(
                    &id.service,
                )?)]
            }
        })
    }
}
