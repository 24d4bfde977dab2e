//! Transactions over RESP as Redis clients send them (MULTI, SET…, EXEC), for
//! `bench/txn`: `clients` connections each run transactions of `keys` SETs of 100-byte
//! values back to back until `total` are done, and one JSON line gives the rate and the
//! latencies. `--spread one` puts every key of a transaction in one slot (one shard);
//! `--spread shards` puts key i in shard i mod 3 of a three-shard layout.
//!
//! `cargo run --release -p firn-client --example txn_bench -- ADDR CLIENTS TOTAL KEYS SPREAD`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Hash tags whose slots fall in shards 0, 1 and 2 of three.
fn tags_by_shard() -> [String; 3] {
    let mut found: [Option<String>; 3] = [None, None, None];
    for i in 0.. {
        let tag = format!("t{i}");
        let shard = (firn_model::slot::slot_of(tag.as_bytes()) as usize * 3) / 16384;
        found[shard].get_or_insert(tag);
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    found.map(|t| t.expect("found"))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, clients, total, keys, spread] = args.as_slice() else {
        eprintln!("usage: txn_bench ADDR CLIENTS TOTAL KEYS one|shards");
        std::process::exit(2);
    };
    let (clients, total, keys): (u64, u64, usize) = (
        clients.parse().unwrap(),
        total.parse().unwrap(),
        keys.parse().unwrap(),
    );
    let tags = tags_by_shard();
    let one_shard = spread == "one";
    let next = Arc::new(AtomicU64::new(0));
    let value = vec![b'x'; 100];
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, next, tags, value) =
            (client.clone(), next.clone(), tags.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let config = redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(Duration::from_secs(30)));
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap();
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for k in 0..keys {
                    let tag = if one_shard { &tags[0] } else { &tags[k % 3] };
                    let n = c * 1_000_003 + latencies.len() as u64 * 7 + k as u64;
                    pipe.set(format!("{{{tag}}}:{}", n % 100_000), &value)
                        .ignore();
                }
                let t = Instant::now();
                match pipe.query_async::<()>(&mut conn).await {
                    Ok(()) => latencies.push(t.elapsed()),
                    Err(_) => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{{\"ops\": {:.1}, \"p50\": {:.3}, \"p99\": {:.3}, \"errors\": {errors}}}",
        all.len() as f64 / seconds,
        pct(0.5),
        pct(0.99)
    );
}
