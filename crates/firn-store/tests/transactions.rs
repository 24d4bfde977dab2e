//! A shard's side of transactions across shards: a prepared part holds its keys (plain
//! writes refused for now, another transaction's prepare refused as a conflict) and holds
//! closed time below its prepare stamp; the anchor's decision is made once; a resolution
//! writes the part's versions at the one commit stamp, or nothing.

use bytes::Bytes;
use firn_model::{
    CommitTs, Compare, CompareOp, CompareTarget, FirnError, KvWrite, ReadAt, Response, TxnId,
    TxnOutcome, TxnStep,
};
use firn_store::{Op, TxnOp, TxnPart};

mod store_support;
use store_support::*;

fn set(k: &str, v: &str) -> TxnStep {
    TxnStep::Write(KvWrite::Put(put_req(k, v)))
}

fn prepare(txn: u128, is_anchor: bool, steps: Vec<TxnStep>) -> Op {
    Op::Txn(TxnOp::Prepare {
        txn: TxnId(txn),
        part: TxnPart {
            anchor: 0,
            is_anchor,
            deadline_us: 10_000_000,
            compares: Vec::new(),
            steps,
            otherwise: None,
        },
    })
}

/// The resolution of `txn` committed at `at`.
fn committed(txn: u128, at: CommitTs) -> Op {
    Op::Txn(TxnOp::Resolve {
        txn: TxnId(txn),
        outcome: TxnOutcome::Committed {
            at,
            otherwise: false,
        },
    })
}

fn prepared_at(answer: Result<Response, FirnError>) -> CommitTs {
    match answer {
        Ok(Response::Prepared {
            at, compared: true, ..
        }) => at,
        other => panic!("not prepared: {other:?}"),
    }
}

#[test]
fn a_prepared_part_holds_its_keys_and_closed_time_until_it_commits_at_the_one_stamp() {
    let store = mem_store();
    put(&store, 100, "a", "old");
    let p = prepared_at(apply(
        &store,
        200,
        prepare(1, false, vec![set("a", "new"), set("b", "new")]),
    ));
    // Nothing written yet; the keys held.
    assert_eq!(
        value_at(&store, "a", ReadAt::Latest).as_deref(),
        Some("old")
    );
    assert_eq!(value_at(&store, "b", ReadAt::Latest), None);
    assert_eq!(store.held_keys(&[key("a"), key("c")]), vec![key("a")]);
    assert_eq!(store.undecided().len(), 1);
    // A plain write of a held key is refused for now, another key's is taken.
    let refused = apply(&store, 300, Op::Kv(KvWrite::Put(put_req("a", "plain"))));
    assert!(
        matches!(refused, Err(FirnError::TryAgain(_))),
        "{refused:?}"
    );
    let other = put(&store, 400, "c", "free");
    // Another transaction's prepare of a held key: a conflict, nothing held for it.
    let conflict = apply(&store, 450, prepare(2, false, vec![set("b", "x")]));
    assert!(
        matches!(conflict, Err(FirnError::TxnConflict(_))),
        "{conflict:?}"
    );
    assert_eq!(store.undecided().len(), 1);
    // Time is closed below the prepare, though later entries were applied.
    assert!(other.commit_ts > p);
    assert_eq!(store.last_commit_ts(), p.predecessor());

    // Committed at a stamp above the prepare (another shard prepared later).
    let t = CommitTs::new(500, 0);
    let resolved = apply(&store, 450, committed(1, t));
    assert_eq!(resolved, Ok(Response::Done));
    for k in ["a", "b"] {
        let v = store.get(k.as_bytes(), ReadAt::Latest).unwrap().unwrap();
        assert_eq!((v.value, v.commit_ts), (Some(Bytes::from("new")), t), "{k}");
    }
    assert!(store.held_keys(&[key("a"), key("b")]).is_empty());
    assert!(store.last_commit_ts() >= t, "closed time is free again");
    // Later entries are stamped above the commit stamp, though proposed below it.
    let next = put(&store, 460, "a", "after");
    assert!(next.commit_ts > t);
    // A resolution heard twice changes nothing.
    apply(&store, 600, committed(1, t)).unwrap();
    assert_eq!(
        value_at(&store, "a", ReadAt::Latest).as_deref(),
        Some("after")
    );
}

#[test]
fn the_anchor_decides_once_and_an_unknown_transaction_is_aborted_for_good() {
    let store = mem_store();
    prepared_at(apply(&store, 100, prepare(7, true, vec![set("k", "v")])));
    let decide = |wall, decision| {
        apply(
            &store,
            wall,
            Op::Txn(TxnOp::Decide {
                txn: TxnId(7),
                decision,
                answer: None,
            }),
        )
    };
    let decided = |outcome| {
        Ok(Response::Decided {
            txn: TxnId(7),
            outcome,
            answer: None,
        })
    };
    let t = CommitTs::new(150, 0);
    let commit = TxnOutcome::Committed {
        at: t,
        otherwise: false,
    };
    assert_eq!(decide(200, commit), decided(commit));
    assert_eq!(value_at(&store, "k", ReadAt::Latest).as_deref(), Some("v"));
    // A survivor's abort after the commit learns the commit.
    assert_eq!(decide(300, TxnOutcome::Aborted), decided(commit));

    // A transaction the anchor never prepared: its commit finds it aborted, for good, and
    // its prepare arriving late is refused, so it never holds keys.
    let unknown = apply(
        &store,
        400,
        Op::Txn(TxnOp::Decide {
            txn: TxnId(8),
            decision: TxnOutcome::Committed {
                at: CommitTs::new(400, 0),
                otherwise: false,
            },
            answer: None,
        }),
    );
    assert_eq!(
        unknown,
        Ok(Response::Decided {
            txn: TxnId(8),
            outcome: TxnOutcome::Aborted,
            answer: None
        })
    );
    let late = apply(&store, 500, prepare(8, true, vec![set("k", "late")]));
    assert!(matches!(late, Err(FirnError::TxnConflict(_))), "{late:?}");
    assert!(store.undecided().is_empty());
}

#[test]
fn an_aborted_part_writes_nothing_and_a_changed_watched_key_holds_nothing() {
    let store = mem_store();
    let before = put(&store, 100, "w", "1");
    prepared_at(apply(&store, 200, prepare(3, false, vec![set("x", "v")])));
    apply(
        &store,
        300,
        Op::Txn(TxnOp::Resolve {
            txn: TxnId(3),
            outcome: TxnOutcome::Aborted,
        }),
    )
    .unwrap();
    assert_eq!(value_at(&store, "x", ReadAt::Latest), None);
    assert!(store.undecided().is_empty());

    put(&store, 400, "w", "2");
    let watched = apply(
        &store,
        500,
        Op::Txn(TxnOp::Prepare {
            txn: TxnId(4),
            part: TxnPart {
                anchor: 0,
                is_anchor: false,
                deadline_us: 10_000_000,
                compares: vec![Compare {
                    key: key("w"),
                    target: CompareTarget::Stamp(before.commit_ts),
                    op: CompareOp::Le,
                }],
                steps: vec![set("x", "v")],
                otherwise: None,
            },
        }),
    );
    assert!(
        matches!(
            watched,
            Ok(Response::Prepared {
                compared: false,
                otherwise: None,
                ..
            })
        ),
        "{watched:?}"
    );
    assert!(store.undecided().is_empty());
}

fn records(log: &str, home: u32, tagged: &[(&[&str], &str)]) -> TxnStep {
    TxnStep::Records {
        log: key(log),
        home,
        records: tagged
            .iter()
            .map(|(tags, payload)| firn_model::NewRecord {
                tags: tags.iter().map(|t| key(t)).collect(),
                payload: Bytes::from(payload.to_string()),
            })
            .collect(),
    }
}

fn seqs_of(store: &firn_store::VersionedStore, tag: &str) -> Vec<(firn_model::LogSeq, CommitTs)> {
    store
        .log_page(
            b"events",
            tag.as_bytes(),
            firn_model::LogSeq::ZERO,
            firn_model::LogSeq::MAX,
            100,
            false,
            None,
            false,
        )
        .unwrap()
        .records
        .into_iter()
        .map(|r| (r.seq, r.commit_ts))
        .collect()
}

#[test]
fn a_prepared_part_holds_its_records_tags_and_gives_the_seqs_of_the_commit_stamp() {
    let store = mem_store();
    let append = |tag: &str| {
        Op::Log(firn_store::LogOp::Append {
            log: key("events"),
            home: 2,
            records: vec![firn_model::NewRecord {
                tags: vec![key(tag)],
                payload: Bytes::from("plain"),
            }],
            stream: None,
        })
    };
    apply(&store, 100, append("t")).unwrap();
    let step = records("events", 2, &[(&["t"], "one"), (&["u", "t"], "two")]);
    let answered = match apply(&store, 200, prepare(1, false, vec![step.clone()])) {
        Ok(Response::Prepared { at, steps, .. }) => (at, steps),
        other => panic!("not prepared: {other:?}"),
    };
    // The dry run answers the seqs of its own stamp and the tick after it.
    let p = answered.0;
    match &answered.1[..] {
        [Ok(Response::Appended(a))] => {
            assert_eq!(a[0].commit_ts, p);
            assert_eq!(a[1].commit_ts, CommitTs::new(p.wall_us, p.logical + 1));
            assert_eq!(a[1].seq, firn_model::LogSeq::from_stamp(a[1].commit_ts, 2));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        seqs_of(&store, "t").len(),
        1,
        "nothing appended at the prepare"
    );
    // Its tags are held: a plain append to one is refused for now, to another tag taken;
    // another transaction's records of a held tag conflict; a trim of it waits too.
    let refused = apply(&store, 300, append("u"));
    assert!(
        matches!(refused, Err(FirnError::TryAgain(_))),
        "{refused:?}"
    );
    apply(&store, 310, append("v")).unwrap();
    let conflict = apply(
        &store,
        320,
        prepare(2, false, vec![records("events", 2, &[(&["t"], "x")])]),
    );
    assert!(
        matches!(conflict, Err(FirnError::TxnConflict(_))),
        "{conflict:?}"
    );
    let trim = apply(
        &store,
        330,
        Op::Log(firn_store::LogOp::Trim {
            log: key("events"),
            tag: None,
            before: firn_model::LogSeq::new(1, 0),
        }),
    );
    assert!(matches!(trim, Err(FirnError::TryAgain(_))), "{trim:?}");

    // Committed at a later stamp: the records take it and the tick after it.
    let t = CommitTs::new(500, 7);
    apply(&store, 400, committed(1, t)).unwrap();
    let t1 = CommitTs::new(500, 8);
    let of_t = seqs_of(&store, "t");
    assert_eq!(of_t.len(), 3, "{of_t:?}");
    assert_eq!(of_t[1], (firn_model::LogSeq::from_stamp(t, 2), t));
    assert_eq!(of_t[2], (firn_model::LogSeq::from_stamp(t1, 2), t1));
    assert_eq!(
        seqs_of(&store, "u"),
        vec![(firn_model::LogSeq::from_stamp(t1, 2), t1)]
    );
    // The tags are free again, and a later record goes after the transaction's.
    apply(&store, 450, append("t")).unwrap();
    let of_t = seqs_of(&store, "t");
    assert!(of_t[3].1 > t1, "{of_t:?}");
}
