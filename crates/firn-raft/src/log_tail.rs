//! The newest entries of a group's log, kept in memory beside the log database in their
//! stored form. Each entry is read back soon after its append, on every replica: by the
//! state machine's apply and, on the leader, by the replication stream to each follower.
//! Read from fjall, each read opened a range over the database's memtables and tables: about
//! 4% of a replicated put's CPU over three nodes (`bench/profile set`), of which decoding the
//! entries was a fifth. Served from here, a read only decodes.
//!
//! The stored form, not the entries: a leader's entries hold their values as slices of the
//! client connection's read buffer, and keeping those would keep whole buffers alive. The
//! stored form is exactly the bytes the bound counts.
//!
//! The tail always ends at the log's last entry: the log store appends to it every entry it
//! stores (just before the database gets them, so a reader never waits on the database's
//! journal lock) and cuts it where it truncates or purges the log (see `log_store`). So a
//! read that starts within the tail is answered from it alone, and one that starts before it
//! goes to the database.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use bytes::Bytes;

/// Most entries a group's tail holds: far more than a replication round or an apply batch
/// carries at full load (tens), so that a follower a little behind is still served from it.
const TAIL_ENTRIES_MAX: usize = 4_096;
/// Most bytes of stored entries a group's tail holds (a node holds a tail for each of its
/// replicas).
const TAIL_BYTES_MAX: usize = 1024 * 1024;

#[derive(Default)]
pub(crate) struct LogTail {
    /// Consecutive entries' indexes and stored forms; the last is the log's last.
    entries: VecDeque<(u64, Bytes)>,
    bytes: usize,
}

impl LogTail {
    /// Adds the entry at `index`, just stored as `stored`, as the log's new last entry. An
    /// entry that does not follow the tail's last starts the tail again.
    pub(crate) fn push(&mut self, index: u64, stored: Bytes) {
        if self.last_index().is_some_and(|last| index != last + 1) {
            self.entries.clear();
            self.bytes = 0;
        }
        self.bytes += stored.len();
        self.entries.push_back((index, stored));
        while self.entries.len() > TAIL_ENTRIES_MAX || self.bytes > TAIL_BYTES_MAX {
            self.pop_front();
        }
    }

    /// Drops the entries after index `last` (all of them when `None`), as a truncation of
    /// the log does.
    pub(crate) fn truncate_after(&mut self, last: Option<u64>) {
        while let Some((index, stored)) = self.entries.back() {
            if last.is_some_and(|l| *index <= l) {
                break;
            }
            self.bytes -= stored.len();
            self.entries.pop_back();
        }
    }

    /// Drops the entries up to index `upto`, as a purge of the log does.
    pub(crate) fn purge(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|(i, _)| *i <= upto) {
            self.pop_front();
        }
    }

    /// The stored forms of the log's entries in `range`, with their indexes, when the tail
    /// holds all of them the log does (the range starts within the tail, or just after its
    /// end); `None` when the log must be read.
    pub(crate) fn get(&self, range: &impl RangeBounds<u64>) -> Option<Vec<(u64, Bytes)>> {
        let first = self.entries.front()?.0;
        let last = self.last_index()?;
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x.checked_add(1)?,
            Bound::Unbounded => 0,
        };
        if start < first || start > last + 1 {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take_while(|(i, _)| range.contains(i))
                .cloned()
                .collect(),
        )
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|(i, _)| *i)
    }

    fn pop_front(&mut self) {
        if let Some((_, stored)) = self.entries.pop_front() {
            self.bytes -= stored.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(size: usize) -> Bytes {
        Bytes::from(vec![7; size])
    }

    fn indexes(entries: Option<Vec<(u64, Bytes)>>) -> Option<Vec<u64>> {
        entries.map(|es| es.iter().map(|(i, _)| *i).collect())
    }

    fn tail(from: u64, to: u64) -> LogTail {
        let mut t = LogTail::default();
        for i in from..=to {
            t.push(i, stored(10));
        }
        t
    }

    #[test]
    fn a_read_is_answered_only_when_it_starts_within_the_tail() {
        let t = tail(5, 9);
        assert_eq!(indexes(t.get(&(5..8))), Some(vec![5, 6, 7]));
        assert_eq!(indexes(t.get(&(7..))), Some(vec![7, 8, 9]));
        assert_eq!(indexes(t.get(&(8..=20))), Some(vec![8, 9]));
        // Just past the last entry: the log holds nothing there either.
        assert_eq!(indexes(t.get(&(10..12))), Some(vec![]));
        // Before the tail, or beyond what the log holds: the database answers.
        assert_eq!(indexes(t.get(&(4..7))), None);
        assert_eq!(indexes(t.get(&(..7))), None);
        assert_eq!(indexes(t.get(&(11..12))), None);
        assert_eq!(indexes(LogTail::default().get(&(0..))), None);
    }

    #[test]
    fn truncation_and_purge_cut_the_tail_and_a_gap_starts_it_again() {
        let mut t = tail(5, 9);
        t.truncate_after(Some(7));
        assert_eq!(indexes(t.get(&(5..))), Some(vec![5, 6, 7]));
        t.push(8, stored(10));
        t.purge(6);
        assert_eq!(indexes(t.get(&(7..))), Some(vec![7, 8]));
        assert_eq!(indexes(t.get(&(6..))), None);
        assert_eq!(t.bytes, 20);
        // An append that does not follow the last entry: only it is kept.
        t.push(20, stored(10));
        assert_eq!(indexes(t.get(&(20..))), Some(vec![20]));
        assert_eq!(indexes(t.get(&(8..))), None);
        t.truncate_after(None);
        assert_eq!(indexes(t.get(&(0..))), None);
        assert_eq!(t.bytes, 0);
    }

    #[test]
    fn the_tail_keeps_within_its_bounds() {
        let mut t = tail(1, TAIL_ENTRIES_MAX as u64 + 10);
        assert_eq!(t.entries.len(), TAIL_ENTRIES_MAX);
        assert_eq!(t.get(&(11..12)).map(|e| e.len()), Some(1));
        assert_eq!(t.get(&(10..12)), None);
        t.push(TAIL_ENTRIES_MAX as u64 + 11, stored(TAIL_BYTES_MAX));
        assert_eq!(t.entries.len(), 1);
        assert_eq!(t.bytes, TAIL_BYTES_MAX);
    }
}
