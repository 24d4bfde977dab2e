//! Clock offsets, bounded: three real nodes measure each other's clocks on the traffic they
//! exchange; a node whose clock goes off while the cluster runs (a test-only offset file,
//! as a machine whose clock jumped) is found beyond `--max-clock-offset` (500 ms by
//! default), shown so in `/v1/cluster`, `/metrics` and `firn cluster status`, leads no
//! shard while it is, and is back once its clock is; when the clocks disagree so that no
//! node is within the bound of a majority, writes are refused with `CLOCKSKEW` and nothing
//! is stamped, until they agree again.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, firn_bin, wait_until};
use serde_json::Value;

fn skew(c: &Cluster, i: usize, ms: i64) {
    std::fs::write(c.dirs[i].path().join("clock-offset"), ms.to_string()).unwrap();
}

/// Node `node`'s clock as node index `asked` shows it in the cluster view.
fn clock_of(c: &Cluster, asked: usize, node: u64) -> Value {
    c.cluster_json(asked)
        .and_then(|v| {
            v["cluster"]["nodes"]
                .as_array()?
                .iter()
                .find(|n| n["node_id"].as_u64() == Some(node))
                .map(|n| n["clock"].clone())
        })
        .unwrap_or(Value::Null)
}

fn within(c: &Cluster, asked: usize, node: u64) -> Option<bool> {
    clock_of(c, asked, node)["within_bound"].as_bool()
}

fn redis(c: &Cluster, i: usize) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{}/", c.resp_addr(i))).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    con
}

fn set(c: &Cluster, i: usize, key: &str, value: &str) -> Result<(), String> {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<String>(&mut redis(c, i))
        .map(|_| ())
        .map_err(|e| format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")))
}

fn get(c: &Cluster, i: usize, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut redis(c, i)).unwrap()
}

fn cluster_status(c: &Cluster, i: usize) -> String {
    let out = Command::new(firn_bin())
        .args(["cluster", "status", "--addr", &c.resp_addr(i)])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_node_whose_clock_goes_off_is_found_and_stamps_nothing_until_it_is_back() {
    let mut c = Cluster::start(3, &["--clock-offset-file", "clock-offset"]);
    c.wait_for_leaders(0, None);
    set(&c, 0, "before", "1").unwrap();

    // Offsets are measured on the traffic between the nodes: all near zero here.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let peers = clock_of(&c, 0, 1)["peers"].clone();
            peers.as_object().is_some_and(|p| {
                p.len() == 2
                    && p.values()
                        .all(|o| o["offset_us"].as_i64().is_some_and(|us| us.abs() < 50_000))
            })
        }),
        "node 1 measured its peers' clocks: {}",
        clock_of(&c, 0, 1)
    );
    assert_eq!(within(&c, 0, 3), Some(true));

    // Node 3's clock jumps 3 s ahead while the cluster runs.
    skew(&c, 2, 3_000);
    assert!(
        wait_until(Duration::from_secs(10), || within(&c, 2, 3) == Some(false)),
        "node 3 finds its clock beyond the bound: {}",
        clock_of(&c, 2, 3)
    );
    let seen = || clock_of(&c, 0, 1)["peers"]["3"]["offset_us"].as_i64();
    assert!(
        wait_until(Duration::from_secs(5), || {
            seen().is_some_and(|us| (2_700_000..3_300_000).contains(&us))
        }),
        "node 1 sees node 3 about 3 s ahead: {:?} µs",
        seen()
    );
    // Nodes 1 and 2 are still within it (one far peer of two is not a majority).
    assert_eq!(
        (within(&c, 0, 1), within(&c, 0, 2)),
        (Some(true), Some(true))
    );
    assert_eq!(c.counter(2, "firn_clock_beyond_bound"), 1.0);
    assert_eq!(c.counter(0, "firn_clock_beyond_bound"), 0.0);
    // A step beyond the bound is taken at once, and counted.
    assert!(c.counter(2, "firn_clock_steps_total") >= 1.0);
    // It hands its leaderships away and takes none back.
    c.wait_for_leaders(0, Some(3));
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        c.leaders(0).iter().all(|l| l.is_some() && *l != Some(3)),
        "{:?}",
        c.leaders(0)
    );
    let status = cluster_status(&c, 0);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("3 ") && l.contains("BEYOND")),
        "{status}"
    );
    assert!(status.contains("clock offsets (bound 500 ms)"), "{status}");
    // Writes sent to it still work: its leaders, on good clocks, stamp them.
    let wrote = Instant::now();
    set(&c, 2, "through-3", "ok").unwrap();
    assert_eq!(get(&c, 0, "through-3").as_deref(), Some("ok"));
    assert!(wrote.elapsed() < Duration::from_secs(5));

    // Back in time: back within the bound.
    skew(&c, 2, 0);
    assert!(
        wait_until(Duration::from_secs(10), || within(&c, 2, 3) == Some(true)),
        "node 3 is back within the bound: {}",
        clock_of(&c, 2, 3)
    );
    assert!(wait_until(Duration::from_secs(5), || c
        .counter(2, "firn_clock_beyond_bound")
        == 0.0));

    // Clocks that disagree so that nobody is within the bound of a majority: node 2 three
    // seconds ahead, node 3 three behind. Every node is then beyond; writes are refused,
    // and nothing is written.
    skew(&c, 1, 3_000);
    skew(&c, 2, -3_000);
    let mut refused = String::new();
    assert!(
        wait_until(Duration::from_secs(15), || {
            match set(&c, 0, "before", "2") {
                Err(e) if e.starts_with("CLOCKSKEW") => {
                    refused = e;
                    true
                }
                _ => false,
            }
        }),
        "writes refused while the clocks disagree"
    );
    assert!(refused.contains("--max-clock-offset"), "{refused}");
    for (i, node) in [(0, 1), (1, 2), (2, 3)] {
        assert!(
            wait_until(Duration::from_secs(5), || within(&c, i, node)
                == Some(false)),
            "node {node} finds itself beyond: {}",
            clock_of(&c, i, node)
        );
    }
    let refused_value = get(&c, 0, "before");
    for _ in 0..3 {
        assert!(
            set(&c, 1, "during", "x")
                .unwrap_err()
                .starts_with("CLOCKSKEW")
        );
    }
    assert_eq!(get(&c, 0, "during"), None);

    // Clocks that agree again: writes are taken again.
    skew(&c, 1, 0);
    skew(&c, 2, 0);
    assert!(
        wait_until(Duration::from_secs(15), || set(&c, 0, "after", "1").is_ok()),
        "writes taken again once the clocks agree"
    );
    assert_eq!(get(&c, 0, "after").as_deref(), Some("1"));
    assert!(matches!(refused_value.as_deref(), Some("1") | Some("2")));
    c.stop(0);
}

#[test]
fn a_step_within_the_bound_is_slewed_in_not_taken() {
    let c = Cluster::start(3, &["--clock-offset-file", "clock-offset"]);
    c.wait_for_leaders(0, None);
    let seen = || clock_of(&c, 0, 1)["peers"]["3"]["offset_us"].as_i64();
    assert!(
        wait_until(Duration::from_secs(10), || seen()
            .is_some_and(|us| us.abs() < 20_000)),
        "node 1 measured node 3: {:?}",
        seen()
    );
    let steps_before = c.counter(2, "firn_clock_steps_total");
    // Node 3's system clock is set 300 ms ahead: within the bound, so Firn takes it in at
    // 0.2 ms a second. Two seconds on, node 3's clock is still within a few milliseconds
    // of the others' (a clock that took the step would be 300 ms ahead), and no write was
    // refused for it.
    skew(&c, 2, 300);
    let until = Instant::now() + Duration::from_secs(2);
    let mut i = 0;
    while Instant::now() < until {
        set(&c, 2, &format!("slew-{i}"), "v").unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let us = seen().unwrap();
    assert!(
        (-20_000..20_000).contains(&us),
        "node 3 is {us} µs from node 1 two seconds after a 300 ms step"
    );
    assert_eq!(within(&c, 0, 3), Some(true));
    assert_eq!(c.counter(2, "firn_clock_steps_total"), steps_before);
    assert_eq!(get(&c, 0, &format!("slew-{}", i - 1)).as_deref(), Some("v"));
}
