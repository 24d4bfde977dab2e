//! Puts and reads of large values (see `crate::blob`). A put above the inline limit is
//! uploaded to every holder of the key's shard in chunks, sealed on a majority, and only
//! then is its manifest proposed: a version whose upload did not finish never exists.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use firn_model::blob::BLOB_CHUNK_BYTES;
use firn_model::limits::{BLOB_BYTES_MAX, RESP_VALUE_BYTES_MAX};
use firn_model::{
    Answer, BlobRef, CallContext, FirnError, KvRequest, KvWrite, PutRequest, Response, VersionInfo,
};
use firn_raft::NodeId;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::blob::files::digest;
use crate::blob::{BlobChunk, Blobs};
use crate::exec::{Kernel, resend_while_refused};

/// A body already in memory, as a stream.
fn once(value: Bytes) -> impl Stream<Item = Result<Bytes, FirnError>> + Send + Unpin {
    futures::stream::iter([Ok(value)])
}

/// Chunks queued per holder ahead of its writes.
const QUEUED_CHUNKS: usize = 2;

/// Longest one holder may hold an upload back, over the whole upload (or a tenth of the
/// upload's time, if more), while a majority of the shard's replicas keeps up without it,
/// and longest it may still be writing or sealing once a majority has. Past it the holder is
/// dropped from the upload (it fetches the value once its manifest commits, as a replica
/// that was down does): a frozen or slow node would otherwise pace every large write, or
/// stall it for a chunk call's timeout (`CHUNK_CALL_TIMEOUT`, 60 s).
const HOLD_BACK_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// One holder's share of an upload: its queue, and the task writing from it.
struct Target {
    node: NodeId,
    queue: Option<mpsc::Sender<(u64, Bytes)>>,
    task: JoinHandle<Result<(), FirnError>>,
    /// How long its full queue has held the upload back so far.
    held_back: std::time::Duration,
}

impl Target {
    /// Leaves the upload: no more chunks, and the write under way is abandoned.
    fn drop_out(&mut self) {
        self.queue = None;
        self.task.abort();
    }
}

/// Large values beside the log: their uploads, and their reading into whole answers.
pub struct LargeValues {
    kernel: Arc<Kernel>,
    blobs: Arc<Blobs>,
}

impl LargeValues {
    pub fn new(kernel: Arc<Kernel>, blobs: Arc<Blobs>) -> Self {
        LargeValues { kernel, blobs }
    }

    /// This node's blob files and the reading of blobs.
    pub fn blobs(&self) -> &Arc<Blobs> {
        &self.blobs
    }

    /// A put whose whole value is in memory and above the inline limit (RESP's SET): at
    /// most [`RESP_VALUE_BYTES_MAX`], beside the log.
    pub async fn put_whole(&self, ctx: &CallContext, put: PutRequest) -> Result<Answer, FirnError> {
        if put.value.len() > RESP_VALUE_BYTES_MAX {
            return Err(FirnError::ValueTooLarge {
                len: put.value.len(),
                max: RESP_VALUE_BYTES_MAX,
            });
        }
        let value = put.value.clone();
        self.put_large(ctx, put, once(value)).await
    }

    /// A put whose value arrives as a stream (HTTP): inline when it ends within the inline
    /// limit, else beside the log.
    pub async fn put_streamed(
        &self,
        ctx: &CallContext,
        put: PutRequest,
        body: impl Stream<Item = Result<Bytes, FirnError>> + Send + Unpin,
    ) -> Result<Answer, FirnError> {
        let mut body = body;
        let mut head = BytesMut::new();
        while head.len() <= self.kernel.limits().value_bytes_max {
            match body.next().await {
                Some(chunk) => head.extend_from_slice(&chunk?),
                None => {
                    let put = PutRequest {
                        value: head.freeze(),
                        ..put
                    };
                    // A small value: a write like any other (sent again if refused for
                    // now, see `execute`).
                    return self.kernel.execute(ctx, KvWrite::Put(put).into()).await;
                }
            }
        }
        let rest = once(head.freeze()).chain(body);
        self.put_large(ctx, put, rest).await
    }

    /// Uploads the value, seals it on a majority of the shard's replicas, proposes its
    /// manifest.
    pub(crate) async fn put_large(
        &self,
        ctx: &CallContext,
        put: PutRequest,
        body: impl Stream<Item = Result<Bytes, FirnError>> + Send + Unpin,
    ) -> Result<Answer, FirnError> {
        // Refused before any byte is sent when this node is low; each holder refuses its
        // chunks while its own disk is.
        self.kernel.disk().check()?;
        let layout = self.kernel.routable_layout()?;
        let key = Bytes::copy_from_slice(put.key.as_bytes());
        let shard = layout.shard_of_key(&key);
        let need = layout.shard(shard).replicas.len() / 2 + 1;
        let blobs = self.blobs.clone();
        let id = blobs.new_id();
        let mut targets: Vec<Target> = blobs
            .holders(shard)
            .into_iter()
            .map(|node| start_target(&blobs, node, shard, id, key.clone()))
            .collect();
        let sent = send_chunks(body, &mut targets, need).await;
        // Each holder's last chunks written: a holder still writing once a majority is done
        // gets at most HOLD_BACK_MAX more (it fetches the value later, as a dropped one does).
        let nodes: Vec<NodeId> = targets.iter().map(|t| t.node).collect();
        let aborts: Vec<_> = targets.iter().map(|t| t.task.abort_handle()).collect();
        let finished = majority_then_grace(
            targets.into_iter().map(|t| {
                drop(t.queue);
                async move {
                    t.task.await.unwrap_or_else(|e| {
                        Err(FirnError::Internal(format!(
                            "a blob upload task failed: {e}"
                        )))
                    })
                }
            }),
            need,
            HOLD_BACK_MAX,
        )
        .await;
        let mut took = Vec::new();
        // A holder out of space is why the upload failed, if it did: the client is told so.
        let mut no_space = None;
        for ((node, abort), done) in nodes.into_iter().zip(aborts).zip(finished) {
            match done {
                Some(Ok(())) => took.push(node),
                Some(Err(e)) => {
                    tracing::warn!(node, error = %e, "a replica did not take a blob");
                    if let FirnError::NoSpace(why) = e {
                        no_space = Some(why);
                    }
                }
                None => {
                    abort.abort();
                    tracing::warn!(
                        node,
                        "a replica was still writing a large value when a majority had it; it fetches the value once it is written"
                    );
                    metrics::counter!("firn_blob_holders_dropped_total").increment(1);
                }
            }
        }
        let outcome = match sent {
            _ if took.len() < need && no_space.is_some() => Err(FirnError::NoSpace(format!(
                "only {} of shard {shard}'s replicas took the value; a majority ({need}) must: {}",
                took.len(),
                no_space.unwrap_or_default()
            ))),
            Ok(_) if took.len() < need => Err(FirnError::Unavailable(format!(
                "only {} of shard {shard}'s replicas took the value; a majority ({need}) must",
                took.len()
            ))),
            Ok((size, digests)) => Ok(BlobRef {
                shard,
                id,
                size,
                chunk_bytes: BLOB_CHUNK_BYTES as u32,
                digests,
            }),
            Err(e) => Err(e),
        };
        let blob = match outcome {
            Ok(blob) => blob,
            Err(e) => {
                discard(&blobs, &layout.shard(shard).replicas, shard, id);
                metrics::counter!("firn_blob_uploads_total", "outcome" => "failed").increment(1);
                return Err(e);
            }
        };
        // A holder slow to seal once a majority has is left to finish (or to fetch).
        let sealed = majority_then_grace(
            took.iter().map(|node| blobs.seal_at(*node, blob.clone())),
            need,
            HOLD_BACK_MAX,
        )
        .await;
        let sealed = sealed.iter().filter(|r| matches!(r, Some(Ok(())))).count();
        if sealed < need {
            discard(&blobs, &took, shard, id);
            metrics::counter!("firn_blob_uploads_total", "outcome" => "failed").increment(1);
            return Err(FirnError::Unavailable(format!(
                "only {sealed} of shard {shard}'s replicas sealed the value; a majority ({need}) must"
            )));
        }
        let size = blob.size;
        let put = PutRequest {
            value: Bytes::new(),
            ..put
        };
        // A manifest the shard's leader refused for now (it stepped down before appending
        // it: nothing applied) is sent again, as any write is (`again_while_refused`), while
        // the key is still in the shard the value went to: else the whole put is the
        // client's to send again (`check_manifest` refuses it with `TRYAGAIN`).
        let manifest = KvRequest::Write(KvWrite::PutBlob { put, blob });
        let since = Instant::now();
        let first = self.kernel.submit_kv(ctx, manifest.clone()).await.await;
        let answer = resend_while_refused(
            since,
            first,
            || {
                self.kernel
                    .routable_layout()
                    .is_ok_and(|l| l.shard_of_key(&key) == shard)
            },
            || async { self.kernel.submit_kv(ctx, manifest.clone()).await.await },
        )
        .await;
        match &answer {
            Ok(_) => {
                metrics::counter!("firn_blob_uploads_total", "outcome" => "written").increment(1);
                metrics::counter!("firn_blob_uploaded_bytes_total").increment(size);
            }
            // Certainly not written: the blob is nobody's. (After any other error the
            // manifest may yet commit; the sweeper judges it after the grace period.)
            Err(FirnError::Conflict { .. }) => discard(&blobs, &took, shard, id),
            Err(_) => {}
        }
        answer
    }

    /// Reads into the answer the large values it names, for a front end that answers whole
    /// values (RESP): up to [`RESP_VALUE_BYTES_MAX`] in all.
    pub async fn with_blob_values(
        &self,
        result: Result<Answer, FirnError>,
    ) -> Result<Answer, FirnError> {
        let mut answer = result?;
        let infos = unread_blobs(&mut answer.response);
        if infos.is_empty() {
            return Ok(answer);
        }
        let total: u64 = infos.iter().map(|i| i.size()).sum();
        if total > RESP_VALUE_BYTES_MAX as u64 {
            return Err(FirnError::Refused(format!(
                "the answer holds {total} bytes of large values; RESP answers at most {RESP_VALUE_BYTES_MAX} (read large values with HTTP GET /v1/kv/<key>)"
            )));
        }
        for info in infos {
            let blob = info.blob.clone().expect("chosen for its blob");
            info.value = Some(self.blobs.load(blob).await?);
        }
        Ok(answer)
    }
}

/// The versions in a response whose value is in a blob not read yet.
fn unread_blobs(response: &mut Response) -> Vec<&mut VersionInfo> {
    let all: Vec<&mut VersionInfo> = match response {
        Response::Value(Some(info)) => vec![info],
        Response::Values(infos) => infos.iter_mut().flatten().collect(),
        Response::Scan { keys, .. } => keys.iter_mut().map(|(_, i)| i).collect(),
        Response::Written(ws) => ws.iter_mut().filter_map(|w| w.previous.as_mut()).collect(),
        Response::Snapshot { read, .. } => return unread_blobs(read),
        _ => Vec::new(),
    };
    all.into_iter()
        .filter(|i| i.blob.is_some() && i.value.is_none())
        .collect()
}

fn start_target(blobs: &Arc<Blobs>, node: NodeId, shard: u32, id: u128, key: Bytes) -> Target {
    let (queue, mut chunks) = mpsc::channel::<(u64, Bytes)>(QUEUED_CHUNKS);
    let blobs = blobs.clone();
    let task = tokio::spawn(async move {
        while let Some((offset, data)) = chunks.recv().await {
            let key = if offset == 0 {
                key.clone()
            } else {
                Bytes::new()
            };
            blobs
                .write_at(
                    node,
                    BlobChunk {
                        shard,
                        id,
                        key,
                        offset,
                        data,
                    },
                )
                .await?;
        }
        Ok(())
    });
    Target {
        node,
        queue: Some(queue),
        task,
        held_back: std::time::Duration::ZERO,
    }
}

/// Cuts the body into chunks and queues each to every holder still taking them; answers
/// the size and the chunks' digests. Fails when the body does, grows past the limit, or
/// fewer than `need` holders are left.
async fn send_chunks(
    mut body: impl Stream<Item = Result<Bytes, FirnError>> + Send + Unpin,
    targets: &mut [Target],
    need: usize,
) -> Result<(u64, Vec<[u8; 32]>), FirnError> {
    let started = std::time::Instant::now();
    let mut buf = BytesMut::new();
    let mut size = 0u64;
    let mut digests = Vec::new();
    let mut ended = false;
    while !ended {
        match body.next().await {
            Some(data) => buf.extend_from_slice(&data?),
            None => ended = true,
        }
        while buf.len() >= BLOB_CHUNK_BYTES || (ended && !buf.is_empty()) {
            let n = buf.len().min(BLOB_CHUNK_BYTES);
            let chunk = buf.split_to(n).freeze();
            let offset = size;
            size += n as u64;
            if size > BLOB_BYTES_MAX {
                return Err(FirnError::ValueTooLarge {
                    len: size as usize,
                    max: BLOB_BYTES_MAX as usize,
                });
            }
            let for_digest = chunk.clone();
            digests.push(
                tokio::task::spawn_blocking(move || digest(&for_digest))
                    .await
                    .map_err(|e| FirnError::Internal(e.to_string()))?,
            );
            queue_chunk(targets, offset, &chunk, need, started.elapsed()).await;
            let live = targets.iter().filter(|t| t.queue.is_some()).count();
            if live < need {
                return Err(FirnError::Unavailable(format!(
                    "only {live} replicas are taking the value; a majority ({need}) must"
                )));
            }
        }
    }
    metrics::counter!("firn_blob_sent_chunks_total").increment(digests.len() as u64);
    Ok((size, digests))
}

/// Queues a chunk to every holder still taking the upload. Holders whose queue is full are
/// waited for together; once the others and those that took it are a majority, the rest get
/// at most what is left of their allowance ([`HOLD_BACK_MAX`], or a tenth of the upload so
/// far if more) and are dropped when it runs out. Only a wait no majority needed counts
/// against a holder's allowance.
async fn queue_chunk(
    targets: &mut [Target],
    offset: u64,
    chunk: &Bytes,
    need: usize,
    elapsed: std::time::Duration,
) {
    let mut behind = Vec::new();
    for (i, t) in targets.iter_mut().enumerate() {
        let Some(q) = &t.queue else { continue };
        match q.try_send((offset, chunk.clone())) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(item)) => behind.push((i, q.clone(), item)),
            Err(mpsc::error::TrySendError::Closed(_)) => t.queue = None,
        }
    }
    if behind.is_empty() {
        return;
    }
    let live = targets.iter().filter(|t| t.queue.is_some()).count();
    let need_of_behind = need.saturating_sub(live - behind.len());
    let allowed = HOLD_BACK_MAX.max(elapsed / 10);
    let grace = behind
        .iter()
        .map(|(i, _, _)| allowed.saturating_sub(targets[*i].held_back))
        .min()
        .unwrap_or_default();
    let indexes: Vec<usize> = behind.iter().map(|(i, _, _)| *i).collect();
    let started = std::time::Instant::now();
    let sent = majority_then_grace(
        behind.into_iter().map(|(_, q, item)| async move {
            q.send(item)
                .await
                .map_err(|_| FirnError::Unavailable("the holder's upload ended".into()))
        }),
        need_of_behind,
        grace,
    )
    .await;
    let waited = started.elapsed();
    for (i, sent) in indexes.into_iter().zip(sent) {
        let t = &mut targets[i];
        if need_of_behind == 0 {
            t.held_back += waited;
        }
        match sent {
            Some(Ok(())) => {}
            Some(Err(_)) => t.queue = None,
            None => {
                tracing::warn!(node = t.node, held_back = ?t.held_back, "a replica fell behind a large value's upload; it fetches the value once it is written");
                metrics::counter!("firn_blob_holders_dropped_total").increment(1);
                t.drop_out();
            }
        }
    }
}

/// Runs `calls` together and answers each one's outcome, in order: once `need` of them have
/// succeeded, the others get at most `grace` more, and those still running then answer
/// `None` (they are dropped).
async fn majority_then_grace<T, F>(
    calls: impl IntoIterator<Item = F>,
    need: usize,
    grace: std::time::Duration,
) -> Vec<Option<Result<T, FirnError>>>
where
    F: std::future::Future<Output = Result<T, FirnError>>,
{
    let mut running: futures::stream::FuturesUnordered<_> = calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| async move { (i, call.await) })
        .collect();
    let mut out: Vec<Option<Result<T, FirnError>>> = (0..running.len()).map(|_| None).collect();
    let mut succeeded = 0;
    let mut deadline = (need == 0).then(|| tokio::time::Instant::now() + grace);
    loop {
        let next = match deadline {
            None => running.next().await,
            Some(at) => match tokio::time::timeout_at(at, running.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some((i, outcome)) = next else { break };
        succeeded += outcome.is_ok() as usize;
        out[i] = Some(outcome);
        if succeeded >= need && deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + grace);
        }
    }
    out
}

/// Drops an upload on `nodes`, in the background.
fn discard(blobs: &Arc<Blobs>, nodes: &[NodeId], shard: u32, id: u128) {
    let (blobs, nodes) = (blobs.clone(), nodes.to_vec());
    tokio::spawn(async move {
        for node in nodes {
            blobs.discard_at(node, shard, id).await;
        }
    });
}
