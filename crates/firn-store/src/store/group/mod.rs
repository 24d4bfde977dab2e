//! Consumer groups of a stream, in the stream's shard: what apply does with a group entry
//! (create, deliver, ack, claim, …) and the reads of group state (XPENDING, XINFO). A
//! group's meta, its pending entries list (by id) and its consumers are rows of their own
//! tables under `(stream, group)`. Apply takes its clock from the entry's stamp — delivery
//! times and idle times never come from a node's clock — so every replica holds the same
//! pending list; only a read's idle times use the reader's clock. Apply is in [`apply`],
//! the reads in [`read`].

use bytes::Bytes;
use firn_model::{ClaimOptions, FirnError, GroupStart, Key, LogSeq};
use serde::{Deserialize, Serialize};

use super::log::{TagMeta, push_name};

mod apply;
mod read;

/// What a shard keeps about one group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    pub last_delivered: LogSeq,
    /// Entries the group has read, when known (Redis's `entries-read`).
    pub entries_read: Option<u64>,
}

/// One entry of a group's pending list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    pub consumer: Bytes,
    /// The last delivery, in milliseconds of the delivering entry's stamp.
    pub delivered_ms: u64,
    pub deliveries: u64,
}

/// One consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMeta {
    /// Its last attempt to read or claim.
    pub seen_ms: u64,
    /// Its last successful read or claim.
    pub active_ms: Option<u64>,
}

/// `u16 len · stream · u16 len · group`: a group's rows in each table are contiguous.
fn group_key(stream: &[u8], group: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + stream.len() + group.len() + 16);
    push_name(&mut out, stream);
    push_name(&mut out, group);
    out
}

fn pending_key(stream: &[u8], group: &[u8], seq: LogSeq) -> Vec<u8> {
    let mut out = group_key(stream, group);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

fn consumer_key(stream: &[u8], group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut out = group_key(stream, group);
    out.extend_from_slice(consumer);
    out
}

fn no_group(key: &Key, group: &[u8], suffix: &str) -> FirnError {
    FirnError::NoGroup(format!(
        "No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key.as_bytes()),
        String::from_utf8_lossy(group)
    ))
}

fn no_consumer_group(key: &Key, group: &[u8]) -> FirnError {
    FirnError::NoGroup(format!(
        "No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key.as_bytes())
    ))
}

fn key_required() -> FirnError {
    FirnError::BadArgument(
        "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
            .into(),
    )
}

/// The id a group starts after, and what it has read then, as Redis sets them.
fn start_at(start: GroupStart, stream: &TagMeta) -> GroupMeta {
    match start {
        GroupStart::Last => GroupMeta {
            last_delivered: stream.last,
            entries_read: Some(stream.added),
        },
        GroupStart::Id(LogSeq::ZERO) => GroupMeta {
            last_delivered: LogSeq::ZERO,
            entries_read: Some(0),
        },
        GroupStart::Id(id) => GroupMeta {
            last_delivered: id,
            entries_read: None,
        },
    }
}

fn idle(now_ms: u64, since_ms: u64) -> u64 {
    now_ms.saturating_sub(since_ms)
}

/// A pending entry after `consumer` claims it now, with XCLAIM's options.
fn claimed(
    entry: PendingEntry,
    consumer: &Bytes,
    now: u64,
    options: &ClaimOptions,
) -> PendingEntry {
    let delivered_ms = match (options.time_ms, options.idle_ms) {
        (Some(t), _) => t,
        (None, Some(idle)) => now.saturating_sub(idle),
        (None, None) => now,
    };
    let deliveries = match options.retry_count {
        Some(n) => n,
        // JUSTID leaves the delivery count as it is.
        None if options.just_id => entry.deliveries,
        None => entry.deliveries + 1,
    };
    PendingEntry {
        consumer: consumer.clone(),
        delivered_ms,
        deliveries,
    }
}
