//! Large values beside the log, on one node: a value above the inline limit streams in over
//! HTTP and back out byte for byte, RESP reads and writes it whole, history names it
//! without inlining it, an upload that does not finish leaves no version and no file, and
//! blob files of versions removed (overwrite in a `latest` keyspace, truncation) are swept.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{redis_conn, redis_conn_patient, run};
use firn_node::{NodeConfig, RunningNode};

/// The inline limit of these nodes: anything larger is a blob.
const INLINE_MAX: usize = 64 * 1024;

async fn start(dir: &Path) -> RunningNode {
    let config = NodeConfig {
        resp_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: dir.to_path_buf(),
        limits: firn_model::Limits {
            value_bytes_max: INLINE_MAX,
        },
        blob_sweep_every: Duration::from_millis(200),
        // Long enough that a manifest commits before its sealed file is judged, even on a
        // loaded machine; short enough for the sweep to be seen.
        blob_grace: Duration::from_secs(3),
        ..NodeConfig::default()
    };
    RunningNode::start(config).await.expect("node starts")
}

/// `len` bytes that differ from chunk to chunk (a misplaced chunk shows).
fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(2654435761)
                .wrapping_add(seed as u64) as u8
                ^ (i >> 22) as u8
        })
        .collect()
}

/// Every blob file on the node (sealed or not).
fn blob_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(dir.join("blobs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(f.path());
        }
    }
    out
}

fn wait_for_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let files = blob_files(dir);
        if files.len() == n || Instant::now() > deadline {
            return files;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn http_put(base: &str, path: &str, body: Vec<u8>) -> (u16, serde_json::Value) {
    common::http::put_bytes(format!("{base}{path}"), body).await
}

async fn http_get(base: &str, path: &str) -> (u16, Option<String>, Vec<u8>) {
    let url = format!("{base}{path}");
    tokio::task::spawn_blocking(move || {
        let r = match ureq::get(&url).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                return (code, None, r.into_string().unwrap().into_bytes());
            }
            Err(e) => panic!("{e}"),
        };
        let length = r.header("content-length").map(str::to_string);
        let mut body = Vec::new();
        std::io::copy(&mut r.into_reader(), &mut body).unwrap();
        (200, length, body)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_value_streams_in_and_out_and_is_read_whole_over_resp() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let base = format!("http://{}", node.http_addr);
    // Three chunks: 4 MiB, 4 MiB and a short one.
    let big = value(9 * 1024 * 1024 + 123, 1);
    let (code, written) = http_put(&base, "/v1/kv/video/1", big.clone()).await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["version"], 1);
    let (code, length, body) = http_get(&base, "/v1/kv/video/1").await;
    assert_eq!(code, 200);
    assert_eq!(length.as_deref(), Some(big.len().to_string().as_str()));
    assert!(
        body == big,
        "the value read back differs from the one written"
    );
    assert_eq!(blob_files(dir.path()).len(), 1);

    // History and snapshots name the value and its size, without inlining it.
    let (_, _, history) = http_get(&base, "/v1/history/video/1").await;
    let history: serde_json::Value = serde_json::from_slice(&history).unwrap();
    assert_eq!(history["versions"][0]["large"], true);
    assert_eq!(history["versions"][0]["size"], big.len());
    assert!(history["versions"][0]["value"].is_null());

    // RESP reads it whole, and writes a large value through the same path. Megabytes through a
    // debug build may take longer than the client's default 500 ms to answer.
    let mut c = redis_conn_patient(&node).await;
    let got: Vec<u8> = redis::cmd("GET")
        .arg("video/1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(got == big);
    let small_big = value(INLINE_MAX * 3, 2);
    let _: () = redis::cmd("SET")
        .arg("video/2")
        .arg(&small_big)
        .query_async(&mut c)
        .await
        .unwrap();
    let got: Vec<Vec<u8>> = redis::cmd("MGET")
        .arg("video/1")
        .arg("video/2")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(got[0] == big && got[1] == small_big);
    assert_eq!(blob_files(dir.path()).len(), 2);
    // MSET carries only inline values, and says so.
    let refused = run(
        &mut c,
        &[
            "MSET",
            "video/3",
            std::str::from_utf8(&vec![b'x'; INLINE_MAX + 1]).unwrap(),
        ],
    )
    .await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("write a large value alone")
    );

    // RESP carries values up to its stated limit; one byte more is refused, and nothing is
    // written.
    let too_big = vec![b'z'; firn_model::limits::RESP_VALUE_BYTES_MAX + 1];
    let refused: redis::RedisResult<()> = redis::cmd("SET")
        .arg("video/4")
        .arg(&too_big)
        .query_async(&mut c)
        .await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("the limit is 67108864")
    );
    let absent: Option<Vec<u8>> = redis::cmd("GET")
        .arg("video/4")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(absent, None);
    assert_eq!(blob_files(dir.path()).len(), 2);

    // A conditional put that fails leaves no version and, soon, no file.
    let (code, body) = http_put(
        &base,
        "/v1/kv/video/1?if_version=7",
        value(INLINE_MAX + 1, 3),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(wait_for_files(dir.path(), 2).len(), 2);

    // A value at the inline limit stays inline.
    let (code, _) = http_put(&base, "/v1/kv/small", value(INLINE_MAX, 4)).await;
    assert_eq!(code, 200);
    assert_eq!(blob_files(dir.path()).len(), 2);
    node.shutdown().await;

    // A restart reads the blobs back.
    let node = start(dir.path()).await;
    let base = format!("http://{}", node.http_addr);
    let (_, _, body) = http_get(&base, "/v1/kv/video/1").await;
    assert!(body == big, "the value differs after a restart");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_upload_leaves_nothing_and_removed_versions_lose_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let base = format!("http://{}", node.http_addr);

    // The client goes away halfway through its body.
    let addr = node.http_addr;
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "PUT /v1/kv/cut/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n"
        )
        .unwrap();
        s.write_all(&value(10_000_000, 5)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    })
    .await
    .unwrap();
    let (code, _, _) = http_get(&base, "/v1/kv/cut/1").await;
    assert_eq!(
        code, 404,
        "a version whose upload did not finish is never visible"
    );
    assert_eq!(wait_for_files(dir.path(), 0), Vec::<PathBuf>::new());

    // An overwrite in a `latest` keyspace drops the old version, and the sweep its file.
    let mut c = redis_conn(&node).await;
    run(
        &mut c,
        &["FIRN.KEYSPACE", "CREATE", "last/", "MODE", "latest"],
    )
    .await
    .unwrap();
    let first = value(INLINE_MAX * 2, 6);
    let second = value(INLINE_MAX * 2, 7);
    http_put(&base, "/v1/kv/last/1", first).await;
    let kept_before: Vec<PathBuf> = blob_files(dir.path());
    http_put(&base, "/v1/kv/last/1", second.clone()).await;
    let files = wait_for_files(dir.path(), 1);
    assert_eq!(
        files.len(),
        1,
        "the overwritten version's file was not swept"
    );
    assert!(
        !kept_before.contains(&files[0]),
        "the swept file was the newest one"
    );
    let (_, _, body) = http_get(&base, "/v1/kv/last/1").await;
    assert!(body == second);

    // Truncation in a versioned keyspace: the old versions' files go, the newest stays.
    for seed in 10..13 {
        http_put(&base, "/v1/kv/kept/1", value(INLINE_MAX + 10, seed)).await;
    }
    assert_eq!(blob_files(dir.path()).len(), 4);
    run(&mut c, &["FIRN.TRUNCATE", "KEY", "kept/1", "VERSION", "3"])
        .await
        .unwrap();
    assert_eq!(wait_for_files(dir.path(), 2).len(), 2);
    let (_, _, body) = http_get(&base, "/v1/kv/kept/1?version=3").await;
    assert!(body == value(INLINE_MAX + 10, 12));
    node.shutdown().await;
}
