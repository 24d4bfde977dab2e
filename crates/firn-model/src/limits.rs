//! Every bound Firn enforces, in one place, with the reason for each.

/// Keys are 1 B to 8 KiB (DESIGN.md "Data model").
pub const KEY_BYTES_MAX: usize = 8 * 1024;

/// Default largest value carried inline, through the Raft log in one entry: a large entry
/// delays every write behind it, and 1 MiB keeps one entry's fsync and replication short.
/// A larger value is stored beside the log as a blob (see [`crate::blob`]).
pub const VALUE_BYTES_MAX_DEFAULT: usize = 1024 * 1024;

/// The configurable inline limit may not exceed this.
pub const VALUE_BYTES_MAX_CEILING: usize = 16 * 1024 * 1024;

/// Largest value, stored as a blob, over HTTP (streamed both ways, never held whole in
/// memory): 16 GiB, a manifest of 4,096 chunk digests (128 KiB in the log).
pub const BLOB_BYTES_MAX: u64 = 16 << 30;

/// Largest value over RESP, where a command frame and a reply are held whole in memory.
pub const RESP_VALUE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most keys (or key/value pairs) in one MGET, MSET, DEL or EXISTS.
pub const KEYS_PER_REQUEST_MAX: usize = 10_000;

/// Most commands a transaction (`MULTI` … `EXEC`) queues, and most keys it names in all.
pub const TXN_STEPS_MAX: usize = KEYS_PER_REQUEST_MAX;

/// Most bytes of values one transaction writes: it is one log entry.
pub const TXN_BYTES_MAX: usize = 16 << 20;

/// How long a transaction across shards may hold its keys: its parts are prepared with a
/// deadline this far after the coordinator starts it; past it, a participant asks the
/// anchor, which aborts a transaction still undecided.
pub const TXN_DEADLINE_MS: u64 = 5_000;

/// Most times a coordinator tries a transaction across shards whose keys another
/// transaction held, before it answers `TRYAGAIN`.
pub const TXN_TRIES_MAX: u32 = 10;

/// Most bytes of an idempotency key's producer, and of its id.
pub const IDEM_PART_BYTES_MAX: usize = 256;

/// How long a shard remembers an idempotent write's answer: sent again within it, the
/// write applies nothing and answers the same.
pub const IDEM_WINDOW_US: u64 = 10 * 60 * 1_000_000;

/// Most answers a shard remembers for one producer; past it the oldest is forgotten first.
pub const IDEM_PER_PRODUCER_MAX: u64 = 100_000;

/// Most items one history, scan or replay page returns.
pub const PAGE_ITEMS_MAX: usize = 10_000;

/// Default page size of SCAN and history when the caller gives none.
pub const PAGE_ITEMS_DEFAULT: usize = 100;

/// The longest time a key may live (`SET … PX`, `EXPIRE`, a keyspace's ttl): 100 years in
/// milliseconds, far past any real use and far from overflowing a stamp's microseconds.
pub const TTL_MS_MAX: u64 = 100 * 365 * 24 * 3_600 * 1_000;

/// Most a keyspace's allowed lateness may be (`FIRN.WATERMARK … LATENESS`): a year.
pub const LATENESS_US_MAX: u64 = 365 * 24 * 3_600 * 1_000_000;

/// The shortest and the longest TTL of a lease, in seconds (`FIRN.LEASE GRANT`).
pub const LEASE_TTL_S_MIN: u64 = 1;
pub const LEASE_TTL_S_MAX: u64 = 365 * 24 * 3_600;

/// Most registered keyspaces; each put looks up its keyspace by longest prefix.
pub const KEYSPACES_MAX: usize = 1_024;

/// Largest RESP request (a whole command frame): the biggest value plus its key and headroom.
pub const RESP_FRAME_BYTES_MAX: usize = RESP_VALUE_BYTES_MAX + 2 * 1024 * 1024;

/// Most versions a watch replays before going live; a bigger replay must be paged by the
/// client with history.
pub const WATCH_REPLAY_MAX: usize = 100_000;

/// Live events buffered per watcher; a watcher that falls further behind is told it lagged
/// and is disconnected rather than growing memory without bound.
pub const WATCH_BUFFER_EVENTS: usize = 4_096;

/// The limits that an operator can set when starting a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub value_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            value_bytes_max: VALUE_BYTES_MAX_DEFAULT,
        }
    }
}

impl Limits {
    /// The records of one log append: 1 to `LOG_BATCH_RECORDS_MAX` of them, each with 1 to
    /// `LOG_TAGS_MAX` tags and a payload within the value limit.
    pub fn check_records(&self, records: &[crate::NewRecord]) -> Result<(), crate::FirnError> {
        use crate::log::{LOG_BATCH_RECORDS_MAX, LOG_TAGS_MAX};
        if records.is_empty() || records.len() > LOG_BATCH_RECORDS_MAX {
            return Err(crate::FirnError::BadArgument(format!(
                "{} records in one append; an append takes 1 to {LOG_BATCH_RECORDS_MAX}",
                records.len()
            )));
        }
        for r in records {
            if r.tags.is_empty() || r.tags.len() > LOG_TAGS_MAX {
                return Err(crate::FirnError::BadArgument(format!(
                    "a record has {} tags; records carry 1 to {LOG_TAGS_MAX}",
                    r.tags.len()
                )));
            }
            self.check_value(r.payload.len())?;
        }
        Ok(())
    }

    pub fn check_value(&self, len: usize) -> Result<(), crate::FirnError> {
        if len > self.value_bytes_max {
            return Err(crate::FirnError::ValueTooLarge {
                len,
                max: self.value_bytes_max,
            });
        }
        Ok(())
    }
}

/// The fuel a function's run may burn: one unit per Wasm instruction, about a second of an
/// interpreter's work on this class of machine; past it the run stops (`out of fuel`).
pub const FUNCTION_FUEL_MAX: u64 = 500_000_000;

/// The linear memory one function instance may grow to.
pub const FUNCTION_MEMORY_BYTES_MAX: usize = 64 << 20;

/// The largest module `FIRN.FUNCTION LOAD` takes (a Go module is about 2 MiB).
pub const FUNCTION_MODULE_BYTES_MAX: usize = 16 << 20;

/// Host calls (reads, writes, logs) one run may make.
pub const FUNCTION_HOST_CALLS_MAX: usize = 10_000;

/// Writes (puts, deletes, increments, stream entries, publishes) one run may make: they
/// commit together, in one transaction.
pub const FUNCTION_WRITES_MAX: usize = 1_000;

/// Bytes of keys and values one run may write, and of its reply.
pub const FUNCTION_WRITE_BYTES_MAX: usize = 4 << 20;

/// Bytes of operator log one run may write (`log`, stdout, stderr); the rest is dropped.
pub const FUNCTION_LOG_BYTES_MAX: usize = 16 * 1024;

/// Keys one `scan` host call answers.
pub const FUNCTION_SCAN_KEYS_MAX: usize = 1_000;

/// Records one `log_read` host call answers.
pub const FUNCTION_LOG_READ_RECORDS_MAX: usize = 1_000;

/// A function's, trigger's or timer's name: its bytes.
pub const FUNCTION_NAME_BYTES_MAX: usize = 128;
