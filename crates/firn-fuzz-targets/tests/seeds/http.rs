use crate::{seed, seeds};

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_http_seeds() {
    let queries: &[(&str, &str)] = &[
        ("latest", ""),
        ("version", "version=3"),
        (
            "as-of",
            "as_of=2026-11-30T01:02:03.000004Z&consistency=local",
        ),
        ("as-of-exact", "as_of=1790000000000000-2"),
        ("event-time", "event_time=1790000000000000&complete=true"),
        (
            "bitemporal",
            "event_time=2026-11-29T00:00:00Z&as_of=1790000000000000",
        ),
        (
            "scan",
            "prefix=user%2F&limit=100&cursor=user%2F42&consistency=lease",
        ),
        ("scan-b64", "limit=10&cursor=b64%3AAP8A"),
        (
            "mget",
            "key=a&key=b%20c&key=%E2%82%AC&consistency=linearizable",
        ),
        (
            "log-range",
            "start=1790000000000-0&end=1790000000001&limit=50",
        ),
        ("log-block", "start=1790000000000&block_ms=5000&ttl=90s"),
        ("duration", "max_age=7d&ttl=3600"),
    ];
    for (name, query) in queries {
        seed("http_params", name, query.as_bytes());
    }
    let bodies: &[(&str, &str)] = &[
        (
            "doc-example",
            r#"{"compare": [{"key": "a", "version": 3}, {"key": "b", "exists": false},
 {"key": "c", "value": "x", "op": "!="}, {"key": "d", "stamp": "1790000000000000-1", "op": "<="}],
 "then": [{"op": "put", "key": "a", "value": "1"}, {"op": "delete", "key": "b"},
 {"op": "get", "key": "c"}, {"op": "incr", "key": "n", "by": 2},
 {"op": "append", "log": "events", "records": [{"tags": ["paid"], "value": "a"}]}],
 "else": [{"op": "get", "key": "a"}]}"#,
        ),
        ("empty", "{}"),
        (
            "cas",
            r#"{"compare":[{"key":"lock","version":0}],"then":[{"op":"put","key":"lock","value":"me","if_version":0}]}"#,
        ),
        (
            "base64",
            r#"{"compare":[{"key":"k","value_base64":"AP8=","op":">="}],"then":[{"op":"put","key":"k","value_base64":"AQI="}],"else":[{"op":"incr","key":"misses"}]}"#,
        ),
        (
            "stamp-rfc3339",
            r#"{"compare":[{"key":"k","stamp":"2026-11-30T01:00:00Z","op":"<"}],"then":[{"op":"delete","key":"k"}]}"#,
        ),
    ];
    for (name, body) in bodies {
        seed("http_txn", name, body.as_bytes());
    }
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_http_headers_seeds() {
    let requests: &[(&str, &str)] = &[
        ("plain", "cams/cam3\nAccept: */*"),
        (
            "file-range",
            "cams/cam3@2026-11-29T10:02:07.5Z\nRange: bytes=2-5\nIf-Range: \"7\"\nAccept: application/octet-stream",
        ),
        (
            "conditional",
            "docs/readme\nIf-None-Match: \"6\", W/\"7\"\nRange: bytes=-3",
        ),
        (
            "directory",
            "cams/@1790000000000000-3\nAccept: text/html,application/xhtml+xml,application/json;q=0.9",
        ),
        (
            "write-once",
            "orders/17\nIdempotency-Key: order-17-try\nFirn-Producer: checkout\nFirn-After: 1790000000000000-3\nAuthorization: Bearer s3cret-token",
        ),
        (
            "key-with-at",
            "mail/a@b.example@2026-11-29T10:02:07Z\nRange: bytes=0-",
        ),
    ];
    for (name, text) in requests {
        seed("http_headers", name, text.as_bytes());
    }
}

#[test]
fn the_transaction_seeds_are_read() {
    for (name, bytes) in seeds("http_txn") {
        let body: firn_node::http::txn::TxnBody = serde_json::from_slice(&bytes).unwrap();
        body.into_write()
            .unwrap_or_else(|e| panic!("http_txn/{name}: {e}"));
    }
}

#[test]
fn the_header_seeds_name_a_file() {
    for (name, bytes) in seeds("http_headers") {
        let text = std::str::from_utf8(&bytes).unwrap();
        let segment = text.lines().next().unwrap();
        let path = firn_node::http::fs::path::FsPath::parse(segment)
            .unwrap_or_else(|e| panic!("http_headers/{name}: {e}"));
        assert_eq!(
            path.at.is_some(),
            segment.contains('@'),
            "http_headers/{name}"
        );
    }
}
