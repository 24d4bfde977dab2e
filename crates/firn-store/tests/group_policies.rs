//! Delivery policies in one shard's store (docs/architecture.md, "Delivery policies"):
//! `roundrobin` and `hrw` deals, ACKWAIT redelivery, MAXDELIVER's dead letters and the
//! checks on options. Every clock is an entry's stamp the test chooses, so each run is the
//! same.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use firn_model::log::decode_fields;
use firn_model::{
    ClaimOptions, DeliveryPolicy, FirnError, GroupChange, GroupKey, GroupOptions, GroupStart, Key,
    LogSeq, MaxDeliver, Response,
};
use firn_store::store::VersionedStore;

mod group_support;
use group_support::*;

fn create_with(
    store: &VersionedStore,
    ms: u64,
    options: GroupOptions,
) -> Result<Response, FirnError> {
    change(
        store,
        ms,
        GroupChange::Create {
            entries_read: None,
            start: GroupStart::Id(LogSeq::ZERO),
            mkstream: true,
            options,
        },
    )
}

fn consumer(store: &VersionedStore, ms: u64, name: &str) {
    change(
        store,
        ms,
        GroupChange::CreateConsumer {
            consumer: Bytes::from(name.to_string()),
        },
    )
    .unwrap();
}

fn ack(store: &VersionedStore, ms: u64, ids: &[LogSeq]) {
    change(store, ms, GroupChange::Ack { ids: ids.to_vec() }).unwrap();
}

fn policy(policy: DeliveryPolicy) -> GroupOptions {
    GroupOptions {
        policy,
        ..GroupOptions::default()
    }
}

/// Each consumer's pending entries: (id, deliveries).
fn pending_of(store: &VersionedStore, name: &str) -> Vec<(LogSeq, u64)> {
    store
        .pending(
            &key(),
            b"g",
            None,
            LogSeq::ZERO,
            LogSeq::MAX,
            1_000,
            Some(name.as_bytes()),
            0,
        )
        .unwrap()
        .into_iter()
        .map(|p| (p.seq, p.deliveries))
        .collect()
}

#[test]
fn roundrobin_spreads_entries_within_one_per_consumer_however_often_each_asks() {
    let s = store();
    create_with(&s, 1_000, policy(DeliveryPolicy::RoundRobin)).unwrap();
    for c in ["c1", "c2", "c3"] {
        consumer(&s, 1_000, c);
    }
    for id in 1..=31 {
        add(&s, 1_000, id);
    }
    // c1 asks every round, c2 every second, c3 every third: dealing, not asking, decides.
    let mut got: BTreeMap<&str, Vec<LogSeq>> = BTreeMap::new();
    for round in 0..40u64 {
        for (c, every) in [("c1", 1), ("c2", 2), ("c3", 3)] {
            if round % every == 0 {
                let ids = deliver(&s, 2_000 + round, c, 2);
                ack(&s, 2_000 + round, &ids);
                got.entry(c).or_default().extend(ids);
            }
        }
    }
    let all: BTreeSet<LogSeq> = got.values().flatten().copied().collect();
    assert_eq!(all.len(), 31, "every entry handed once: {got:?}");
    assert_eq!(got.values().map(Vec::len).sum::<usize>(), 31);
    let sizes: Vec<usize> = got.values().map(Vec::len).collect();
    let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(max - min <= 1, "spread {sizes:?}");
}

/// One event of an `hrw` history: who was handed which id of which key, or an ack.
#[derive(Clone, Debug)]
enum Event {
    Handed {
        consumer: String,
        key: String,
        id: LogSeq,
    },
    Acked(LogSeq),
}

/// Per-key order across consumers: a key's entries are never held (handed, not acked) by
/// two consumers at once, except that those of a consumer in `gone` (it stopped) may move;
/// and each consumer gets a key's ids in increasing order.
fn check_key_order(history: &[Event], gone: &[&str]) -> Result<(), String> {
    // key → consumer → ids held
    let mut held: BTreeMap<&str, BTreeMap<&str, BTreeSet<LogSeq>>> = BTreeMap::new();
    let mut last: BTreeMap<(&str, &str), LogSeq> = BTreeMap::new();
    for event in history {
        let (consumer, key, id) = match event {
            Event::Acked(id) => {
                for holders in held.values_mut() {
                    for ids in holders.values_mut() {
                        ids.remove(id);
                    }
                }
                continue;
            }
            Event::Handed { consumer, key, id } => (consumer.as_str(), key.as_str(), *id),
        };
        let holders = held.entry(key).or_default();
        for (other, ids) in holders.iter_mut() {
            if *other != consumer && gone.contains(other) {
                ids.remove(&id);
            } else if *other != consumer && !ids.is_empty() {
                return Err(format!("{event:?} while {other} holds {ids:?}"));
            }
        }
        if let Some(prev) = last.get(&(consumer, key))
            && *prev >= id
        {
            return Err(format!("{event:?} after {prev}"));
        }
        last.insert((consumer, key), id);
        holders.entry(consumer).or_default().insert(id);
    }
    Ok(())
}

#[test]
fn the_key_order_check_rejects_a_key_held_twice_or_out_of_order() {
    let h = |c: &str, k: &str, id| Event::Handed {
        consumer: c.into(),
        key: k.into(),
        id: LogSeq::new(id, 0),
    };
    let acked = |id| Event::Acked(LogSeq::new(id, 0));
    assert!(check_key_order(&[h("a", "k", 1), h("a", "k", 2)], &[]).is_ok());
    assert!(check_key_order(&[h("a", "k", 1), h("b", "k", 2)], &[]).is_err());
    assert!(check_key_order(&[h("a", "k", 1), acked(1), h("b", "k", 2)], &[]).is_ok());
    assert!(check_key_order(&[h("a", "k", 1), h("b", "k", 2)], &["a"]).is_ok());
    assert!(check_key_order(&[h("a", "k", 2), h("a", "k", 1)], &[]).is_err());
}

#[test]
fn hrw_keeps_each_key_with_one_consumer_and_its_order_across_a_join_and_a_leave() {
    let s = store();
    let options = GroupOptions {
        policy: DeliveryPolicy::Hrw(GroupKey::Field(Bytes::from("key"))),
        liveness_ms: 5_000,
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    for c in ["c1", "c2", "c3"] {
        consumer(&s, 1_000, c);
    }
    let key_of = |id: u64| format!("k{}", id % 7);
    for id in 1..=60 {
        add_fields(
            &s,
            1_000,
            id,
            &[("key", &key_of(id)), ("n", &id.to_string())],
        );
    }
    // Each consumer acks a batch only at its next ask, so consumers hold entries while
    // others are handed theirs.
    let mut history = Vec::new();
    let mut holding: BTreeMap<&str, Vec<LogSeq>> = BTreeMap::new();
    let mut ask = |history: &mut Vec<Event>, ms: u64, c: &'static str| {
        let ids = deliver(&s, ms, c, 3);
        for id in &ids {
            history.push(Event::Handed {
                consumer: c.into(),
                key: key_of(id.ms),
                id: *id,
            });
        }
        let previous = holding.insert(c, ids.clone()).unwrap_or_default();
        ack(&s, ms, &previous);
        history.extend(previous.into_iter().map(Event::Acked));
        ids.len()
    };
    // Stable membership: every key with one consumer.
    let mut ms = 2_000;
    for _ in 0..4 {
        for c in ["c1", "c2", "c3"] {
            ask(&mut history, ms, c);
        }
        ms += 10;
    }
    let mut owner: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for event in &history {
        if let Event::Handed { consumer, key, .. } = event {
            owner
                .entry(key.clone())
                .or_default()
                .insert(consumer.clone());
        }
    }
    assert!(owner.values().all(|o| o.len() == 1), "{owner:?}");
    assert!(
        owner.values().flatten().collect::<BTreeSet<_>>().len() > 1,
        "{owner:?}"
    );
    // c1 takes a batch and leaves without acking; c4 joins.
    ask(&mut history, ms, "c1");
    consumer(&s, ms, "c4");
    ms += 6_000;
    for _ in 0..200 {
        let mut n = 0;
        for c in ["c2", "c3", "c4"] {
            n += ask(&mut history, ms, c);
        }
        ms += 10;
        if n == 0 {
            break;
        }
    }
    check_key_order(&history, &["c1"]).unwrap();
    let handed: BTreeSet<LogSeq> = history
        .iter()
        .filter_map(|e| match e {
            Event::Handed { id, .. } => Some(*id),
            Event::Acked(_) => None,
        })
        .collect();
    assert_eq!(handed.len(), 60, "every entry handed");
    assert!(pending_of(&s, "c1").is_empty());
    for c in ["c2", "c3", "c4"] {
        assert!(pending_of(&s, c).is_empty(), "{c} acked all");
    }
}

#[test]
fn ackwait_gives_an_unacked_entry_to_another_consumer_without_a_claim() {
    let s = store();
    let options = GroupOptions {
        ack_wait_ms: Some(1_000),
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    add(&s, 1_000, 1);
    assert_eq!(deliver(&s, 10_000, "c1", 10), ids(&[1]));
    let info = &s.groups(&key()).unwrap()[0];
    assert_eq!(info.next_due_ms, Some(11_000));
    assert!(deliver(&s, 10_999, "c2", 10).is_empty(), "not due yet");
    assert_eq!(deliver(&s, 11_000, "c2", 10), ids(&[1]));
    assert_eq!(pending_of(&s, "c2"), vec![(LogSeq::new(1, 0), 2)]);
    assert!(pending_of(&s, "c1").is_empty());
}

#[test]
fn roundrobin_gives_a_silent_consumers_entries_to_a_live_one() {
    let s = store();
    let options = GroupOptions {
        policy: DeliveryPolicy::RoundRobin,
        liveness_ms: 1_000,
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    consumer(&s, 1_000, "c2");
    add(&s, 1_000, 1);
    add(&s, 1_000, 2);
    // c1 asks: entry 1 is its, 2 is dealt to c2 (no delivery yet).
    assert_eq!(deliver(&s, 1_500, "c1", 1), ids(&[1]));
    assert_eq!(pending_of(&s, "c2"), vec![(LogSeq::new(2, 0), 0)]);
    // c2 stays silent past its liveness; c1 asks again and gets entry 2.
    assert_eq!(deliver(&s, 3_000, "c1", 5), ids(&[2]));
    assert_eq!(
        pending_of(&s, "c1"),
        vec![(LogSeq::new(1, 0), 1), (LogSeq::new(2, 0), 1)]
    );
}

#[test]
fn roundrobin_gives_a_due_entry_to_another_live_consumer_not_back_to_its_holder() {
    let s = store();
    let options = GroupOptions {
        policy: DeliveryPolicy::RoundRobin,
        ack_wait_ms: Some(1_000),
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    consumer(&s, 1_000, "c2");
    add(&s, 1_000, 1);
    add(&s, 1_000, 2);
    // c1 takes entry 1 and stalls (still live: LIVENESS 30 s); entry 2 is dealt to c2, which
    // takes and acks it, so c1 is next in turn when entry 1 falls due.
    assert_eq!(deliver(&s, 1_500, "c1", 1), ids(&[1]));
    assert_eq!(deliver(&s, 1_600, "c2", 1), ids(&[2]));
    ack(&s, 1_700, &ids(&[2]));
    // After ACKWAIT the due entry is dealt to c2, not handed back to c1, whoever asks.
    assert!(deliver(&s, 2_600, "c1", 1).is_empty());
    assert_eq!(pending_of(&s, "c2"), vec![(LogSeq::new(1, 0), 1)]);
    assert_eq!(deliver(&s, 2_700, "c2", 1), ids(&[1]));
    assert_eq!(pending_of(&s, "c2"), vec![(LogSeq::new(1, 0), 2)]);
}

#[test]
fn pending_walks_start_at_the_floor_and_force_and_setid_lower_it() {
    let s = store();
    let options = GroupOptions {
        ack_wait_ms: Some(60_000),
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    for n in 1..=5 {
        add(&s, 1_000, n);
    }
    assert_eq!(deliver(&s, 2_000, "c1", 10), ids(&[1, 2, 3, 4, 5]));
    ack(&s, 2_100, &ids(&[1, 2, 3, 4]));
    // A `>` read walks the list and raises its floor to the oldest pending id, 5.
    assert!(deliver(&s, 2_200, "c1", 10).is_empty());
    let summary = s.pending_summary(&key(), b"g").unwrap();
    assert_eq!((summary.count, summary.first), (1, Some(LogSeq::new(5, 0))));
    // XCLAIM FORCE puts id 2 back below the floor: every read still sees it.
    let force = ClaimOptions {
        force: true,
        ..ClaimOptions::default()
    };
    let claim = GroupChange::Claim {
        consumer: Bytes::from_static(b"c2"),
        min_idle_ms: 0,
        ids: ids(&[2]),
        options: force,
    };
    change(&s, 2_300, claim).unwrap();
    let summary = s.pending_summary(&key(), b"g").unwrap();
    assert_eq!((summary.count, summary.first), (2, Some(LogSeq::new(2, 0))));
    assert_eq!(pending_of(&s, "c2"), vec![(LogSeq::new(2, 0), 1)]);
    // SETID 0 and a new `>`: the entries come again and are all pending.
    let setid = GroupChange::SetId {
        entries_read: None,
        start: GroupStart::Id(LogSeq::ZERO),
    };
    change(&s, 2_400, setid).unwrap();
    assert_eq!(deliver(&s, 2_500, "c3", 10), ids(&[1, 2, 3, 4, 5]));
    let summary = s.pending_summary(&key(), b"g").unwrap();
    assert_eq!((summary.count, summary.first), (5, Some(LogSeq::new(1, 0))));
}

/// A dead-letter history: how many times an entry was handed out, and the deliveries its
/// dead letter says (none: it never reached the dead-letter stream).
struct DeadLetterHistory {
    handed: u64,
    dead_letter_deliveries: Option<u64>,
}

/// MAXDELIVER n: handed exactly n times, then in the dead-letter stream saying n.
fn check_dead_letter(history: &DeadLetterHistory, n: u64) -> Result<(), String> {
    if history.handed != n {
        return Err(format!(
            "handed {} times; MAXDELIVER is {n}",
            history.handed
        ));
    }
    match history.dead_letter_deliveries {
        Some(d) if d == n => Ok(()),
        other => Err(format!(
            "dead letter says {other:?} deliveries; expected {n}"
        )),
    }
}

#[test]
fn the_dead_letter_check_rejects_a_counter_off_by_one() {
    let h = |handed, dead| DeadLetterHistory {
        handed,
        dead_letter_deliveries: Some(dead),
    };
    assert!(check_dead_letter(&h(3, 3), 3).is_ok());
    assert!(check_dead_letter(&h(2, 2), 3).is_err());
    assert!(check_dead_letter(&h(4, 4), 3).is_err());
    assert!(check_dead_letter(&h(3, 4), 3).is_err());
    let never = DeadLetterHistory {
        handed: 3,
        dead_letter_deliveries: None,
    };
    assert!(check_dead_letter(&never, 3).is_err());
}

fn dead_letters(s: &VersionedStore, dead: &Key) -> Vec<Vec<(Bytes, Bytes)>> {
    let page = s
        .log_page(
            dead.as_bytes(),
            dead.as_bytes(),
            LogSeq::ZERO,
            LogSeq::MAX,
            100,
            false,
            None,
            false,
        )
        .unwrap();
    page.records
        .iter()
        .map(|r| decode_fields(&r.payload).unwrap())
        .collect()
}

#[test]
fn maxdeliver_moves_an_entry_to_the_dead_letter_stream_after_exactly_n_deliveries() {
    let s = store();
    let dead = Key::new("{s}dead").unwrap();
    let n = 3;
    let options = GroupOptions {
        ack_wait_ms: Some(1_000),
        max_deliver: Some(MaxDeliver {
            deliveries: n,
            dead_letter: dead.clone(),
        }),
        ..GroupOptions::default()
    };
    create_with(&s, 1_000, options).unwrap();
    add(&s, 1_000, 1);
    let mut history = DeadLetterHistory {
        handed: 0,
        dead_letter_deliveries: None,
    };
    for i in 0..10 {
        let got = deliver(&s, 10_000 + i * 1_000, "c1", 10);
        history.handed += got.len() as u64;
        if let Some(fields) = dead_letters(&s, &dead).first() {
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(f, _)| f == name)
                    .map(|(_, v)| String::from_utf8_lossy(v).to_string())
            };
            assert_eq!(field("f").as_deref(), Some("1"));
            assert_eq!(field("firn-from").as_deref(), Some("s 1-0"));
            assert_eq!(field("firn-group").as_deref(), Some("g"));
            history.dead_letter_deliveries = field("firn-deliveries").and_then(|d| d.parse().ok());
            break;
        }
    }
    check_dead_letter(&history, n).unwrap();
    assert!(pending_of(&s, "c1").is_empty());
    assert_eq!(dead_letters(&s, &dead).len(), 1);
}

#[test]
fn bad_options_are_refused_and_change_nothing() {
    let s = store();
    let with = |f: fn(&mut GroupOptions)| {
        let mut o = GroupOptions::default();
        f(&mut o);
        o
    };
    let bad = [
        with(|o| o.ack_wait_ms = Some(0)),
        with(|o| o.ack_wait_ms = Some(86_400_001)),
        with(|o| o.liveness_ms = 0),
        with(|o| {
            o.max_deliver = Some(MaxDeliver {
                deliveries: 0,
                dead_letter: Key::new("{s}d").unwrap(),
            })
        }),
        with(|o| {
            o.max_deliver = Some(MaxDeliver {
                deliveries: 2,
                dead_letter: Key::new("s").unwrap(),
            })
        }),
        with(|o| o.policy = DeliveryPolicy::Hrw(GroupKey::Field(Bytes::new()))),
    ];
    for options in &bad {
        let err = create_with(&s, 1_000, options.clone()).unwrap_err();
        assert!(matches!(err, FirnError::BadArgument(_)), "{err:?}");
    }
    let cross = with(|o| {
        o.max_deliver = Some(MaxDeliver {
            deliveries: 2,
            dead_letter: Key::new("elsewhere").unwrap(),
        })
    });
    assert_eq!(
        create_with(&s, 1_000, cross.clone()),
        Err(FirnError::CrossSlot)
    );
    // Nothing was made, not even the stream MKSTREAM asked for.
    assert!(s.groups(&key()).is_err());
    let err = change(
        &s,
        1_000,
        GroupChange::Configure {
            options: GroupOptions::default(),
        },
    );
    assert!(err.is_err());
    // A good group keeps its options when a change is refused, and takes a good one.
    let good = policy(DeliveryPolicy::RoundRobin);
    create_with(&s, 1_000, good.clone()).unwrap();
    assert_eq!(
        change(&s, 1_000, GroupChange::Configure { options: cross }),
        Err(FirnError::CrossSlot)
    );
    assert_eq!(s.groups(&key()).unwrap()[0].options, good);
    let next = with(|o| o.ack_wait_ms = Some(5));
    change(
        &s,
        1_000,
        GroupChange::Configure {
            options: next.clone(),
        },
    )
    .unwrap();
    assert_eq!(s.groups(&key()).unwrap()[0].options, next);
}

#[test]
fn entries_dealt_before_a_configure_back_to_first_are_still_handed_and_setid_keeps_options() {
    let s = store();
    create_with(&s, 1_000, policy(DeliveryPolicy::RoundRobin)).unwrap();
    consumer(&s, 1_000, "b");
    add(&s, 1_000, 1);
    add(&s, 1_000, 2);
    assert_eq!(deliver(&s, 1_100, "a", 1), ids(&[1]));
    assert_eq!(pending_of(&s, "b"), vec![(LogSeq::new(2, 0), 0)]);
    let first = GroupOptions::default();
    change(
        &s,
        1_200,
        GroupChange::Configure {
            options: first.clone(),
        },
    )
    .unwrap();
    assert_eq!(deliver(&s, 1_300, "b", 5), ids(&[2]));
    assert_eq!(pending_of(&s, "b"), vec![(LogSeq::new(2, 0), 1)]);
    let acking = GroupOptions {
        ack_wait_ms: Some(50),
        ..GroupOptions::default()
    };
    change(
        &s,
        1_400,
        GroupChange::Configure {
            options: acking.clone(),
        },
    )
    .unwrap();
    change(
        &s,
        1_500,
        GroupChange::SetId {
            entries_read: None,
            start: GroupStart::Id(LogSeq::ZERO),
        },
    )
    .unwrap();
    assert_eq!(s.groups(&key()).unwrap()[0].options, acking);
}

#[test]
fn hrw_keytag_keys_entries_by_their_first_tag_other_than_the_stream() {
    use firn_model::StreamId;
    use firn_store::command::{LogOp, Op, StreamAppend};
    let s = store();
    let options = policy(DeliveryPolicy::Hrw(GroupKey::Tag));
    create_with(&s, 1_000, options).unwrap();
    for c in ["c1", "c2", "c3"] {
        consumer(&s, 1_000, c);
    }
    let tag_of = |id: u64| format!("user:{}", id % 4);
    for id in 1..=24 {
        let tag = Key::new(tag_of(id)).unwrap();
        apply(
            &s,
            1_000,
            Op::Log(LogOp::Append {
                log: key(),
                home: 0,
                records: vec![firn_model::NewRecord {
                    tags: vec![key(), tag],
                    payload: Bytes::from(id.to_string()),
                }],
                stream: Some(StreamAppend {
                    id: StreamId::Exact(LogSeq::new(id, 0)),
                    trim: None,
                    no_create: false,
                }),
            }),
        )
        .unwrap();
    }
    let mut owner: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for round in 0..20 {
        for c in ["c1", "c2", "c3"] {
            let got = deliver(&s, 2_000 + round, c, 2);
            ack(&s, 2_000 + round, &got);
            for id in got {
                owner.entry(tag_of(id.ms)).or_default().insert(c);
            }
        }
    }
    assert_eq!(owner.len(), 4, "{owner:?}");
    assert!(owner.values().all(|o| o.len() == 1), "{owner:?}");
}
