//! The tagged shared log's vocabulary: sequence numbers ([`LogSeq`]), records and what a
//! reader learns about a tag. Log names and tags are [`Key`]s (1 B to 8 KiB), so a stream
//! key is a log name and its one tag at once.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::FirnError;
use crate::hlc::CommitTs;
use crate::key::Key;

/// Most tags on one record (Boki's records carry a handful; 16 keeps a record's index
/// entries, one per tag, few).
pub const LOG_TAGS_MAX: usize = 16;

/// Most records in one batch append.
pub const LOG_BATCH_RECORDS_MAX: usize = 1_000;

/// Most records one log read returns (a range's `limit`, XRANGE/XREAD's COUNT): a page.
pub const LOG_READ_RECORDS_MAX: usize = crate::limits::PAGE_ITEMS_MAX;

/// Longest a read may block waiting for the next record (`BLOCK ms`); `0` waits without end
/// on RESP, as Redis does.
pub const LOG_BLOCK_MS_MAX: u64 = 3_600_000;

/// Most tag-index shards whose shard ids fit in a sequence number's low 16 bits.
pub const LOG_SHARDS_MAX: u32 = 1 << 16;

/// A record's place in its log: Redis's stream id form `<ms>-<n>`, ordered by (ms, n).
///
/// A log record's seq is its commit stamp with the home shard as tie-break:
/// `ms = wall_us / 1000`, `n = (wall_us % 1000) << 48 | logical << 16 | shard` — a bijection,
/// so seqs are unique across shards and ordered as the stamps are. A stream entry's id is
/// Redis's: the commit stamp's millisecond and a counter within it (or the id the client
/// gave), strictly increasing per stream.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LogSeq {
    pub ms: u64,
    pub n: u64,
}

impl LogSeq {
    pub const ZERO: LogSeq = LogSeq { ms: 0, n: 0 };
    pub const MAX: LogSeq = LogSeq {
        ms: u64::MAX,
        n: u64::MAX,
    };

    pub const fn new(ms: u64, n: u64) -> Self {
        LogSeq { ms, n }
    }

    /// The seq of a record committed at `ts` in `shard`'s log.
    pub fn from_stamp(ts: CommitTs, shard: u32) -> Self {
        debug_assert!(shard < LOG_SHARDS_MAX);
        LogSeq {
            ms: ts.wall_us / 1_000,
            n: ((ts.wall_us % 1_000) << 48) | ((ts.logical as u64) << 16) | (shard as u64 & 0xFFFF),
        }
    }

    /// The commit stamp a [`from_stamp`](Self::from_stamp) seq was made of.
    pub fn stamp(self) -> CommitTs {
        CommitTs::new(
            self.ms * 1_000 + ((self.n >> 48) & 0x3FF),
            ((self.n >> 16) & 0xFFFF_FFFF) as u32,
        )
    }

    /// The smallest seq strictly greater than `self` (`None` past the last one).
    pub fn successor(self) -> Option<Self> {
        match self.n.checked_add(1) {
            Some(n) => Some(LogSeq { ms: self.ms, n }),
            None => self.ms.checked_add(1).map(|ms| LogSeq { ms, n: 0 }),
        }
    }

    /// The greatest seq strictly smaller than `self` (`None` below zero).
    pub fn predecessor(self) -> Option<Self> {
        match self.n.checked_sub(1) {
            Some(n) => Some(LogSeq { ms: self.ms, n }),
            None => self.ms.checked_sub(1).map(|ms| LogSeq { ms, n: u64::MAX }),
        }
    }

    /// Big-endian bytes, ordered as seqs are (storage keys).
    pub fn to_be_bytes(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.n.to_be_bytes());
        out
    }

    pub fn from_be_bytes(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        Some(LogSeq {
            ms: u64::from_be_bytes(bytes[..8].try_into().ok()?),
            n: u64::from_be_bytes(bytes[8..].try_into().ok()?),
        })
    }

    /// Parses a seq as Redis parses a stream id in a range: `ms-n`, or `ms` alone meaning
    /// `ms-0` (a start) or `ms-<max>` (an end, with `end`).
    pub fn parse_bound(s: &str, end: bool) -> Result<Self, FirnError> {
        if s.contains('-') {
            return s.parse();
        }
        let ms = parse_u64(s, s)?;
        Ok(LogSeq::new(ms, if end { u64::MAX } else { 0 }))
    }
}

fn parse_u64(part: &str, whole: &str) -> Result<u64, FirnError> {
    part.parse::<u64>().map_err(|_| {
        FirnError::BadArgument(format!(
            "invalid seq '{whole}': a seq is <ms>-<n>, two whole numbers"
        ))
    })
}

impl fmt::Display for LogSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.n)
    }
}

impl FromStr for LogSeq {
    type Err = FirnError;

    /// The exact form `<ms>-<n>` that [`Display`](fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ms, n) = s.split_once('-').ok_or_else(|| {
            FirnError::BadArgument(format!(
                "invalid seq '{s}': a seq is <ms>-<n>, two whole numbers"
            ))
        })?;
        Ok(LogSeq::new(parse_u64(ms, s)?, parse_u64(n, s)?))
    }
}

/// A record to append: its tags (1 to [`LOG_TAGS_MAX`], the first decides where it is
/// stored) and its payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRecord {
    pub tags: Vec<Key>,
    pub payload: Bytes,
}

/// A record as a reader sees it. Once read, always read the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    pub seq: LogSeq,
    pub tags: Vec<Key>,
    pub payload: Bytes,
    /// When it was committed: a read at a time T sees exactly the records stamped ≤ T.
    pub commit_ts: CommitTs,
}

impl LogRecord {
    /// Bytes it takes in memory, roughly (for the local index's bound).
    pub fn footprint(&self) -> usize {
        64 + self.payload.len()
            + self
                .tags
                .iter()
                .map(|t| 32 + t.as_bytes().len())
                .sum::<usize>()
    }
}

/// What one append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub seq: LogSeq,
    pub commit_ts: CommitTs,
}

/// What a reader learns of one tag of a log (XLEN, XINFO STREAM).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagInfo {
    /// Records held.
    pub len: u64,
    pub first: Option<LogRecord>,
    pub last: Option<LogRecord>,
    /// The greatest seq ever given to a record of the tag (also one since deleted).
    pub last_seq: LogSeq,
    /// Records ever appended with the tag.
    pub added: u64,
    /// The greatest seq deleted by XDEL.
    pub max_deleted: LogSeq,
    /// Reads below this seq are trimmed.
    pub first_kept: LogSeq,
    /// Consumer groups of the stream (for a stream, whose log is its one tag; else 0).
    #[serde(default)]
    pub groups: u64,
}

/// One tag of one log, as a listing of every log the store holds shows it
/// (`LogRead::Tags`, `GET /v1/logs`, `FIRN.LOGS`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagListing {
    pub log: Key,
    pub tag: Key,
    /// Records held under the tag, in every shard that holds some.
    pub len: u64,
    /// The greatest seq ever given to a record of the tag (also one since removed).
    pub last_seq: LogSeq,
    /// Reads below this seq are trimmed (`0-0`: never trimmed).
    pub first_kept: LogSeq,
    /// The shards with a row for the tag: those holding its records, and its own shard
    /// (which keeps its directory).
    pub shards: Vec<u32>,
}

impl TagListing {
    /// Whether the tag is a Redis stream's: a stream `K` is the log `K` read through the
    /// tag `K`.
    pub fn is_stream(&self) -> bool {
        self.log == self.tag
    }
}

/// How a stream entry's id is chosen (XADD's id argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamId {
    /// `*`: the commit stamp's millisecond, and a counter within it.
    Auto,
    /// `<ms>-*`: this millisecond, and the next counter within it.
    Ms(u64),
    /// `<ms>-<n>`: exactly this id.
    Exact(LogSeq),
}

impl FromStr for StreamId {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "*" {
            return Ok(StreamId::Auto);
        }
        if let Some(ms) = s.strip_suffix("-*") {
            return Ok(StreamId::Ms(parse_u64(ms, s)?));
        }
        let id = LogSeq::parse_bound(s, false)?;
        if id == LogSeq::ZERO {
            return Err(FirnError::BadArgument(
                "The ID specified in XADD must be greater than 0-0".into(),
            ));
        }
        Ok(StreamId::Exact(id))
    }
}

/// Which entries a stream trim removes (XADD/XTRIM's `MAXLEN` and `MINID`), and at most how
/// many (`LIMIT`, with `~`; `None`: no bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamTrim {
    /// Keep the newest `len` entries.
    MaxLen { len: u64, limit: Option<u64> },
    /// Drop the entries with ids below `id`.
    MinId { id: LogSeq, limit: Option<u64> },
}

impl StreamTrim {
    /// Keep the newest `len` entries, however many go.
    pub fn max_len(len: u64) -> Self {
        StreamTrim::MaxLen { len, limit: None }
    }

    /// Most entries the trim removes.
    pub fn limit(&self) -> u64 {
        match self {
            StreamTrim::MaxLen { limit, .. } | StreamTrim::MinId { limit, .. } => {
                limit.unwrap_or(u64::MAX)
            }
        }
    }
}

/// A stream entry's fields as its record's payload (XADD writes it; XRANGE, XREAD and the
/// HTTP stream routes read it back, so an entry reads the same through either front end):
/// `u32 pairs`, then for each pair `u32 len · field · u32 len · value`, all big-endian.
/// Length-prefixed rather than separated, so fields and values may hold any bytes.
pub fn encode_fields(fields: &[(Bytes, Bytes)]) -> Bytes {
    let body: usize = fields.iter().map(|(f, v)| 8 + f.len() + v.len()).sum();
    let mut out = Vec::with_capacity(4 + body);
    out.extend_from_slice(&len_u32(fields.len()).to_be_bytes());
    for (field, value) in fields {
        for part in [field, value] {
            out.extend_from_slice(&len_u32(part.len()).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    Bytes::from(out)
}

/// The fields [`encode_fields`] wrote. Anything else — a record appended under the
/// stream's key with another payload, a cut-off payload, bytes after the last pair — is
/// an error that says so, never a guess.
pub fn decode_fields(payload: &[u8]) -> Result<Vec<(Bytes, Bytes)>, FirnError> {
    let mut rest = payload;
    let pairs = take_len(&mut rest)?;
    // A pair takes at least 8 bytes: a count beyond that is corrupt, not a reason to
    // reserve memory.
    if pairs > rest.len() / 8 {
        return Err(not_fields("its pair count exceeds its length"));
    }
    let mut fields = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let field = take_part(&mut rest)?;
        let value = take_part(&mut rest)?;
        fields.push((field, value));
    }
    if !rest.is_empty() {
        return Err(not_fields("bytes follow the last pair"));
    }
    Ok(fields)
}

fn len_u32(n: usize) -> u32 {
    // Frames and bodies are bounded far below 4 GiB (limits::RESP_FRAME_BYTES_MAX).
    u32::try_from(n).expect("a stream entry's part is under 4 GiB")
}

fn not_fields(why: &str) -> FirnError {
    FirnError::BadArgument(format!(
        "the record is not a stream entry ({why}): it was not written by XADD"
    ))
}

fn take_len(rest: &mut &[u8]) -> Result<usize, FirnError> {
    let (len, tail) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| not_fields("it ends early"))?;
    *rest = tail;
    Ok(u32::from_be_bytes(*len) as usize)
}

fn take_part(rest: &mut &[u8]) -> Result<Bytes, FirnError> {
    let len = take_len(rest)?;
    if rest.len() < len {
        return Err(not_fields("it ends early"));
    }
    let (part, tail) = rest.split_at(len);
    *rest = tail;
    Ok(Bytes::copy_from_slice(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqs_from_stamps_order_as_the_stamps_and_the_shard_break_ties() {
        let a = LogSeq::from_stamp(CommitTs::new(1_700_000_000_123_456, 7), 3);
        let b = LogSeq::from_stamp(CommitTs::new(1_700_000_000_123_456, 7), 4);
        let c = LogSeq::from_stamp(CommitTs::new(1_700_000_000_123_456, 8), 0);
        let d = LogSeq::from_stamp(CommitTs::new(1_700_000_000_123_457, 0), 0);
        assert!(a < b && b < c && c < d);
        assert_eq!(a.stamp(), CommitTs::new(1_700_000_000_123_456, 7));
        assert_eq!(a.ms, 1_700_000_000_123);
    }

    #[test]
    fn seqs_parse_print_and_bound_like_redis_ids() {
        let s: LogSeq = "1526919030474-55".parse().unwrap();
        assert_eq!(s, LogSeq::new(1_526_919_030_474, 55));
        assert_eq!(s.to_string(), "1526919030474-55");
        assert_eq!(
            LogSeq::parse_bound("5", true).unwrap(),
            LogSeq::new(5, u64::MAX)
        );
        assert_eq!(LogSeq::parse_bound("5", false).unwrap(), LogSeq::new(5, 0));
        assert!("5-x".parse::<LogSeq>().is_err());
        assert!("".parse::<LogSeq>().is_err());
        assert_eq!(
            LogSeq::new(1, u64::MAX).successor(),
            Some(LogSeq::new(2, 0))
        );
        assert_eq!(LogSeq::MAX.successor(), None);
        assert_eq!(
            LogSeq::new(2, 0).predecessor(),
            Some(LogSeq::new(1, u64::MAX))
        );
        assert_eq!(LogSeq::ZERO.predecessor(), None);
        let bytes = s.to_be_bytes();
        assert_eq!(LogSeq::from_be_bytes(&bytes), Some(s));
    }

    #[test]
    fn stream_ids_parse_as_xadd_takes_them() {
        assert_eq!("*".parse::<StreamId>().unwrap(), StreamId::Auto);
        assert_eq!("5-*".parse::<StreamId>().unwrap(), StreamId::Ms(5));
        assert_eq!(
            "5-1".parse::<StreamId>().unwrap(),
            StreamId::Exact(LogSeq::new(5, 1))
        );
        assert_eq!(
            "5".parse::<StreamId>().unwrap(),
            StreamId::Exact(LogSeq::new(5, 0))
        );
        assert!("0-0".parse::<StreamId>().is_err());
        assert!("a-*".parse::<StreamId>().is_err());
    }

    #[test]
    fn stream_fields_round_trip_and_foreign_payloads_are_refused() {
        let fields = vec![
            (Bytes::from_static(b"temp"), Bytes::from_static(b"21.5")),
            (
                Bytes::from_static(b""),
                Bytes::from_static(b"\r\n\0 any bytes"),
            ),
        ];
        let payload = encode_fields(&fields);
        assert_eq!(payload.len(), 4 + (8 + 4 + 4) + (8 + 13));
        assert_eq!(decode_fields(&payload).unwrap(), fields);
        assert_eq!(decode_fields(&encode_fields(&[])).unwrap(), vec![]);
        // Cut short, trailing bytes, an absurd count, a raw payload: each refused.
        assert!(decode_fields(&payload[..payload.len() - 1]).is_err());
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(decode_fields(&longer).is_err());
        assert!(decode_fields(&[0xFF, 0xFF, 0xFF, 0xFF]).is_err());
        let err = decode_fields(b"hello").unwrap_err();
        assert!(err.to_string().contains("not a stream entry"), "{err}");
    }
}
