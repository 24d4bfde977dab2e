//! `firn backup` and `firn restore` of the shared log, streams and consumer groups: a backup
//! taken while writers append restores, in a new cluster, exactly what the source held at
//! the backup's time — each tag's records in order with their tags and payloads (a record
//! trimmed from some of its tags under the others only), stream entries with their ids and
//! fields, groups with their options, last-delivered ids, consumers and pending entries —
//! and nothing appended after it. The listing of every log (`GET /v1/logs`, `FIRN.LOGS`)
//! pages every tag of every shard once. A damaged or cut-short file, or a cluster that
//! already holds a log, is refused before anything changes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::logs::{
    Rec, consumers_of, groups_of, items, list_tags, pending_of, read_tag, redis_at, run, text,
};
use common::{Cluster, FirnProcess, firn_bin, keys_in_shard};
use redis::Value;

fn firn(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(firn_bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn backup(file: &Path, resp: &str, http: &str) -> (bool, String, String) {
    let file = file.to_str().unwrap();
    firn(&["backup", file, "--addr", resp, "--http-addr", http])
}

fn restore(file: &Path, node: &FirnProcess) -> (bool, String, String) {
    let file = file.to_str().unwrap();
    let resp = node.resp_addr();
    firn(&[
        "restore",
        file,
        "--addr",
        &resp,
        "--http-addr",
        &node.http_addr,
    ])
}

/// Whether a record is an entry of stream `log` (XADD's shape: its one tag is the log, its
/// payload a field list).
fn is_entry(log: &str, r: &Rec) -> bool {
    r.tags == [log] && firn_model::log::decode_fields(&r.payload).is_ok_and(|f| !f.is_empty())
}

/// What a restore shows of a tag that read `source` at the cut: stream entries first, with
/// their ids; every other record in its order, without its seq (a new one), under the tags
/// it was held by (`held`: seq → the tags that read it).
fn expected(log: &str, source: &[Rec], held: &BTreeMap<String, BTreeSet<String>>) -> Vec<Rec> {
    let (entries, others): (Vec<&Rec>, Vec<&Rec>) = source.iter().partition(|r| is_entry(log, r));
    let mut out: Vec<Rec> = entries.into_iter().cloned().collect();
    for r in others {
        let mut tags: Vec<String> = Vec::new();
        for t in &r.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let by = &held[&r.seq];
        let restored = if tags.iter().all(|t| by.contains(t)) {
            r.tags.clone()
        } else {
            tags.into_iter().filter(|t| by.contains(t)).collect()
        };
        out.push(Rec {
            seq: String::new(),
            tags: restored,
            payload: r.payload.clone(),
        });
    }
    out
}

/// A restored tag as [`expected`] shows it: seqs only on stream entries.
fn as_restored(log: &str, records: Vec<Rec>) -> Vec<Rec> {
    records
        .into_iter()
        .map(|r| Rec {
            seq: if is_entry(log, &r) {
                r.seq.clone()
            } else {
                String::new()
            },
            ..r
        })
        .collect()
}

#[test]
fn a_backup_under_log_and_stream_writers_restores_logs_streams_and_groups_as_at_its_time() {
    let source = Cluster::start(3, &[]);
    source.wait_for_leaders(0, None);
    let (resp, http) = (source.resp_addr(0), source.http_addr(0));
    let mut conn = redis_at(&resp);
    // Tags in each of the three shards, so that records span shards.
    let t: Vec<String> = (0..3)
        .map(|s| keys_in_shard(s, &format!("t{s}-"), 1).remove(0))
        .collect();
    let (x, y) = (
        keys_in_shard(0, "x", 1).remove(0),
        keys_in_shard(1, "y", 1).remove(0),
    );
    let append =
        |conn: &mut redis::Connection, log: &str, tags: &[&str], payload: &[u8]| -> String {
            let mut args: Vec<&[u8]> = vec![b"FIRN.LOG", b"APPEND", log.as_bytes(), b"TAGS"];
            let n = tags.len().to_string();
            args.push(n.as_bytes());
            args.extend(tags.iter().map(|t| t.as_bytes()));
            args.push(payload);
            text(&items(run(conn, &args))[0])
        };
    append(&mut conn, "audit", &[&t[0], &t[1]], b"r1");
    append(&mut conn, "audit", &[&t[2]], b"\xff\x00binary");
    append(&mut conn, "audit", &[&t[1], &t[2], &t[0], &t[1]], b"r3");
    // Records trimmed from one of their tags: still held (and backed up) under the other.
    append(&mut conn, "audit", &[&x, &y], b"p1");
    append(&mut conn, "audit", &[&x, &y], b"p2");
    let p3 = append(&mut conn, "audit", &[&x], b"p3");
    run(
        &mut conn,
        &[
            b"FIRN.LOG",
            b"TRIM",
            b"audit",
            b"TAG",
            x.as_bytes(),
            b"BEFORE",
            p3.as_bytes(),
        ],
    );

    // A stream with binary fields, a deleted entry, a record of its log that is not an
    // entry, and groups: one with pending entries (one of them since deleted) and a
    // consumer without any, one with Firn's options, and one on an empty stream.
    let k = "{o}orders";
    let ids: Vec<String> = (0..5)
        .map(|i| {
            let value = format!("{}", 20 + i);
            text(&run(
                &mut conn,
                &[
                    b"XADD",
                    k.as_bytes(),
                    b"*",
                    b"temp",
                    value.as_bytes(),
                    b"raw",
                    b"\x00\xfe",
                ],
            ))
        })
        .collect();
    append(&mut conn, k, &[k, "extra"], b"not an entry");
    run(
        &mut conn,
        &[b"XGROUP", b"CREATE", k.as_bytes(), b"g1", b"0"],
    );
    run(
        &mut conn,
        &[
            b"XREADGROUP",
            b"GROUP",
            b"g1",
            b"c1",
            b"COUNT",
            b"3",
            b"STREAMS",
            k.as_bytes(),
            b">",
        ],
    );
    run(
        &mut conn,
        &[b"XACK", k.as_bytes(), b"g1", ids[0].as_bytes()],
    );
    run(&mut conn, &[b"XDEL", k.as_bytes(), ids[1].as_bytes()]);
    run(
        &mut conn,
        &[b"XGROUP", b"CREATECONSUMER", k.as_bytes(), b"g1", b"c2"],
    );
    run(
        &mut conn,
        &[
            b"XGROUP",
            b"CREATE",
            k.as_bytes(),
            b"g2",
            b"$",
            b"POLICY",
            b"hrw",
            b"KEYFIELD",
            b"temp",
            b"ACKWAIT",
            b"5000",
            b"MAXDELIVER",
            b"3",
            b"DEADLETTER",
            b"{o}dead",
            b"LIVENESS",
            b"10000",
        ],
    );
    run(
        &mut conn,
        &[b"XGROUP", b"CREATE", b"{e}empty", b"g0", b"$", b"MKSTREAM"],
    );

    // Writers append across shards and add to the stream while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let written: Arc<[AtomicU64; 2]> = Arc::default();
    let each_past = |n: &[u64; 2]| {
        let written = written.clone();
        let n = *n;
        move || (0..2).all(|w| written[w].load(Ordering::Relaxed) > n[w])
    };
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, written, t, addr) = (
                stop.clone(),
                written.clone(),
                t.clone(),
                source.resp_addr(w + 1),
            );
            std::thread::spawn(move || {
                let mut conn = redis_at(&addr);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && i < 600 {
                    let payload = format!("w{w}-{i}");
                    let r: redis::RedisResult<Value> = if w == 0 {
                        let (a, b) = (&t[i as usize % 3], &t[(i as usize + 1) % 3]);
                        redis::cmd("FIRN.LOG")
                            .arg(&["APPEND", "audit", "TAGS", "2", a, b, payload.as_str()])
                            .query(&mut conn)
                    } else {
                        redis::cmd("XADD")
                            .arg(&["{o}orders", "*", "n", payload.as_str()])
                            .query(&mut conn)
                    };
                    match r {
                        Ok(_) => {
                            written[w].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => eprintln!("writer {w}: {e}"),
                    }
                    i += 1;
                }
            })
        })
        .collect();
    // Both writers under way: the log and the stream grow while the backup reads them.
    assert!(common::wait_until(
        Duration::from_secs(30),
        each_past(&[10, 10])
    ));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("firn.backup");
    let (done, out, err) = backup(&file, &resp, &http);
    assert!(done, "backup failed: {err}");
    let before = [0, 1].map(|w| written[w].load(Ordering::Relaxed) + 5);
    assert!(common::wait_until(
        Duration::from_secs(30),
        each_past(&before)
    ));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    // "backed up N keys (…) at STAMP (TIME), …"
    let at = out
        .split(" at ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();

    // The listing: every tag once, whatever the page size, each row summed over its shards.
    let tags: Vec<(&str, &str)> = vec![
        ("audit", &t[0]),
        ("audit", &t[1]),
        ("audit", &t[2]),
        ("audit", &x),
        ("audit", &y),
        (k, k),
        (k, "extra"),
        ("{e}empty", "{e}empty"),
    ];
    let listed = list_tags(&http, 2);
    assert_eq!(
        listed.keys().cloned().collect::<BTreeSet<_>>(),
        tags.iter()
            .map(|(l, t)| (l.to_string(), t.to_string()))
            .collect(),
    );
    for (log, tag) in &tags {
        let len = read_tag(&http, log, tag, None).len() as u64;
        assert_eq!(
            listed[&(log.to_string(), tag.to_string())],
            len,
            "{log} {tag}"
        );
    }
    assert_eq!(list_tags(&http, 1000), listed);
    let resp_page = items(run(&mut conn, &[b"FIRN.LOGS", b"COUNT", b"1000"]));
    assert_eq!(text(&resp_page[0]), "", "one page holds them all");
    assert_eq!(items(resp_page[1].clone()).len(), tags.len());

    // What the source held at the cut, tag by tag; which tags read each record.
    let source_at: BTreeMap<(String, String), Vec<Rec>> = tags
        .iter()
        .map(|(l, t)| {
            (
                (l.to_string(), t.to_string()),
                read_tag(&http, l, t, Some(&at)),
            )
        })
        .collect();
    let mut held: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((_, tag), records) in &source_at {
        for r in records {
            held.entry(r.seq.clone()).or_default().insert(tag.clone());
        }
    }
    // The writers' records are in the cut, and more came after it.
    for (log, tag) in [("audit", t[0].as_str()), (k, k)] {
        let (at_cut, now) = (
            source_at[&(log.to_string(), tag.to_string())].len(),
            read_tag(&http, log, tag, None).len(),
        );
        assert!(
            at_cut > 7 && now > at_cut,
            "{log} {tag}: {at_cut} at the cut, {now} now"
        );
    }
    let pending_source = pending_of(&mut conn, k, "g1");
    assert_eq!(pending_source.len(), 2, "{pending_source:?}");
    let groups_source = groups_of(&mut conn, k);

    // Into a new cluster (one node with three shards: records land in several again):
    // exactly the cut.
    let target_cluster = Cluster::start(1, &[]);
    target_cluster.wait_for_leaders(0, None);
    let target = target_cluster.nodes[0].as_ref().unwrap();
    let (done, out, err) = restore(&file, target);
    assert!(done, "restore failed: {err}");
    assert!(out.contains("(1 pending entries left out"), "{out}");
    let mut restored_conn = redis_at(&target.resp_addr());
    for ((log, tag), source) in &source_at {
        let restored = as_restored(log, read_tag(&target.http_addr, log, tag, None));
        assert_eq!(restored, expected(log, source, &held), "{log} {tag}");
    }
    // One order per log: records keep their order across tags and shards.
    let mut by_payload: BTreeMap<Vec<u8>, (String, String)> = BTreeMap::new();
    for (log, tag) in &tags {
        if *log != "audit" {
            continue;
        }
        for r in &source_at[&(log.to_string(), tag.to_string())] {
            by_payload.entry(r.payload.clone()).or_default().0 = r.seq.clone();
        }
        for r in read_tag(&target.http_addr, log, tag, None) {
            by_payload.entry(r.payload.clone()).or_default().1 = r.seq;
        }
    }
    let seq_key = |s: &str| {
        let (ms, n) = s.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), n.parse::<u64>().unwrap())
    };
    let mut pairs: Vec<((u64, u64), (u64, u64))> = by_payload
        .values()
        .map(|(s, r)| (seq_key(s), seq_key(r)))
        .collect();
    pairs.sort();
    assert!(pairs.len() >= 16, "{pairs:?}");
    assert!(
        pairs.windows(2).all(|w| w[0].1 < w[1].1),
        "restored out of order: {pairs:?}"
    );

    // Groups: options, last-delivered ids, consumers, and the pending entries whose entry the
    // stream still held (delivery counts kept, last deliveries to the second).
    assert_eq!(groups_of(&mut restored_conn, k), groups_source);
    assert_eq!(
        consumers_of(&mut restored_conn, k, "g1"),
        BTreeSet::from(["c1".to_string(), "c2".to_string()])
    );
    let pending_restored = pending_of(&mut restored_conn, k, "g1");
    let pending_source = pending_of(&mut conn, k, "g1");
    assert_eq!(pending_restored.keys().collect::<Vec<_>>(), vec![&ids[2]]);
    let (want, got) = (&pending_source[&ids[2]], &pending_restored[&ids[2]]);
    assert_eq!((&got.0, got.1), (&want.0, want.1));
    assert!(
        got.2.abs_diff(want.2) < 2_000,
        "idle {} vs {}",
        got.2,
        want.2
    );
    assert_eq!(groups_of(&mut restored_conn, "{e}empty").len(), 1);

    // Again into the same cluster: refused, nothing changed.
    let (done, _, err) = restore(&file, target);
    assert!(!done && err.contains("already holds"), "{err}");
    assert_eq!(list_tags(&target.http_addr, 1000).len(), tags.len());
}

#[test]
fn a_damaged_backup_or_a_cluster_holding_a_log_is_refused_before_anything_changes() {
    let dir = tempfile::tempdir().unwrap();
    let source = FirnProcess::start(&dir.path().join("source"), &[]);
    let mut conn = redis_at(&source.resp_addr());
    for i in 0..10 {
        let payload = format!("payload {i}");
        run(
            &mut conn,
            &[
                b"FIRN.LOG",
                b"APPEND",
                b"audit",
                b"TAGS",
                b"1",
                b"a",
                payload.as_bytes(),
            ],
        );
        run(&mut conn, &[b"XADD", b"s", b"*", b"n", payload.as_bytes()]);
    }
    run(&mut conn, &[b"XGROUP", b"CREATE", b"s", b"g", b"0"]);
    let file = dir.path().join("good.backup");
    let (done, out, err) = backup(&file, &source.resp_addr(), &source.http_addr);
    assert!(done, "{err}");
    assert!(
        out.contains("10 log records and 10 stream entries"),
        "{out}"
    );
    let good = std::fs::read(&file).unwrap();

    let target = FirnProcess::start(&dir.path().join("target"), &[]);
    let at = |needle: &[u8]| {
        good.windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    let flipped = {
        let mut bytes = good.clone();
        bytes[at(b"payload 7")] = b'P';
        bytes
    };
    let recounted = String::from_utf8_lossy(&good)
        .replace("\"log_records\":10", "\"log_records\":9")
        .into_bytes();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "cut short among the records",
            good[..at(b"payload 5")].to_vec(),
            "not a complete Firn backup",
        ),
        ("a payload byte changed", flipped, "CRC-32C"),
        ("an end line that miscounts", recounted, "end line says"),
    ];
    for (what, bytes, why) in cases {
        let path = dir.path().join("bad.backup");
        std::fs::write(&path, bytes).unwrap();
        let (done, _, err) = restore(&path, &target);
        assert!(!done && err.contains(why), "{what}: {err}");
        assert!(list_tags(&target.http_addr, 100).is_empty(), "{what}");
    }

    // A cluster that holds a log (and no key) is refused too.
    let busy = FirnProcess::start(&dir.path().join("busy"), &[]);
    let mut busy_conn = redis_at(&busy.resp_addr());
    run(
        &mut busy_conn,
        &[b"FIRN.LOG", b"APPEND", b"other", b"TAGS", b"1", b"a", b"x"],
    );
    let (done, _, err) = restore(&file, &busy);
    assert!(
        !done && err.contains("already holds logs or streams"),
        "{err}"
    );
    assert_eq!(list_tags(&busy.http_addr, 100).len(), 1);

    // The good file still loads.
    let (done, out, err) = restore(&file, &target);
    assert!(done, "{err}");
    assert!(
        out.contains("10 log records, 10 stream entries, 1 consumer groups"),
        "{out}"
    );
    assert_eq!(read_tag(&target.http_addr, "audit", "a", None).len(), 10);
    assert_eq!(
        read_tag(&target.http_addr, "s", "s", None),
        read_tag(&source.http_addr, "s", "s", None)
    );
}
