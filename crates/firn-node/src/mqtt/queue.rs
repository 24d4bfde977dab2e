//! A persistent session's queue: the stream `_firn/mqtt/queue/{C}` with the consumer group
//! `session`. Committed PUBLISHes are appended to the queues of the sessions they match
//! ([`enqueue`]); a connected session reads its queue — what was delivered and never
//! acknowledged first, then what is new — through a [`QueueReader`], and acks and deletes
//! each entry once its client acknowledged it ([`ack`]).

use std::sync::Arc;

use bytes::Bytes;
use firn_model::log::{decode_fields, encode_fields};
use firn_model::{
    CallContext, FirnError, GroupChange, GroupOptions, GroupStart, GroupWrite, Key, LogSeq,
    LogWrite, Response, StreamId, StreamTrim,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::session::queue_key;
use crate::router::Router;

/// The most messages a session's queue keeps; past it the oldest are dropped (Mosquitto's
/// `max_queued_messages`, larger: a device that was away an hour at a message a second
/// finds all of them).
pub const SESSION_QUEUE_MAX: u64 = 100_000;
/// The consumer group of a session's queue, and its one consumer.
const GROUP: &[u8] = b"session";
const CONSUMER: &[u8] = b"client";
/// Entries one read of the queue takes at most.
const READ_COUNT: usize = 64;
/// How long one blocking read waits before it looks again (so a reader whose connection
/// is gone ends within it).
const READ_BLOCK_MS: u64 = 5_000;

const FIELD_TOPIC: &[u8] = b"topic";
const FIELD_PAYLOAD: &[u8] = b"payload";

/// A message of a session's queue, as the connection delivers it.
#[derive(Debug)]
pub struct Queued {
    pub seq: LogSeq,
    pub topic: String,
    pub payload: Bytes,
}

fn ctx() -> CallContext {
    CallContext::default()
}

/// Appends `topic`'s message to the queue of each of `clients`, all at once; an error if any
/// append failed (the PUBLISH is then not acknowledged, and its client sends it again). A
/// queue that does not exist (its session just ended) takes nothing.
pub async fn enqueue(
    router: &Router,
    clients: &[String],
    topic: &str,
    payload: &Bytes,
) -> Result<(), FirnError> {
    let fields = encode_fields(&[
        (
            Bytes::from_static(FIELD_TOPIC),
            Bytes::copy_from_slice(topic.as_bytes()),
        ),
        (Bytes::from_static(FIELD_PAYLOAD), payload.clone()),
    ]);
    let appends = clients.iter().map(|client| {
        let fields = fields.clone();
        async move {
            let add = LogWrite::StreamAdd {
                key: queue_key(client)?,
                id: StreamId::Auto,
                payload: fields,
                trim: Some(StreamTrim::max_len(SESSION_QUEUE_MAX)),
                no_create: true,
            };
            router.execute(&ctx(), add.into()).await.map(|_| ())
        }
    });
    let results = futures::future::join_all(appends).await;
    super::counted_by("enqueued", clients.len() as u64);
    results.into_iter().collect()
}

/// Makes client `client`'s queue and its group if missing (the group starts at the queue's
/// beginning: nothing appended before it is passed over).
pub async fn make(router: &Router, client: &str) -> Result<(), FirnError> {
    let create = GroupWrite::Change {
        key: queue_key(client)?,
        group: Bytes::from_static(GROUP),
        change: GroupChange::Create {
            entries_read: None,
            start: GroupStart::Id(LogSeq::ZERO),
            mkstream: true,
            options: GroupOptions::default(),
        },
    };
    match router.execute(&ctx(), create.into()).await {
        Ok(_) | Err(FirnError::BusyGroup) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Acks and deletes the entries `seqs` of client `client`'s queue (both idempotent; an
/// entry left pending by a failure is delivered again on the session's next connection).
pub async fn ack(router: Arc<Router>, client: String, seqs: Vec<LogSeq>) {
    let Ok(key) = queue_key(&client) else { return };
    let acked = GroupWrite::Change {
        key: key.clone(),
        group: Bytes::from_static(GROUP),
        change: GroupChange::Ack { ids: seqs.clone() },
    };
    let deleted = LogWrite::StreamDel { key, ids: seqs };
    let c = ctx();
    let (a, d) = futures::future::join(
        router.execute(&c, acked.into()),
        router.execute(&c, deleted.into()),
    )
    .await;
    if let Err(e) = a.and(d) {
        tracing::debug!(client, "acking a queued MQTT message: {e}");
    }
}

/// Reads a session's queue for its connection, ahead of it by at most one channel's worth.
pub struct QueueReader {
    pub messages: mpsc::Receiver<Result<Queued, FirnError>>,
    task: JoinHandle<()>,
}

impl QueueReader {
    pub fn start(router: Arc<Router>, client: &str) -> Result<QueueReader, FirnError> {
        let key = queue_key(client)?;
        let (tx, messages) = mpsc::channel(READ_COUNT);
        let task = tokio::spawn(async move {
            if let Err(e) = read(&router, key, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(QueueReader { messages, task })
    }
}

impl Drop for QueueReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pending entries from the first on, then new ones, until the receiver is gone.
async fn read(
    router: &Router,
    key: Key,
    tx: &mpsc::Sender<Result<Queued, FirnError>>,
) -> Result<(), FirnError> {
    let mut pending_from = Some(LogSeq::ZERO);
    loop {
        let read = GroupWrite::ReadGroup {
            group: Bytes::from_static(GROUP),
            consumer: Bytes::from_static(CONSUMER),
            streams: vec![(key.clone(), pending_from)],
            count: READ_COUNT,
            noack: false,
            block_ms: pending_from.is_none().then_some(READ_BLOCK_MS),
        };
        let answer = router.execute(&ctx(), read.into()).await?;
        let Response::GroupStreams { streams, .. } = answer.response else {
            return Err(FirnError::Internal(
                "a queue read answered no entries".into(),
            ));
        };
        let entries: Vec<_> = streams.into_iter().flat_map(|(_, e)| e).collect();
        if pending_from.is_some() {
            // The pending ones are read in pages, each after the last one read; an empty page
            // ends them.
            pending_from = entries.last().map(|e| e.seq);
        }
        for entry in entries {
            let message = entry.record.and_then(|r| {
                let fields = decode_fields(&r.payload).ok()?;
                let field = |name: &[u8]| {
                    fields
                        .iter()
                        .find(|(f, _)| f.as_ref() == name)
                        .map(|(_, v)| v.clone())
                };
                Some(Queued {
                    seq: entry.seq,
                    topic: String::from_utf8(field(FIELD_TOPIC)?.to_vec()).ok()?,
                    payload: field(FIELD_PAYLOAD)?,
                })
            });
            let message = match message {
                Some(m) => m,
                // Deleted while pending (acked by an earlier connection whose delete came
                // first), or not a queued message: nothing to deliver.
                None => Queued {
                    seq: entry.seq,
                    topic: String::new(),
                    payload: Bytes::new(),
                },
            };
            if tx.send(Ok(message)).await.is_err() {
                return Ok(());
            }
        }
        if tx.is_closed() {
            return Ok(());
        }
    }
}
