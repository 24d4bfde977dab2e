//! `GET /v1/streams/{key}/groups/{group}/consumers/{consumer}/events`: a consumer's
//! deliveries as Server-Sent Events. The stream is a loop of the same XREADGROUP the read
//! endpoint makes (`GroupWrite::ReadGroup`): first the consumer's own pending entries (so a
//! consumer that reconnects gets again what it was given and did not ack), then `>` with a
//! bounded BLOCK, again and again. Each entry is one event (`id:` its id, `data:` its JSON);
//! acks come by the ack endpoint, so delivery is at-least-once. The loop runs inside the
//! response body: when the client goes away the body is dropped, and with it the read in
//! progress. A node serves at most [`GROUP_EVENT_STREAMS_MAX`] such streams at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use firn_model::{FirnError, GroupEntry, GroupRead, LogSeq};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::groups::{GroupReadOf, entry_json, name_of};
use super::params::{key_of, param_u64};
use super::{ApiResult, Params, Session, Stopping};
use crate::router::Router;

/// Open event streams a node serves at once; each holds one blocked read. Past it a new
/// stream is refused (503 TRYAGAIN).
pub const GROUP_EVENT_STREAMS_MAX: usize = 1_024;

/// How long one `>` read of an event stream waits before it asks again. Each ask is one Raft
/// entry of the stream's shard, so an idle stream costs one entry per this long; it is under
/// the default liveness (30 s), so a consumer that only listens stays live.
pub const GROUP_EVENT_BLOCK_MS: u64 = 25_000;

/// Entries one read of an event stream takes: the events it buffers, and so the most that
/// are delivered and not yet sent when the client goes away (they stay pending).
const GROUP_EVENT_BATCH: u64 = 16;

/// The node's permits for open event streams.
#[derive(Clone)]
pub(super) struct EventStreams(Arc<Semaphore>);

impl Default for EventStreams {
    fn default() -> Self {
        EventStreams(Arc::new(Semaphore::new(GROUP_EVENT_STREAMS_MAX)))
    }
}

/// Where an event stream is.
struct Follow {
    router: Arc<Router>,
    session: Session,
    read: GroupReadOf,
    noack: bool,
    /// `Some(after)`: still sending the consumer's pending entries after `after`.
    replay_after: Option<LogSeq>,
    /// Entries still to send (`None`: no end).
    left: Option<u64>,
    ready: VecDeque<GroupEntry>,
    done: bool,
    _permit: OwnedSemaphorePermit,
}

impl Follow {
    /// The next event, or `None` when the stream is done (its count sent, or an error
    /// reported).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if self.done || self.left == Some(0) {
                return None;
            }
            if let Some(entry) = self.ready.pop_front() {
                self.left = self.left.map(|n| n - 1);
                return Some(
                    Event::default()
                        .id(entry.seq.to_string())
                        .data(entry_json(&entry).to_string()),
                );
            }
            let count = self
                .left
                .map_or(GROUP_EVENT_BATCH, |n| n.min(GROUP_EVENT_BATCH))
                as usize;
            let (id, block_ms) = match self.replay_after {
                Some(after) => (Some(after), None),
                None => (None, Some(GROUP_EVENT_BLOCK_MS)),
            };
            let read =
                self.read
                    .entries(&self.router, &self.session, id, count, self.noack, block_ms);
            match read.await {
                Ok(entries) => {
                    if self.replay_after.is_some() {
                        // The consumer's pending list is read to its end, then new entries.
                        self.replay_after = entries.last().map(|e| e.seq);
                    }
                    self.ready.extend(entries);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Event::default().event("error").data(
                        json!({"error": e.0.resp_code(), "message": e.0.to_string()}).to_string(),
                    ));
                }
            }
        }
    }
}

/// `?count=n` (entries to send, then the stream ends; default: no end) and `?noack=true`
/// (deliver without adding to the pending list; no replay of pending entries then).
pub(super) async fn events(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    axum::Extension(streams): axum::Extension<EventStreams>,
    axum::Extension(Stopping(mut stop)): axum::Extension<Stopping>,
    Path((key, group, consumer)): Path<(String, String, String)>,
    Query(q): Params,
) -> ApiResult<HttpResponse> {
    let read = GroupReadOf {
        key: key_of(key)?,
        group: name_of("group", group)?,
        consumer: name_of("consumer", consumer)?,
    };
    let left = param_u64(&q, "count")?;
    if left == Some(0) {
        return Err(
            FirnError::BadArgument("count is at least 1 (leave it out for no end)".into()).into(),
        );
    }
    let noack = match q.get("noack").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(
                FirnError::BadArgument(format!("noack is true or false, got '{other}'")).into(),
            );
        }
    };
    let permit = streams.0.try_acquire_owned().map_err(|_| {
        FirnError::Busy(format!(
            "this node serves {GROUP_EVENT_STREAMS_MAX} group event streams, its limit; \
             close one or use another node"
        ))
    })?;
    // An unknown group is a 404 before the stream opens, not an error event after it: a
    // read of group state, which proposes nothing.
    let probe = GroupRead::Consumers {
        key: read.key.clone(),
        group: read.group.clone(),
    };
    session.execute(&router, probe.into()).await?;
    let follow = Follow {
        router,
        session,
        read,
        noack,
        replay_after: (!noack).then_some(LogSeq::ZERO),
        left,
        ready: VecDeque::new(),
        done: false,
        _permit: permit,
    };
    let events = futures::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok::<_, Infallible>(event), follow))
    })
    // The stream ends when the node stops, so that its shutdown is not held open.
    .take_until(async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
