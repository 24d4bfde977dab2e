//! The local index's rules, one by one, and against a model log (proptest): every hit must
//! be the answer the tier gives at that moment.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

const LOG: &str = "log";

fn key(s: &str) -> Key {
    Key::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

fn seq(n: u64) -> LogSeq {
    LogSeq::new(0, n)
}

fn rec(n: u64, tags: &[&str], payload: &str) -> LogRecord {
    LogRecord {
        seq: seq(n),
        tags: tags.iter().map(|t| key(t)).collect(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        commit_ts: CommitTs::new(n, 0),
    }
}

fn next(tag: &str, from: u64) -> LogQuery {
    LogQuery::next(key(LOG), key(tag), seq(from))
}

fn prev(tag: &str, to: u64) -> LogQuery {
    LogQuery::prev(key(LOG), key(tag), seq(to))
}

fn range(tag: &str, from: u64, to: u64, limit: usize) -> LogQuery {
    LogQuery::range(key(LOG), key(tag), seq(from), seq(to), limit)
}

fn one_home(last: u64) -> Finality {
    Finality::OneHome {
        last_seq: seq(last),
    }
}

/// Looks `q` up; on a miss, learns `records` as the tier's answer. Returns the lookup.
fn ask(index: &LogIndex, q: &LogQuery, records: &[LogRecord], finality: Finality) -> Lookup {
    let lookup = index.lookup(q);
    if let Lookup::Miss(ticket) = lookup {
        let answer = TierAnswer {
            records,
            first_kept: LogSeq::ZERO,
            finality,
        };
        index.learn(ticket, q, answer);
    }
    lookup
}

fn hit(index: &LogIndex, q: &LogQuery) -> Option<Vec<LogRecord>> {
    match index.lookup(q) {
        Lookup::Hit(r) => Some(r),
        _ => None,
    }
}

/// The bytes the index counts, recomputed from what it holds; and the use order names
/// exactly the cached tags.
fn check(index: &LogIndex) {
    let inner = index.lock();
    let mut total = 0;
    for (k, c) in &inner.tags {
        let own = TAG_OVERHEAD_BYTES
            + k.0.as_bytes().len()
            + k.1.as_bytes().len()
            + c.records.values().map(record_bytes).sum::<usize>();
        assert_eq!(c.bytes, own, "a tag's bytes drifted");
        assert!(c.first_kept <= c.from && c.from <= c.through);
        assert!(c.records.keys().all(|s| c.from <= *s && *s <= c.through));
        assert_eq!(inner.lru.get(&c.used), Some(k));
        total += own;
    }
    assert_eq!(inner.lru.len(), inner.tags.len());
    assert_eq!(inner.bytes, total);
    assert!(
        total <= index.bytes_max,
        "{total} bytes over {}",
        index.bytes_max
    );
}

#[test]
fn a_read_next_answer_is_served_again_for_every_start_it_covers() {
    let index = LogIndex::new(1 << 20);
    let r = rec(10, &["t"], "ten");
    assert!(matches!(
        ask(
            &index,
            &next("t", 4),
            std::slice::from_ref(&r),
            one_home(12)
        ),
        Lookup::Miss(_)
    ));
    for s in [4, 5, 10] {
        assert_eq!(
            hit(&index, &next("t", s)),
            Some(vec![r.clone()]),
            "next({s})"
        );
    }
    // Below the known range, and past its last record (seq 11..=12 is known empty, but
    // what comes after 12 is not).
    assert_eq!(hit(&index, &next("t", 3)), None);
    assert_eq!(hit(&index, &next("t", 11)), None);
    assert_eq!(index.stats().hits, 3);
    assert_eq!(index.stats().misses, 3);
    check(&index);
}

#[test]
fn a_short_range_answer_teaches_its_span_only_up_to_the_final_seq() {
    let index = LogIndex::new(1 << 20);
    let records = [rec(2, &["t"], "a"), rec(5, &["t", "u"], "b")];
    // Asked up to 100, answered fewer than the limit; the tag's last seq is 7.
    ask(&index, &range("t", 1, 100, 10), &records, one_home(7));
    assert_eq!(
        hit(&index, &range("t", 1, 7, 10)),
        Some(records.to_vec()),
        "every record up to the final seq is known"
    );
    assert_eq!(
        hit(&index, &range("t", 3, 6, 10)),
        Some(records[1..].to_vec())
    );
    assert_eq!(hit(&index, &range("t", 6, 7, 10)), Some(vec![]));
    assert_eq!(
        hit(&index, &range("t", 1, 8, 10)),
        None,
        "past the final seq a record may still come"
    );
    assert_eq!(
        hit(&index, &range("t", 1, 100, 1)),
        Some(records[..1].to_vec()),
        "the first `limit` records are inside"
    );
    assert_eq!(
        hit(&index, &range("t", 0, 7, 10)),
        None,
        "below the known range"
    );
}

#[test]
fn prev_hits_only_with_a_record_inside_the_range_and_tail_never() {
    let index = LogIndex::new(1 << 20);
    let records = [rec(9, &["t"], "b"), rec(6, &["t"], "a")];
    // A reverse read of 2 from 9 down: full, so [6, 9] is known.
    let mut q = range("t", 0, 9, 2);
    q.reverse = true;
    ask(&index, &q, &records, one_home(9));
    assert_eq!(hit(&index, &prev("t", 9)), Some(records[..1].to_vec()));
    assert_eq!(hit(&index, &prev("t", 8)), Some(records[1..].to_vec()));
    assert_eq!(hit(&index, &prev("t", 6)), Some(records[1..].to_vec()));
    assert_eq!(hit(&index, &prev("t", 10)), None, "above the known range");
    assert_eq!(hit(&index, &prev("t", 5)), None, "below it");
    let tail = LogQuery::tail(key(LOG), key("t"));
    assert_eq!(hit(&index, &tail), None);
    // Learning from a tail read (reverse, to MAX) is fine: it teaches up to the last seq.
    ask(&index, &tail, &records[..1], one_home(9));
    assert_eq!(hit(&index, &tail), None, "the tail moves");
    assert_eq!(hit(&index, &prev("t", 9)), Some(records[..1].to_vec()));
}

#[test]
fn reads_at_a_time_local_reads_streams_and_stream_tags_bypass_the_index() {
    let index = LogIndex::new(1 << 20);
    let r = rec(3, &["t"], "x");
    ask(&index, &next("t", 1), std::slice::from_ref(&r), one_home(3));
    assert!(hit(&index, &next("t", 1)).is_some());
    let at = next("t", 1).at(Some(CommitTs::new(5, 0)));
    let local = next("t", 1).consistency(ReadConsistency::Local);
    let stream = LogQuery::stream(key("t"), seq(1), LogSeq::MAX, 1, false);
    let named_as_log = LogQuery::next(key("t"), key("t"), seq(1));
    for q in [&at, &local, &stream, &named_as_log] {
        assert_eq!(index.lookup(q), Lookup::Bypass, "{q:?}");
    }
    // Lease reads are served, but teach nothing.
    let lease = |s| next("t", s).consistency(ReadConsistency::Lease);
    assert!(hit(&index, &lease(1)).is_some());
    let other = rec(8, &["t"], "y");
    ask(&index, &lease(4), std::slice::from_ref(&other), one_home(8));
    assert_eq!(hit(&index, &next("t", 4)), None);
    // An index of 0 bytes is off.
    let off = LogIndex::new(0);
    assert_eq!(off.lookup(&next("t", 1)), Lookup::Bypass);
}

#[test]
fn an_answer_outside_its_query_or_past_the_final_seq_teaches_nothing() {
    let index = LogIndex::new(1 << 20);
    // A record above the tag's last seq: the tier's answer contradicts the bound.
    ask(&index, &next("t", 1), &[rec(9, &["t"], "x")], one_home(5));
    // A record of another tag; a record below the asked start; two out of order.
    ask(&index, &next("u", 1), &[rec(3, &["x"], "x")], one_home(5));
    ask(&index, &next("v", 4), &[rec(3, &["v"], "x")], one_home(5));
    let unordered = [rec(4, &["w"], "b"), rec(3, &["w"], "a")];
    ask(&index, &range("w", 1, 9, 5), &unordered, one_home(5));
    assert_eq!(index.stats().tags, 0);
}

#[test]
fn a_closed_time_answer_teaches_up_to_the_greatest_seq_of_that_time() {
    let index = LogIndex::new(1 << 20);
    let t = CommitTs::new(5_000, 3);
    let r = LogRecord {
        seq: LogSeq::from_stamp(CommitTs::new(4_000, 0), 2),
        tags: vec![key("t")],
        payload: Bytes::from_static(b"p"),
        commit_ts: CommitTs::new(4_000, 0),
    };
    let q = LogQuery::range(key(LOG), key("t"), LogSeq::ZERO, LogSeq::MAX, 10);
    ask(&index, &q, std::slice::from_ref(&r), Finality::ClosedAt(t));
    let bound = LogSeq::from_stamp(t, LOG_SHARDS_MAX - 1);
    let upto = |to| LogQuery::range(key(LOG), key("t"), LogSeq::ZERO, to, 10);
    assert_eq!(hit(&index, &upto(bound)), Some(vec![r.clone()]));
    assert_eq!(hit(&index, &upto(bound.successor().unwrap())), None);
}

#[test]
fn adjacent_answers_join_into_one_range_and_a_distant_one_replaces_it() {
    let index = LogIndex::new(1 << 20);
    let (a, b) = (rec(3, &["t"], "a"), rec(6, &["t"], "b"));
    ask(&index, &next("t", 1), std::slice::from_ref(&a), one_home(9));
    ask(&index, &next("t", 4), std::slice::from_ref(&b), one_home(9));
    assert_eq!(
        hit(&index, &range("t", 1, 6, 5)),
        Some(vec![a.clone(), b.clone()])
    );
    let far = rec(50, &["t"], "far");
    ask(
        &index,
        &next("t", 40),
        std::slice::from_ref(&far),
        one_home(50),
    );
    assert_eq!(hit(&index, &next("t", 1)), None);
    assert_eq!(hit(&index, &next("t", 41)), Some(vec![far]));
    check(&index);
}

#[test]
fn eviction_keeps_bytes_within_the_bound_dropping_the_least_recently_used_tag() {
    let payload = "p".repeat(100);
    let cost = |tag: &str| {
        TAG_OVERHEAD_BYTES + LOG.len() + tag.len() + record_bytes(&rec(1, &[tag], &payload))
    };
    // Room for two tags of one record each, not three.
    let index = LogIndex::new(2 * cost("a") + 10);
    for (i, tag) in ["a", "b"].into_iter().enumerate() {
        let r = rec(i as u64 + 1, &[tag], &payload);
        ask(&index, &next(tag, 0), &[r], one_home(i as u64 + 1));
    }
    assert_eq!(index.stats().tags, 2);
    // Use a: b is now the least recently used.
    assert!(hit(&index, &next("a", 0)).is_some());
    ask(
        &index,
        &next("c", 0),
        &[rec(3, &["c"], &payload)],
        one_home(3),
    );
    check(&index);
    assert!(hit(&index, &next("a", 0)).is_some(), "a was used last");
    assert!(hit(&index, &next("b", 0)).is_none(), "b was evicted");
    assert!(hit(&index, &next("c", 0)).is_some());
    assert_eq!(index.stats().evictions, 1);
}

#[test]
fn a_tag_larger_than_the_bound_keeps_its_newest_records() {
    let payload = "p".repeat(100);
    let one = record_bytes(&rec(1, &["t"], &payload));
    let index = LogIndex::new(TAG_OVERHEAD_BYTES + LOG.len() + 1 + 3 * one);
    let records: Vec<LogRecord> = (1..=10).map(|n| rec(n, &["t"], &payload)).collect();
    ask(&index, &range("t", 1, 10, 10), &records, one_home(10));
    check(&index);
    assert_eq!(
        hit(&index, &range("t", 8, 10, 10)),
        Some(records[7..].to_vec())
    );
    assert_eq!(hit(&index, &range("t", 7, 10, 10)), None, "the oldest went");
    assert_eq!(hit(&index, &next("t", 8)), Some(records[7..8].to_vec()));
}

#[test]
fn a_trim_forgets_cached_records_below_it_at_once() {
    let index = LogIndex::new(1 << 20);
    let records: Vec<LogRecord> = (1..=5).map(|n| rec(n, &["t", "u"], "x")).collect();
    ask(&index, &range("t", 1, 5, 10), &records, one_home(5));
    ask(&index, &range("u", 1, 5, 10), &records, one_home(5));
    index.forget(&Forget::Trim {
        log: key(LOG),
        tag: Some(key("t")),
        before: seq(3),
    });
    assert_eq!(hit(&index, &next("t", 2)), None, "below the trim point");
    assert_eq!(hit(&index, &next("t", 3)), Some(records[2..3].to_vec()));
    assert_eq!(
        hit(&index, &next("u", 1)),
        Some(records[..1].to_vec()),
        "u keeps its copy"
    );
    check(&index);
    // A trim of the whole log reaches every tag of it, and only of it.
    ask(&index, &range("t", 1, 5, 10), &records, one_home(5));
    let other = LogQuery::range(key("other"), key("t"), seq(1), seq(5), 10);
    if let Lookup::Miss(ticket) = index.lookup(&other) {
        let answer = TierAnswer {
            records: &records,
            first_kept: LogSeq::ZERO,
            finality: one_home(5),
        };
        index.learn(ticket, &other, answer);
    }
    index.forget(&Forget::Trim {
        log: key(LOG),
        tag: None,
        before: seq(5),
    });
    assert_eq!(hit(&index, &next("u", 4)), None);
    assert_eq!(hit(&index, &next("t", 5)), Some(records[4..].to_vec()));
    assert_eq!(
        hit(&index, &other),
        Some(records.clone()),
        "another log is untouched"
    );
    // A trim past everything cached leaves nothing of the tag.
    index.forget(&Forget::Trim {
        log: key(LOG),
        tag: Some(key("t")),
        before: seq(9),
    });
    assert_eq!(hit(&index, &next("t", 9)), None);
    check(&index);
    index.forget(&Forget::Everything);
    assert_eq!(index.stats().tags, 0);
    assert_eq!(index.stats().bytes, 0);
}

#[test]
fn a_tier_answer_brings_the_trim_point_and_one_read_before_a_forget_is_not_learnt() {
    let index = LogIndex::new(1 << 20);
    let records: Vec<LogRecord> = (1..=5).map(|n| rec(n, &["t"], "x")).collect();
    ask(&index, &range("t", 1, 5, 10), &records, one_home(5));
    // Another answer says the tag is trimmed below 4 (a trim this node did not hear of).
    let Lookup::Miss(ticket) = index.lookup(&next("t", 6)) else {
        panic!("6 is past the known range")
    };
    let seven = rec(7, &["t"], "x");
    let answer = TierAnswer {
        records: std::slice::from_ref(&seven),
        first_kept: seq(4),
        finality: one_home(7),
    };
    index.learn(ticket, &next("t", 6), answer);
    assert_eq!(hit(&index, &next("t", 3)), None);
    assert_eq!(hit(&index, &range("t", 4, 7, 10)).map(|r| r.len()), Some(3));
    check(&index);

    // A read that misses, then a trim lands, then its (older) answer comes back.
    let q = next("t", 8);
    let Lookup::Miss(ticket) = index.lookup(&q) else {
        panic!("8 is past the known range")
    };
    index.forget(&Forget::Trim {
        log: key(LOG),
        tag: Some(key("t")),
        before: seq(9),
    });
    let stale = [rec(8, &["t"], "x")];
    let answer = TierAnswer {
        records: &stale,
        first_kept: seq(4),
        finality: one_home(8),
    };
    index.learn(ticket, &q, answer);
    assert_eq!(hit(&index, &q), None);
}

#[test]
fn an_answer_that_contradicts_the_cached_records_drops_the_tag() {
    let index = LogIndex::new(1 << 20);
    let records: Vec<LogRecord> = (1..=3).map(|n| rec(n, &["t"], "x")).collect();
    ask(&index, &range("t", 1, 3, 10), &records, one_home(3));
    // After a FLUSHALL this node did not hear of, the tier holds none of them any more.
    ask(&index, &range("t", 2, 5, 10), &[], one_home(5));
    assert_eq!(index.stats().tags, 0);
    assert_eq!(hit(&index, &next("t", 1)), None);
    check(&index);
}

/// One step of the model run.
#[derive(Clone, Debug)]
enum Step {
    /// A record with the tags of this mask (bit i: tag i), at the next stamp, in a shard.
    Append {
        tags: u8,
        payload: usize,
        shard: u32,
    },
    /// A trim of one tag (or the whole log) before a seq picked among the interesting ones.
    Trim {
        tag: Option<usize>,
        pick: usize,
    },
    /// A read; with `trim_first`, a trim lands between the miss and its learning.
    Read {
        tag: usize,
        shape: u8,
        from: usize,
        to: usize,
        limit: usize,
        lease: bool,
        closed: bool,
        trim_first: Option<usize>,
    },
    FlushAll,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u8..8, 0usize..120, 0u32..3)
            .prop_map(|(tags, payload, shard)| Step::Append { tags, payload, shard }),
        1 => (proptest::option::of(0usize..3), any::<usize>())
            .prop_map(|(tag, pick)| Step::Trim { tag, pick }),
        8 => (0usize..3, 0u8..5, any::<usize>(), any::<usize>(), 1usize..5, any::<bool>(),
              any::<bool>(), proptest::option::weighted(0.1, any::<usize>()))
            .prop_map(|(tag, shape, from, to, limit, lease, closed, trim_first)| Step::Read {
                tag, shape, from, to, limit, lease: lease && shape == 0, closed, trim_first,
            }),
        1 => Just(Step::FlushAll),
    ]
}

const TAGS: [&str; 3] = ["a", "b", "c"];

/// The tier as a plain model: each tag's records, trim point and greatest seq given.
#[derive(Default)]
struct Model {
    tags: BTreeMap<usize, BTreeMap<LogSeq, LogRecord>>,
    first_kept: BTreeMap<usize, LogSeq>,
    last_seq: BTreeMap<usize, LogSeq>,
    /// The newest stamp given or closed: the next record is stamped above it.
    clock: u64,
}

impl Model {
    fn append(&mut self, tags: u8, payload: usize, shard: u32) {
        self.clock += 1 + (payload as u64 % 3);
        let ts = CommitTs::new(self.clock, 0);
        let tagged: Vec<usize> = (0..3).filter(|i| tags & (1 << i) != 0).collect();
        let r = LogRecord {
            seq: LogSeq::from_stamp(ts, shard),
            tags: tagged.iter().map(|i| key(TAGS[*i])).collect(),
            payload: Bytes::from(vec![b'x'; payload]),
            commit_ts: ts,
        };
        for i in tagged {
            self.tags.entry(i).or_default().insert(r.seq, r.clone());
            self.last_seq.insert(i, r.seq);
        }
    }

    /// Seqs worth asking about: every record's, its neighbours, the trim points, the ends.
    fn points(&self) -> Vec<LogSeq> {
        let mut out = vec![LogSeq::ZERO, LogSeq::MAX];
        for s in self.tags.values().flat_map(|t| t.keys()) {
            out.extend([*s, s.successor().unwrap(), s.predecessor().unwrap()]);
        }
        out.extend(self.first_kept.values().copied());
        out.sort();
        out.dedup();
        out
    }

    fn trim(&mut self, tag: Option<usize>, pick: usize) -> Forget {
        let points = self.points();
        let tail = |m: &Model, i: usize| m.last_seq.get(&i).copied().unwrap_or_default();
        // A trim never goes past the tail (the router refuses that).
        let limit = match tag {
            Some(i) => tail(self, i).successor().unwrap(),
            None => (0..3)
                .map(|i| tail(self, i))
                .max()
                .unwrap()
                .successor()
                .unwrap(),
        };
        let candidates: Vec<LogSeq> = points.into_iter().filter(|p| *p <= limit).collect();
        let before = candidates[pick % candidates.len()];
        let tags: Vec<usize> = match tag {
            Some(i) => vec![i],
            None => (0..3).collect(),
        };
        for i in tags {
            if let Some(records) = self.tags.get_mut(&i) {
                *records = records.split_off(&before);
            }
            let fk = self.first_kept.entry(i).or_default();
            *fk = (*fk).max(before);
        }
        Forget::Trim {
            log: key(LOG),
            tag: tag.map(|i| key(TAGS[i])),
            before,
        }
    }

    /// The tier's answer, as `Log::query` gives it: `None` for TRIMMED or an unknown tag.
    fn answer(&self, tag: usize, q: &LogQuery) -> Option<Vec<LogRecord>> {
        let fk = self.first_kept.get(&tag).copied().unwrap_or_default();
        let below = if q.reverse {
            q.to < fk && q.to != LogSeq::MAX
        } else {
            q.from < fk
        };
        if (fk > LogSeq::ZERO && below) || !self.last_seq.contains_key(&tag) {
            return None;
        }
        let records = self.tags.get(&tag)?;
        if q.from > q.to {
            return Some(Vec::new());
        }
        let inside = records.range(q.from..=q.to).map(|(_, r)| r.clone());
        Some(if q.reverse {
            inside.rev().take(q.limit).collect()
        } else {
            inside.take(q.limit).collect()
        })
    }
}

fn run_model(bytes_max: usize, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let index = LogIndex::new(bytes_max);
    let mut model = Model::default();
    for step in steps {
        match step {
            Step::Append {
                tags,
                payload,
                shard,
            } => model.append(tags, payload, shard),
            Step::Trim { tag, pick } => {
                let forget = model.trim(tag, pick);
                index.forget(&forget);
            }
            Step::FlushAll => {
                model.tags.clear();
                model.first_kept.clear();
                model.last_seq.clear();
                index.forget(&Forget::Everything);
            }
            Step::Read {
                tag,
                shape,
                from,
                to,
                limit,
                lease,
                closed,
                trim_first,
            } => {
                let points = model.points();
                let (a, b) = (points[from % points.len()], points[to % points.len()]);
                let (lo, hi) = (a.min(b), a.max(b));
                let (log, t) = (key(LOG), key(TAGS[tag]));
                let mut q = match shape {
                    0 => LogQuery::next(log, t, a),
                    1 => LogQuery::prev(log, t, a),
                    2 => LogQuery::tail(log, t),
                    3 => LogQuery::range(log, t, lo, hi, limit),
                    _ => LogQuery::range(log, t, lo, hi, limit),
                };
                q.reverse |= shape == 4;
                if lease {
                    q = q.consistency(ReadConsistency::Lease);
                }
                let expected = model.answer(tag, &q);
                match index.lookup(&q) {
                    Lookup::Hit(records) => {
                        prop_assert_eq!(
                            Some(records),
                            expected,
                            "a hit differs from the tier: {:?}",
                            q
                        );
                    }
                    Lookup::Bypass => prop_assert!(bytes_max == 0),
                    Lookup::Miss(ticket) => {
                        let Some(records) = expected else { continue };
                        let finality = if closed {
                            // Read at a closed time at or past every stamp given so far.
                            model.clock += 2;
                            Finality::ClosedAt(CommitTs::new(model.clock, 0))
                        } else {
                            Finality::OneHome {
                                last_seq: model.last_seq[&tag],
                            }
                        };
                        let first_kept = model.first_kept.get(&tag).copied().unwrap_or_default();
                        if let Some(pick) = trim_first {
                            let forget = model.trim(Some(tag), pick);
                            index.forget(&forget);
                        }
                        let answer = TierAnswer {
                            records: &records,
                            first_kept,
                            finality,
                        };
                        index.learn(ticket, &q, answer);
                    }
                }
            }
        }
        check(&index);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever was appended, trimmed, flushed and read, every hit is what the tier (a
    /// model log) answers at that moment, and the index stays within its bound.
    #[test]
    fn every_hit_equals_the_model_logs_answer(
        bytes_max in prop_oneof![Just(0usize), 600usize..3_000, Just(1usize << 20)],
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        run_model(bytes_max, steps)?;
    }
}
