//! The file view at a time (`/v1/fs/…`) on a node of three shards: keys read as files and
//! prefixes as directories, now and at a past time (one cut for a whole listing), with
//! ETag, Last-Modified, Range (large values included) and HEAD, as curl, a browser or a
//! mount read them; and bad paths, ranges and pages refused with a clear error.

mod common;

use std::io::Read;
use std::net::SocketAddr;

use common::{start_three_shard_node, start_three_shard_node_with};
use firn_node::NodeConfig;

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(30))
        .build()
}

/// Status, headers asked for, and body of a request, whatever the status.
fn call(req: ureq::Request) -> (u16, ureq::Response) {
    match req.call() {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(code, r)) => (code, r),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn body(r: ureq::Response) -> Vec<u8> {
    let mut out = Vec::new();
    r.into_reader().read_to_end(&mut out).unwrap();
    out
}

fn put(base: &str, key: &str, value: &[u8]) {
    let r = agent()
        .put(&format!("{base}/v1/kv/{key}"))
        .send_bytes(value)
        .unwrap();
    assert_eq!(r.status(), 200);
}

fn names(listing: &serde_json::Value) -> Vec<String> {
    listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_read_as_files_and_prefixes_as_directories_now_and_at_a_time() {
    let node = start_three_shard_node().await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        // Keys spread over the three shards.
        for i in 0..12 {
            put(
                &base,
                &format!("cams/cam{i:02}"),
                format!("frame-a-{i}").as_bytes(),
            );
        }
        put(&base, "cams/deep/x/1", b"deep");
        put(&base, "cams/deep/y", b"also deep");
        put(&base, "readme", b"top");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t = format!("{}", firn_model::hlc::system_wall_us());
        std::thread::sleep(std::time::Duration::from_millis(20));
        for i in 0..12 {
            put(
                &base,
                &format!("cams/cam{i:02}"),
                format!("frame-bb-{i}").as_bytes(),
            );
        }
        put(&base, "cams/late", b"after t");

        // A file now: its bytes, its version as ETag, its commit time as Last-Modified.
        let (code, r) = call(a.get(&format!("{base}/v1/fs/cams/cam03")));
        assert_eq!(code, 200);
        assert_eq!(r.header("etag"), Some("\"2\""));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        let modified = httpdate::parse_http_date(r.header("last-modified").unwrap()).unwrap();
        let age = std::time::SystemTime::now()
            .duration_since(modified)
            .unwrap();
        assert!(age < std::time::Duration::from_secs(60), "{age:?}");
        assert_eq!(body(r), b"frame-bb-3");
        // At T: what it held then.
        let (code, r) = call(a.get(&format!("{base}/v1/fs/cams/cam03@{t}")));
        assert_eq!((code, r.header("etag")), (200, Some("\"1\"")));
        assert_eq!(body(r), b"frame-a-3");
        // A key written after T is not there at T.
        let (code, r) = call(a.get(&format!("{base}/v1/fs/cams/late@{t}")));
        assert_eq!(code, 404);
        assert_eq!(
            r.into_json::<serde_json::Value>().unwrap()["error"],
            "NOTFOUND"
        );

        // The directory at T: one cut over the three shards — every file at its first
        // version, the subdirectory once, the later key absent.
        let (code, r) = call(a.get(&format!("{base}/v1/fs/cams/@{t}")));
        assert_eq!(code, 200);
        let cut = r.header("firn-at").unwrap().to_string();
        let at_t: serde_json::Value = r.into_json().unwrap();
        let mut want: Vec<String> = (0..12).map(|i| format!("cam{i:02}")).collect();
        want.push("deep/".into());
        assert_eq!(names(&at_t), want);
        assert_eq!(at_t["at"], cut.as_str());
        for e in at_t["entries"].as_array().unwrap() {
            match e["type"].as_str().unwrap() {
                "file" => {
                    let i: usize = e["name"].as_str().unwrap()[3..].parse().unwrap();
                    let size = format!("frame-a-{i}").len() as u64;
                    assert_eq!(
                        (e["version"].as_u64(), e["size"].as_u64()),
                        (Some(1), Some(size))
                    );
                }
                "directory" => assert_eq!(e["name"], "deep/"),
                other => panic!("{other}"),
            }
        }
        // Now (a path without its '/' that names no key is the directory), and the root.
        let (code, r) = call(a.get(&format!("{base}/v1/fs/cams")));
        assert_eq!(code, 200);
        let now: serde_json::Value = r.into_json().unwrap();
        assert!(names(&now).contains(&"late".to_string()));
        assert!(
            now["entries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["type"] == "directory" || e["version"] == 2 || e["name"] == "late")
        );
        let (_, r) = call(a.get(&format!("{base}/v1/fs/")));
        assert_eq!(names(&r.into_json().unwrap()), ["cams/", "readme"]);
        let (_, r) = call(a.get(&format!("{base}/v1/fs/cams/deep/")));
        assert_eq!(names(&r.into_json().unwrap()), ["x/", "y"]);

        // Pages of a listing, at the first page's cut: the same children, in order, once.
        let mut seen = Vec::new();
        let mut cursor = String::new();
        let mut cuts = std::collections::BTreeSet::new();
        loop {
            let url = format!("{base}/v1/fs/cams/@{t}?limit=5&cursor={cursor}");
            let (code, r) = call(a.get(&url));
            assert_eq!(code, 200, "{url}");
            let page: serde_json::Value = r.into_json().unwrap();
            cuts.insert(page["at"].as_str().unwrap().to_string());
            seen.extend(names(&page));
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
        assert_eq!(seen, names(&at_t));
        assert_eq!(cuts.len(), 1);

        // A browser gets an index whose links carry the cut.
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/"))
                .set("Accept", "text/html,*/*"),
        );
        assert_eq!(code, 200);
        assert!(r.content_type().starts_with("text/html"));
        let cut = r.header("firn-at").unwrap().to_string();
        let page = String::from_utf8(body(r)).unwrap();
        assert!(
            page.contains(&format!("href=\"/v1/fs/cams/cam03@{cut}\"")),
            "{page}"
        );
        assert!(
            page.contains(&format!("href=\"/v1/fs/cams/deep/@{cut}\"")),
            "{page}"
        );

        // Ranges, HEAD and conditional reads of a small value.
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("Range", "bytes=6-7"),
        );
        assert_eq!(
            (code, r.header("content-range")),
            (206, Some("bytes 6-7/10"))
        );
        assert_eq!(body(r), b"bb");
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("Range", "bytes=-3"),
        );
        assert_eq!((code, body(r)), (206, b"b-3".to_vec()));
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("Range", "bytes=10-"),
        );
        assert_eq!((code, r.header("content-range")), (416, Some("bytes */10")));
        let e: serde_json::Value = r.into_json().unwrap();
        assert!(e["message"].as_str().unwrap().contains("10 bytes"), "{e}");
        let (code, r) = call(a.head(&format!("{base}/v1/fs/cams/cam03")));
        assert_eq!(
            (code, r.header("content-length"), r.header("etag")),
            (200, Some("10"), Some("\"2\""))
        );
        assert!(body(r).is_empty());
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("If-None-Match", "\"2\""),
        );
        assert_eq!(code, 304);
        assert!(body(r).is_empty());
        let (code, _) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("If-None-Match", "\"1\""),
        );
        assert_eq!(code, 200);
        // A range of a version the client does not hold answers the whole value.
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/cams/cam03"))
                .set("Range", "bytes=0-1")
                .set("If-Range", "\"1\""),
        );
        assert_eq!((code, body(r)), (200, b"frame-bb-3".to_vec()));

        // Bad input: a clear error, and the connection's next request answered.
        for (url, code, error) in [
            (format!("{base}/v1/fs/cams/cam03@yesterday"), 400, "ERR"),
            (format!("{base}/v1/fs/cams/cam03@"), 400, "ERR"),
            (format!("{base}/v1/fs/cams/?limit=0"), 400, "ERR"),
            (format!("{base}/v1/fs/cams/cam03?cursor=x"), 400, "ERR"),
            (format!("{base}/v1/fs/cams/nothing"), 404, "NOTFOUND"),
            (format!("{base}/v1/fs/nothing/"), 404, "NOTFOUND"),
            (format!("{base}/v1/fs/cams/?colour=red"), 400, "ERR"),
        ] {
            let (got, r) = call(a.get(&url));
            let e: serde_json::Value = r.into_json().unwrap();
            assert_eq!(
                (got, e["error"].as_str().unwrap()),
                (code, error),
                "{url}: {e}"
            );
        }
        let (code, _) = call(a.get(&format!("{base}/v1/fs/readme")));
        assert_eq!(code, 200);
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_value_is_read_by_range_from_the_chunks_that_hold_it() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_path_buf();
    let node = start_three_shard_node_with(|config| NodeConfig {
        in_memory: false,
        data_dir: data_dir.clone(),
        limits: firn_model::Limits {
            value_bytes_max: 64 * 1024,
        },
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..config
    })
    .await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let chunk = firn_model::blob::BLOB_CHUNK_BYTES;
        let value: Vec<u8> = (0..2 * chunk + 1000).map(|i| (i % 251) as u8).collect();
        put(&base, "video/one", &value);
        let a = agent();
        let (code, r) = call(a.get(&format!("{base}/v1/fs/video/one")));
        assert_eq!(
            (code, r.header("content-length").map(str::to_string)),
            (200, Some(value.len().to_string()))
        );
        assert_eq!(body(r), value);
        // Across the first chunk's end, and the last bytes.
        let (start, end) = (chunk - 10, chunk + 10);
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/video/one"))
                .set("Range", &format!("bytes={start}-{end}")),
        );
        assert_eq!(code, 206);
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {start}-{end}/{}", value.len())
        );
        assert_eq!(body(r), &value[start..=end]);
        let (code, r) = call(
            a.get(&format!("{base}/v1/fs/video/one"))
                .set("Range", "bytes=-5"),
        );
        assert_eq!((code, body(r)), (206, value[value.len() - 5..].to_vec()));
        let (code, r) = call(a.head(&format!("{base}/v1/fs/video/one")));
        assert_eq!(
            (code, r.header("content-length").map(str::to_string)),
            (200, Some(value.len().to_string()))
        );
        // The listing gives its size without reading it.
        let (_, r) = call(a.get(&format!("{base}/v1/fs/video/")));
        let listing: serde_json::Value = r.into_json().unwrap();
        assert_eq!(
            listing["entries"][0]["size"].as_u64(),
            Some(value.len() as u64)
        );
    })
    .await
    .unwrap();
    node.shutdown().await;
}
