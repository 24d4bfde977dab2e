//! Keyspace durability on one node: `DURABILITY memory` keyspaces live on memory shards,
//! every write's answer names its durability, and a definition that would strand existing
//! keys on shards of another durability is refused and changes nothing.

mod common;

use common::http::{agent, call};
use common::*;
use serde_json::{Value as Json, json};

fn keyspace(prefix: &str, durability: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("FIRN.KEYSPACE");
    cmd.arg("CREATE")
        .arg(prefix)
        .arg("DURABILITY")
        .arg(durability);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_keyspaces_are_served_and_every_write_names_its_durability() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let _: () = keyspace("hot/", "memory")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("hot/a")
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    let got: String = redis::cmd("GET")
        .arg("hot/a")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, "1");

    let http = node.http_addr;
    let put = |key: &str| {
        let (code, body) = call(
            agent().put(&format!("http://{http}/v1/kv/{key}")),
            Some(json!("v")),
        );
        assert_eq!(code, 200, "{body}");
        body
    };
    assert_eq!(put("hot/b")["durability"], "memory");
    assert_eq!(put("cold/b")["durability"], "disk");
    let response = agent()
        .put(&format!("http://{http}/v1/kv/hot/c"))
        .send_string("v")
        .unwrap();
    assert_eq!(response.header("firn-durability"), Some("memory"));

    // The listing names each keyspace's durability, in both front ends.
    let (_, list) = call(agent().get(&format!("http://{http}/v1/keyspaces")), None);
    let durability_of = |prefix: &str| -> Json {
        list["keyspaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["prefix"] == prefix)
            .map(|k| k["durability"].clone())
            .unwrap_or(Json::Null)
    };
    assert_eq!(durability_of("hot/"), "memory");
    assert_eq!(durability_of(""), "disk");

    // The memory keys live on a memory shard, beside the disk shard; CLUSTER SLOTS still
    // shows each slot once.
    let (_, cluster) = call(agent().get(&format!("http://{http}/v1/cluster")), None);
    let durabilities: Vec<&str> = cluster["cluster"]["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["durability"].as_str().unwrap())
        .collect();
    assert_eq!(durabilities, ["disk", "memory"]);
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(slots.len(), 1, "{slots:?}");
    let size: u64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
    assert_eq!(size, 4, "keys of both shards are counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_that_would_strand_existing_keys_is_refused_and_changes_nothing() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let _: () = redis::cmd("SET")
        .arg("s/1")
        .arg("kept")
        .query_async(&mut c)
        .await
        .unwrap();
    let refused: redis::RedisResult<()> = keyspace("s/", "memory").query_async(&mut c).await;
    let e = refused.unwrap_err().to_string();
    assert!(
        e.contains("keys with the prefix 's/' exist under disk"),
        "{e}"
    );
    let list: Vec<redis::Value> = redis::cmd("FIRN.KEYSPACE")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(list.len(), 1, "only the default keyspace: {list:?}");
    let got: String = redis::cmd("GET")
        .arg("s/1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, "kept");

    // A deleted key counts: its history would be left behind.
    let _: () = redis::cmd("SET")
        .arg("u/1")
        .arg("gone")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("u/1")
        .query_async(&mut c)
        .await
        .unwrap();
    let refused: redis::RedisResult<()> = keyspace("u/", "memory").query_async(&mut c).await;
    assert!(
        refused.is_err(),
        "a prefix holding a deleted key changed lanes"
    );

    // An empty prefix may change; then its keys may not change back while they exist.
    let _: () = keyspace("t/", "memory").query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("t/1")
        .arg("m")
        .query_async(&mut c)
        .await
        .unwrap();
    let e = keyspace("t/", "disk")
        .query_async::<()>(&mut c)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("exist under memory"), "{e}");
    let e = redis::cmd("FIRN.KEYSPACE")
        .arg("DROP")
        .arg("t/")
        .query_async::<()>(&mut c)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("exist under memory"), "{e}");
    // A definition that keeps the durability is not checked.
    let _: () = redis::cmd("FIRN.KEYSPACE")
        .arg("CREATE")
        .arg("t/")
        .arg("DURABILITY")
        .arg("memory")
        .arg("MAXVERSIONS")
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let got: String = redis::cmd("GET")
        .arg("t/1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, "m");
}
