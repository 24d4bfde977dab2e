//! Keys that expire and leases, in one shard: an expiry is a version — reads at a time
//! before it see the value, reads after it see the key deleted before anything is written,
//! and the tombstone written later (by a write of the key or the leader's sweep) is stamped
//! at the expiry, so the history reads the same before and after; a lease is live until its
//! running-out stamp, kept alive only while live, and lists the keys attached to it.

use firn_model::{
    CommitTs, ExpireIf, Expiry, FirnError, KeyChange, KeyExpiry, KeyspaceSpec, KvWrite,
    LeaseChange, LeaseWrite, Lifetime, ReadAt, Response,
};
use firn_store::{Op, SystemOp, VersionedStore};

mod store_support;
use store_support::*;

/// A base far ahead of the host's clock: reads of the newest values then compare expiries
/// with the newest applied stamp, which the test sets.
const T0: u64 = 4_000_000_000_000_000;
const SECOND: u64 = 1_000_000;

fn put_for(store: &VersionedStore, at: u64, k: &str, v: &str, life: Lifetime) -> Response {
    let mut p = put_req(k, v);
    p.life = life;
    apply(store, at, Op::Kv(KvWrite::Put(p))).unwrap()
}

/// Moves the store's newest applied stamp to `at` (an entry that changes no key).
fn tick(store: &VersionedStore, at: u64) {
    apply(store, at, Op::System(SystemOp::CloseTime)).unwrap();
}

fn history(store: &VersionedStore, k: &str) -> Vec<(u64, CommitTs, bool)> {
    store
        .history(key(k).as_bytes(), 1, None, 100, None)
        .unwrap()
        .into_iter()
        .map(|i| (i.version, i.commit_ts, i.deleted))
        .collect()
}

#[test]
fn an_expired_key_reads_deleted_at_its_expiry_before_and_after_it_is_written_down() {
    let store = mem_store();
    put_for(&store, T0, "k", "v", Lifetime::For { ms: 2_000 });
    let ends = CommitTs::new(T0 + 2 * SECOND, 0);
    assert_eq!(store.expiry(b"k").unwrap(), KeyExpiry::At(ends));
    assert_eq!(value_at(&store, "k", ReadAt::Latest).as_deref(), Some("v"));

    // Past the expiry, nothing written yet: every read sees the key deleted.
    tick(&store, T0 + 3 * SECOND);
    assert_eq!(value_at(&store, "k", ReadAt::Latest), None);
    assert_eq!(store.expiry(b"k").unwrap(), KeyExpiry::Absent);
    let before_ends = ReadAt::AsOf(CommitTs::new(T0 + 2 * SECOND - 1, 0));
    assert_eq!(value_at(&store, "k", before_ends).as_deref(), Some("v"));
    assert_eq!(value_at(&store, "k", ReadAt::AsOf(ends)), None);
    let read_before = history(&store, "k");
    assert_eq!(
        read_before,
        vec![(1, CommitTs::new(T0, 0), false), (2, ends, true)]
    );
    assert_eq!(store.live_keys(), 1, "nothing is written down yet");

    // The sweep writes the tombstone down, stamped at the expiry: the same history.
    assert_eq!(store.next_expiry().unwrap(), Some(ends));
    let swept = apply(&store, T0 + 4 * SECOND, Op::System(SystemOp::ExpireDue)).unwrap();
    assert_eq!(swept, Response::Count(1));
    assert_eq!(history(&store, "k"), read_before);
    assert_eq!(store.next_expiry().unwrap(), None);
    assert_eq!(store.live_keys(), 0);
    assert_eq!(value_at(&store, "k", before_ends).as_deref(), Some("v"));
}

#[test]
fn a_write_after_the_expiry_writes_it_down_first_and_finds_the_key_absent() {
    let store = mem_store();
    put_for(&store, T0, "n", "5", Lifetime::For { ms: 1_000 });
    let ends = CommitTs::new(T0 + SECOND, 0);
    let incr = Op::Kv(KvWrite::Change {
        key: key("n"),
        change: KeyChange::IncrBy(1),
    });
    // Before: INCR keeps the expiry (as Redis's).
    apply(&store, T0 + 10, incr.clone()).unwrap();
    assert_eq!(store.expiry(b"n").unwrap(), KeyExpiry::At(ends));
    // After: the count starts again from nothing, and the old value ended at its expiry.
    apply(&store, T0 + 5 * SECOND, incr).unwrap();
    assert_eq!(value_at(&store, "n", ReadAt::Latest).as_deref(), Some("1"));
    let h = history(&store, "n");
    assert_eq!(h[2], (3, ends, true), "{h:?}");
    assert_eq!(h[3].0, 4);
    // SET NX takes an expired key as absent.
    put_for(&store, T0 + 6 * SECOND, "x", "a", Lifetime::For { ms: 1 });
    let mut nx = put_req("x", "b");
    nx.condition = firn_model::WriteCondition::IfVersion(0);
    apply(&store, T0 + 7 * SECOND, Op::Kv(KvWrite::Put(nx))).unwrap();
    assert_eq!(value_at(&store, "x", ReadAt::Latest).as_deref(), Some("b"));
    assert_eq!(store.expiry(b"x").unwrap(), KeyExpiry::Never);
}

#[test]
fn expire_changes_no_version_and_follows_redis_conditions() {
    let store = mem_store();
    put(&store, T0, "k", "v");
    let expire = |at: u64, to: Expiry, only: ExpireIf| {
        apply(
            &store,
            at,
            Op::Kv(KvWrite::Expire {
                key: key("k"),
                to,
                only,
            }),
        )
        .unwrap()
    };
    let in_ms = |ms| Expiry::In { ms };
    assert_eq!(
        expire(T0 + 1, in_ms(10_000), ExpireIf::HasExpiry),
        Response::ExpirySet(false)
    );
    assert_eq!(
        expire(T0 + 2, in_ms(10_000), ExpireIf::Later),
        Response::ExpirySet(false)
    );
    assert_eq!(
        expire(T0 + 3, in_ms(10_000), ExpireIf::NoExpiry),
        Response::ExpirySet(true)
    );
    assert_eq!(
        expire(T0 + 4, in_ms(20_000), ExpireIf::NoExpiry),
        Response::ExpirySet(false)
    );
    assert_eq!(
        expire(T0 + 5, in_ms(20_000), ExpireIf::Sooner),
        Response::ExpirySet(false)
    );
    assert_eq!(
        expire(T0 + 6, in_ms(20_000), ExpireIf::Later),
        Response::ExpirySet(true)
    );
    assert_eq!(
        store.expiry(b"k").unwrap(),
        KeyExpiry::At(CommitTs::new(T0 + 6 + 20 * SECOND, 0))
    );
    assert_eq!(history(&store, "k").len(), 1, "an expiry is no version");
    assert_eq!(
        expire(T0 + 7, Expiry::Never, ExpireIf::Always),
        Response::ExpirySet(true)
    );
    assert_eq!(
        expire(T0 + 8, Expiry::Never, ExpireIf::Always),
        Response::ExpirySet(false)
    );
    assert_eq!(store.expiry(b"k").unwrap(), KeyExpiry::Never);
    assert_eq!(store.next_expiry().unwrap(), None, "the index follows");
    // A time already past deletes the key at once.
    assert_eq!(
        expire(T0 + 9, in_ms(-1), ExpireIf::Always),
        Response::ExpirySet(true)
    );
    assert_eq!(value_at(&store, "k", ReadAt::Latest), None);
    assert!(history(&store, "k").last().unwrap().2);
    assert_eq!(
        expire(T0 + 10, in_ms(5), ExpireIf::Always),
        Response::ExpirySet(false)
    );
}

#[test]
fn a_set_at_a_time_already_past_deletes_and_a_keyspace_ttl_is_the_default() {
    let store = mem_store();
    put(&store, T0, "k", "v");
    put_for(&store, T0 + 1, "k", "w", Lifetime::Until { unix_ms: 1 });
    assert_eq!(value_at(&store, "k", ReadAt::Latest), None);
    assert!(history(&store, "k")[1].2);

    let spec = KeyspaceSpec {
        prefix: "s:".into(),
        ttl_ms: Some(500),
        ..KeyspaceSpec::default_keyspace()
    };
    apply(&store, T0 + 2, Op::System(SystemOp::KeyspaceCreate(spec))).unwrap();
    put(&store, T0 + 10, "s:a", "1");
    assert_eq!(
        store.expiry(b"s:a").unwrap(),
        KeyExpiry::At(CommitTs::new(T0 + 10 + SECOND / 2, 0))
    );
    put_for(&store, T0 + 20, "s:b", "1", Lifetime::For { ms: 60_000 });
    assert_eq!(
        store.expiry(b"s:b").unwrap(),
        KeyExpiry::At(CommitTs::new(T0 + 20 + 60 * SECOND, 0)),
        "a write's own TTL wins over the keyspace's"
    );
    put(&store, T0 + 30, "other", "1");
    assert_eq!(store.expiry(b"other").unwrap(), KeyExpiry::Never);
}

fn lease(
    store: &VersionedStore,
    at: u64,
    id: u64,
    change: LeaseChange,
) -> Result<Response, FirnError> {
    apply(
        store,
        at,
        Op::Kv(KvWrite::Lease(LeaseWrite::new(id, change))),
    )
}

#[test]
fn a_lease_lives_until_it_runs_out_and_lists_its_keys() {
    let store = mem_store();
    let granted = lease(&store, T0, 7, LeaseChange::Grant { ttl_s: 2 }).unwrap();
    assert!(
        matches!(granted, Response::Lease(Some(l)) if l.expires == CommitTs::new(T0 + 2 * SECOND, 0))
    );
    assert!(matches!(
        lease(&store, T0 + 1, 7, LeaseChange::Grant { ttl_s: 2 }),
        Err(FirnError::Refused(_))
    ));
    // Kept alive while live: two more seconds from then.
    lease(&store, T0 + SECOND, 7, LeaseChange::KeepAlive).unwrap();
    let live_at = |t: u64| store.lease_at(7, CommitTs::new(t, 0)).unwrap().is_some();
    assert!(live_at(T0 + 2 * SECOND + 500_000));
    assert!(!live_at(T0 + 3 * SECOND));
    assert!(
        store
            .leases_run_out(CommitTs::new(T0 + 2 * SECOND, 0), 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .leases_run_out(CommitTs::new(T0 + 3 * SECOND, 0), 10)
            .unwrap(),
        vec![7]
    );

    put_for(&store, T0 + 10, "a", "1", Lifetime::Lease(7));
    put_for(&store, T0 + 11, "b", "1", Lifetime::Lease(7));
    put_for(&store, T0 + 12, "c", "1", Lifetime::Lease(8));
    assert_eq!(store.expiry(b"a").unwrap(), KeyExpiry::Lease(7));
    let listed = store.lease_keys(7, 10).unwrap();
    assert_eq!(listed, vec![(key("a"), 1), (key("b"), 1)]);
    // A write without the lease detaches the key.
    put(&store, T0 + 13, "b", "2");
    assert_eq!(store.lease_keys(7, 10).unwrap(), vec![(key("a"), 1)]);

    // Run out: no keep-alive brings it back.
    assert!(matches!(
        lease(&store, T0 + 4 * SECOND, 7, LeaseChange::KeepAlive),
        Err(FirnError::LeaseNotFound(7))
    ));
    lease(&store, T0 + 4 * SECOND + 1, 7, LeaseChange::End).unwrap();
    assert!(store.leases_run_out(CommitTs::MAX, 10).unwrap().is_empty());
    assert!(matches!(
        lease(&store, T0 + 4 * SECOND + 2, 7, LeaseChange::End),
        Err(FirnError::LeaseNotFound(7))
    ));
}

/// A write refused after it wrote an expiry down leaves nothing of it in view: the next
/// command of the same batch writes it down again, so the history has no hole.
#[test]
fn a_refused_write_in_a_batch_leaves_the_expiry_for_the_next_to_write_down() {
    let store = mem_store();
    put_for(&store, T0, "k", "v", Lifetime::For { ms: 1_000 });
    let mut stale = put_req("k", "refused");
    stale.condition = firn_model::WriteCondition::IfVersion(1);
    let at = CommitTs::new(T0 + 5 * SECOND, 0);
    let refused = firn_store::Command {
        ts: at,
        op: Op::Kv(KvWrite::Put(stale)),
    };
    let taken = firn_store::Command {
        ts: at,
        op: Op::Kv(KvWrite::Put(put_req("k", "new"))),
    };
    let results = store.apply_batch(&[&refused, &taken], Vec::new()).unwrap();
    assert!(
        matches!(results[0], Err(FirnError::Conflict { current: 2 })),
        "{results:?}"
    );
    assert!(results[1].is_ok());
    let h = history(&store, "k");
    assert_eq!(
        h.iter()
            .map(|(v, _, deleted)| (*v, *deleted))
            .collect::<Vec<_>>(),
        vec![(1, false), (2, true), (3, false)],
        "{h:?}"
    );
    assert_eq!(h[1].1, CommitTs::new(T0 + SECOND, 0));
    assert_eq!(
        value_at(&store, "k", ReadAt::Latest).as_deref(),
        Some("new")
    );
    assert_eq!(store.next_expiry().unwrap(), None);
}
