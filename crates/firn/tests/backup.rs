//! `firn backup` and `firn restore`: a backup taken while writers run restores, in a new
//! cluster, to exactly the cut at its time — every key's value and event time as the source
//! read them at T, keys that are not UTF-8 and a large value included — and a restore that
//! would mix with existing keys, or read a damaged file, changes nothing.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use common::{Cluster, FirnProcess, firn_bin};
use serde_json::Value as Json;

/// A key's value and event time.
type Cut = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

fn b64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

fn http(_addr: &str) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

/// Every live key as of `at` (or the newest closed time), read page by page at one time.
fn read_cut(addr: &str, at: Option<&str>) -> Cut {
    let mut cut = Cut::new();
    let mut at = at.map(str::to_string);
    let mut cursor: Option<String> = None;
    loop {
        let mut request = http(addr)
            .get(&format!("http://{addr}/v1/snapshot"))
            .query("prefix", "")
            .query("limit", "100");
        if let Some(t) = &at {
            request = request.query("at", t);
        }
        if let Some(c) = &cursor {
            request = request.query("cursor", c);
        }
        let page: Json = request.call().unwrap().into_json().unwrap();
        at = Some(page["at"].as_str().unwrap().to_string());
        for entry in page["keys"].as_array().unwrap() {
            let key = match entry["key"].as_str() {
                Some(k) => k.as_bytes().to_vec(),
                None => b64(entry["key_base64"].as_str().unwrap()),
            };
            let value = if entry["large"].as_bool() == Some(true) {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(
                    &mut http(addr)
                        .get(&format!(
                            "http://{addr}/v1/kv/{}",
                            std::str::from_utf8(&key).unwrap()
                        ))
                        .query("version", &entry["version"].to_string())
                        .call()
                        .unwrap()
                        .into_reader(),
                    &mut bytes,
                )
                .unwrap();
                bytes
            } else {
                match entry["value"].as_str() {
                    Some(v) => v.as_bytes().to_vec(),
                    None => b64(entry["value_base64"].as_str().unwrap()),
                }
            };
            cut.insert(key, (value, entry["event_time"].as_u64()));
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            return cut;
        }
    }
}

fn firn(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(firn_bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn redis_at(addr: &str) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// `FIRN.KEYSPACE CREATE args…`, again while a fresh cluster's meta group is still electing
/// (TRYAGAIN, CLUSTERDOWN), for at most 20 s.
fn create_keyspace(conn: &mut redis::Connection, args: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r: redis::RedisResult<String> = redis::cmd("FIRN.KEYSPACE")
            .arg("CREATE")
            .arg(args)
            .query(conn);
        match r {
            Ok(ok) => return assert_eq!(ok, "OK"),
            Err(e)
                if ["TRYAGAIN", "CLUSTERDOWN"].contains(&e.code().unwrap_or(""))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("FIRN.KEYSPACE CREATE {args:?}: {e}"),
        }
    }
}

fn keyspaces(addr: &str) -> Vec<Json> {
    let list: Json = http(addr)
        .get(&format!("http://{addr}/v1/keyspaces"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    list["keyspaces"].as_array().unwrap().clone()
}

fn backup(file: &Path, resp_addr: &str, http_addr: &str) -> (bool, String, String) {
    firn(&[
        "backup",
        file.to_str().unwrap(),
        "--addr",
        resp_addr,
        "--http-addr",
        http_addr,
    ])
}

fn restore(file: &Path, node: &FirnProcess) -> (bool, String, String) {
    firn(&[
        "restore",
        file.to_str().unwrap(),
        "--addr",
        &node.resp_addr(),
        "--http-addr",
        &node.http_addr,
    ])
}

#[test]
fn a_backup_taken_under_writes_restores_to_exactly_the_cut_at_its_time() {
    let source = Cluster::start(3, &[]);
    source.wait_for_leaders(0, None);
    let (resp, http_addr) = (source.resp_addr(0), source.http_addr(0));
    let mut conn = redis_at(&resp);
    let ok = |r: redis::RedisResult<String>| assert_eq!(r.unwrap(), "OK");
    // Keyspaces are part of the backup.
    create_keyspace(&mut conn, &["cfg:", "MODE", "latest"]);
    create_keyspace(&mut conn, &["m:", "DURABILITY", "memory"]);
    // A key and a value that are not UTF-8, an event time, a memory keyspace's key, and a
    // value stored beside the log (above the 1 MiB inline limit).
    let binary_key: &[u8] = b"bin/\xff\x00";
    let binary_value: &[u8] = b"\x00\x9f\xff";
    ok(redis::cmd("SET")
        .arg(binary_key)
        .arg(binary_value)
        .query(&mut conn));
    let _: redis::Value = redis::cmd("FIRN.PUT")
        .arg(&["sensor/7", "21.5", "EVENTTIME", "2026-11-22T10:00:00Z"])
        .query(&mut conn)
        .unwrap();
    ok(redis::cmd("SET").arg(&["cfg:mode", "eco"]).query(&mut conn));
    ok(redis::cmd("SET").arg(&["m:hot", "1"]).query(&mut conn));
    let large: Vec<u8> = (0..(5u32 << 19)).map(|i| (i * 7 % 251) as u8).collect();
    http(&http_addr)
        .put(&format!("http://{http_addr}/v1/kv/big/1"))
        .send_bytes(&large)
        .unwrap();

    // Writers overwrite and delete while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, written) = (stop.clone(), written.clone());
            let addr = source.resp_addr(w + 1);
            std::thread::spawn(move || {
                let mut conn = redis_at(&addr);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 20_000 {
                    let key = format!("w{w}/{}", n % 40);
                    let r: redis::RedisResult<redis::Value> = if n % 7 == 6 {
                        redis::cmd("DEL").arg(&key).query(&mut conn)
                    } else {
                        redis::cmd("SET").arg(&key).arg(n).query(&mut conn)
                    };
                    if r.is_ok() {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    assert!(common::wait_until(Duration::from_secs(20), || {
        written.load(Ordering::Relaxed) > 100
    }));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("firn.backup");
    let (done, out, err) = backup(&file, &resp, &http_addr);
    assert!(done, "backup failed: {err}");
    let before = written.load(Ordering::Relaxed);
    assert!(common::wait_until(Duration::from_secs(20), || {
        written.load(Ordering::Relaxed) > before + 50
    }));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    // "backed up N keys (B bytes of values) at STAMP (TIME) to FILE"
    let at = out.split(" at ").nth(1).unwrap().split(' ').next().unwrap();
    let expected = read_cut(&http_addr, Some(at));
    assert!(expected.contains_key(binary_key) && expected.contains_key(b"big/1".as_slice()));
    assert_ne!(
        read_cut(&http_addr, None),
        expected,
        "the writers went on after the cut"
    );
    assert!(
        out.starts_with(&format!("backed up {} keys", expected.len())),
        "{out}"
    );

    // Into a new cluster: exactly the cut, with the keyspaces.
    let target_dir = tempfile::tempdir().unwrap();
    let target = FirnProcess::start(target_dir.path(), &[]);
    let (done, out, err) = restore(&file, &target);
    assert!(done, "restore failed: {err}");
    assert!(
        out.starts_with(&format!("restored {} keys", expected.len())),
        "{out}"
    );
    // A snapshot without a time reads at the newest time every shard has closed, which
    // trails the last put by up to the close interval.
    let mut restored = Cut::new();
    common::wait_until(Duration::from_secs(10), || {
        restored = read_cut(&target.http_addr, None);
        restored.len() == expected.len()
    });
    assert_eq!(restored.len(), expected.len());
    for (key, want) in &expected {
        assert_eq!(
            restored.get(key),
            Some(want),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    assert_eq!(restored[b"big/1".as_slice()].0, large);
    assert_eq!(
        restored[b"sensor/7".as_slice()].1,
        Some(1_795_341_600_000_000)
    );
    let prefixes = |list: Vec<Json>| -> Vec<(String, String, String)> {
        list.iter()
            .map(|k| {
                (
                    k["prefix"].as_str().unwrap().to_string(),
                    k["mode"].as_str().unwrap().to_string(),
                    k["durability"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        prefixes(keyspaces(&target.http_addr)),
        prefixes(keyspaces(&http_addr))
    );

    // Again into the same cluster: refused, nothing changed.
    let (done, _, err) = restore(&file, &target);
    assert!(!done && err.contains("already holds keys"), "{err}");
    assert_eq!(read_cut(&target.http_addr, None), restored);

    // A backup never overwrites a file.
    let (done, _, err) = backup(&file, &resp, &http_addr);
    assert!(!done && err.contains("exists"), "{err}");
}

#[test]
fn a_damaged_or_cut_short_backup_is_refused_before_anything_changes() {
    let dir = tempfile::tempdir().unwrap();
    let source = FirnProcess::start(&dir.path().join("source"), &[]);
    let mut conn = redis_at(&source.resp_addr());
    create_keyspace(&mut conn, &["cfg:", "MODE", "latest"]);
    for i in 0..20 {
        let _: String = redis::cmd("SET")
            .arg(format!("k/{i}"))
            .arg(format!("value {i}"))
            .query(&mut conn)
            .unwrap();
    }
    let file = dir.path().join("good.backup");
    let (done, _, err) = backup(&file, &source.resp_addr(), &source.http_addr);
    assert!(done, "{err}");
    let good = std::fs::read(&file).unwrap();
    // A backup that fails midway (here: no HTTP listener) leaves no file behind.
    let never = dir.path().join("never.backup");
    let (done, _, err) = backup(&never, &source.resp_addr(), "127.0.0.1:1");
    assert!(!done, "{err}");
    assert!(!never.exists() && !dir.path().join("never.backup.partial").exists());

    let target = FirnProcess::start(&dir.path().join("target"), &[]);
    let flipped = {
        let mut bytes = good.clone();
        let at = bytes.windows(7).position(|w| w == b"value 9").unwrap();
        bytes[at] = b'V';
        bytes
    };
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "cut short",
            good[..good.len() - 30].to_vec(),
            "not a complete Firn backup",
        ),
        ("a byte changed", flipped, "CRC-32C"),
        (
            "not a backup",
            b"{\"hello\": 1}\n".to_vec(),
            "not a Firn backup",
        ),
    ];
    for (what, bytes, why) in cases {
        let path = dir.path().join("bad.backup");
        std::fs::write(&path, bytes).unwrap();
        let (done, _, err) = restore(&path, &target);
        assert!(!done && err.contains(why), "{what}: {err}");
        assert!(read_cut(&target.http_addr, None).is_empty(), "{what}");
        assert!(
            keyspaces(&target.http_addr)
                .iter()
                .all(|k| k["prefix"] != "cfg:"),
            "{what}"
        );
    }
    // The good file still loads.
    let (done, _, err) = restore(&file, &target);
    assert!(done, "{err}");
    assert!(common::wait_until(Duration::from_secs(10), || {
        read_cut(&target.http_addr, None).len() == 20
    }));
}
