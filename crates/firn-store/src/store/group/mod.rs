//! Consumer groups of a stream, in the stream's shard: what apply does with a group entry
//! (create, deliver, ack, claim, …) and the reads of group state (XPENDING, XINFO). A
//! group's meta, its pending entries list (by id) and its consumers are rows of their own
//! tables under `(stream, group)`. Apply takes its clock from the entry's stamp — delivery
//! times and idle times never come from a node's clock — so every replica holds the same
//! pending list; only a read's idle times use the reader's clock. Apply is in [`apply`]
//! (XCLAIM and XAUTOCLAIM in [`claim`], XREADGROUP `>` in [`deal`]), the reads in [`read`].

use bytes::Bytes;
use firn_model::{ClaimOptions, FirnError, GroupOptions, GroupStart, Key, LogSeq};
use serde::{Deserialize, Serialize};

use super::log::{TagMeta, push_name};
use crate::record::decode;

mod apply;
mod claim;
mod deal;
mod read;

/// What a shard keeps about one group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    pub last_delivered: LogSeq,
    /// Entries the group has read, when known (Redis's `entries-read`).
    pub entries_read: Option<u64>,
    /// Its delivery options (a row from before options existed reads as the default).
    pub options: GroupOptions,
    /// `roundrobin`: the consumer dealt to last (the next is the live one after it by name).
    pub dealt_last: Option<Bytes>,
    /// Whether it ever dealt an entry (so a `first` group, after CONFIGURE, still hands its
    /// consumers what was dealt to them).
    pub has_dealt: bool,
    /// No pending id is below it: walks of the pending list start here, not at id 0, so
    /// they do not step over the deletions that acks of earlier entries left in the tree.
    pub pending_floor: LogSeq,
}

/// A group's row as the release before delivery options wrote it.
#[derive(Deserialize)]
struct GroupMetaV1 {
    last_delivered: LogSeq,
    entries_read: Option<u64>,
}

impl GroupMeta {
    /// Decodes a row of either shape: options were added after the first release.
    pub fn decode(row: &[u8]) -> Result<GroupMeta, FirnError> {
        decode::<GroupMeta>(row).or_else(|e| {
            let old: GroupMetaV1 = decode(row).map_err(|_| e)?;
            Ok(GroupMeta {
                last_delivered: old.last_delivered,
                entries_read: old.entries_read,
                ..GroupMeta::default()
            })
        })
    }
}

/// One entry of a group's pending list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    pub consumer: Bytes,
    /// The last delivery (or, while `waiting`, the deal), in milliseconds of the entry's
    /// stamp.
    pub delivered_ms: u64,
    /// Times handed to a consumer (0: dealt and not yet handed).
    pub deliveries: u64,
    /// `hrw`: the hash of the entry's key (its row in `GroupKeys` counts it).
    pub key_hash: Option<u64>,
    /// Dealt (or given again) to `consumer` and not yet handed over: handed at its next `>`.
    pub waiting: bool,
}

/// A pending entry as the release before delivery options wrote it.
#[derive(Deserialize)]
struct PendingEntryV1 {
    consumer: Bytes,
    delivered_ms: u64,
    deliveries: u64,
}

impl PendingEntry {
    /// Decodes a row of either shape.
    pub fn decode(row: &[u8]) -> Result<PendingEntry, FirnError> {
        decode::<PendingEntry>(row).or_else(|e| {
            let old: PendingEntryV1 = decode(row).map_err(|_| e)?;
            Ok(PendingEntry {
                consumer: old.consumer,
                delivered_ms: old.delivered_ms,
                deliveries: old.deliveries,
                key_hash: None,
                waiting: false,
            })
        })
    }
}

/// What a blocked XREADGROUP watches of a group to know when to ask again: its options, when
/// its earliest delivered entry falls due under ACKWAIT (ms of the stamp clock), and the
/// consumers with entries dealt to them and not yet handed over (how many), among the
/// pending entries a deal looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupWake {
    pub options: GroupOptions,
    pub next_due_ms: Option<u64>,
    pub waiting: Vec<(Bytes, u64)>,
}

/// `hrw`: the consumer that holds entries of a key, and how many pending entries of the key
/// the group has (dealt or delivered, not acked). The row goes when the count reaches 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHolder {
    pub consumer: Bytes,
    pub held: u64,
}

fn holder_key(stream: &[u8], group: &[u8], key_hash: u64) -> Vec<u8> {
    let mut out = group_key(stream, group);
    out.extend_from_slice(&key_hash.to_be_bytes());
    out
}

/// FNV-1a, 64 bits: a hash that is the same in every release and on every replica
/// (`std`'s hashers promise neither), so every replica deals a key alike.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The highest-random-weight score of `consumer` for a key.
fn weight(key_hash: u64, consumer: &[u8]) -> u64 {
    fnv1a(&[&key_hash.to_be_bytes(), consumer])
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

/// The id a group starts after (`$`: the stream's last), and what it has read then as
/// ENTRIESREAD said (`None`: unknown, as Redis keeps it); the rest of `meta` (its options)
/// stays.
fn start_at(
    (start, entries_read): (GroupStart, Option<u64>),
    stream: &TagMeta,
    meta: GroupMeta,
) -> GroupMeta {
    let last_delivered = match start {
        GroupStart::Last => stream.last,
        GroupStart::Id(id) => id,
    };
    // The pending list may now grow below where it was (deliveries after an earlier id).
    GroupMeta {
        last_delivered,
        entries_read,
        pending_floor: meta.pending_floor.min(last_delivered),
        ..meta
    }
}

/// How many entries the stream had added up to and including `id`, where that can be
/// known without a count of every id (Redis's `streamEstimateDistanceFromFirstEverEntry`):
/// at the stream's ends, or before or at its first entry when nothing was deleted after it.
/// `first` is the stream's first entry held.
pub(super) fn entries_through(stream: &TagMeta, first: Option<LogSeq>, id: LogSeq) -> Option<u64> {
    if stream.added == 0 {
        return Some(0);
    }
    if (stream.len == 0 && id <= stream.last) || id == stream.last {
        return Some(stream.added);
    }
    if id > stream.last {
        return None;
    }
    let first = first?;
    if stream.max_deleted == LogSeq::ZERO || stream.max_deleted < first {
        if id < first {
            return Some(stream.added - stream.len);
        }
        if id == first {
            return Some(stream.added - stream.len + 1);
        }
    }
    None
}

/// Whether an entry at or after `id` was deleted (XDEL) from a stream that holds entries
/// (Redis's `streamRangeHasTombstones` from `id` on): a group's count of what it read is
/// then no longer a count of ids.
pub(super) fn deleted_from(stream: &TagMeta, id: LogSeq) -> bool {
    stream.len > 0 && stream.max_deleted != LogSeq::ZERO && id <= stream.max_deleted
}

/// The entries added that a group has not read (Redis's lag), where known.
pub(super) fn lag(stream: &TagMeta, first: Option<LogSeq>, meta: &GroupMeta) -> Option<u64> {
    if stream.added == 0 {
        return Some(0);
    }
    let read = match meta.entries_read {
        Some(read) if !deleted_from(stream, meta.last_delivered) => Some(read),
        _ => entries_through(stream, first, meta.last_delivered),
    };
    read.map(|read| stream.added.saturating_sub(read))
}

/// What a group has read after it is handed the entry `id` (Redis's count on delivery):
/// one more while the count is good, else what can be known at `id`.
pub(super) fn read_through(
    stream: &TagMeta,
    first: Option<LogSeq>,
    read: Option<u64>,
    id: LogSeq,
) -> Option<u64> {
    match read {
        Some(n) if !deleted_from(stream, id) => Some(n + 1),
        _ if stream.added > 0 => entries_through(stream, first, id),
        other => other,
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
        key_hash: entry.key_hash,
        waiting: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::encode;

    #[derive(Serialize)]
    struct OldGroupMeta {
        last_delivered: LogSeq,
        entries_read: Option<u64>,
    }

    #[derive(Serialize)]
    struct OldPendingEntry {
        consumer: Bytes,
        delivered_ms: u64,
        deliveries: u64,
    }

    #[test]
    fn rows_written_before_options_existed_decode_with_the_defaults() {
        let row = encode(&OldGroupMeta {
            last_delivered: LogSeq::new(7, 1),
            entries_read: Some(3),
        });
        let meta = GroupMeta::decode(&row).unwrap();
        assert_eq!(meta.last_delivered, LogSeq::new(7, 1));
        assert_eq!(meta.entries_read, Some(3));
        assert_eq!(meta.options, GroupOptions::default());
        assert_eq!(meta.dealt_last, None);
        let row = encode(&OldPendingEntry {
            consumer: Bytes::from("c"),
            delivered_ms: 5,
            deliveries: 2,
        });
        let entry = PendingEntry::decode(&row).unwrap();
        assert_eq!(
            (entry.deliveries, entry.waiting, entry.key_hash),
            (2, false, None)
        );
        // And a new row reads back as itself.
        let mut new = meta.clone();
        new.options.ack_wait_ms = Some(9);
        new.dealt_last = Some(Bytes::from("x"));
        assert_eq!(GroupMeta::decode(&encode(&new)).unwrap(), new);
        assert!(GroupMeta::decode(&[0xff]).is_err());
    }

    #[test]
    fn the_key_hash_is_fixed_across_releases() {
        // FNV-1a's published test vector: a change of hash would move every key.
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(weight(1, b"c1"), weight(1, b"c2"));
    }
}
