//! Publish/subscribe across a three-node cluster of real processes: a message published at
//! one node reaches subscribers at the others (one peer call per node, no log), and the
//! publisher hears how many received it, summed over the nodes.

mod common;

use std::time::Duration;

use common::Cluster;
use futures::StreamExt;

/// PUBLISH's answer: the receivers.
async fn publish(c: &mut redis::aio::MultiplexedConnection, channel: &str, message: &str) -> i64 {
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg(message)
        .query_async(c)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_at_one_node_reaches_subscribers_at_the_others() {
    let cluster = Cluster::ready(3, &[]).await;
    let client =
        |i: usize| redis::Client::open(format!("redis://{}/", cluster.resp_addr(i))).unwrap();

    // A channel subscriber at node 2, a pattern subscriber at node 3.
    let mut at_2 = client(1).get_async_pubsub().await.unwrap();
    at_2.subscribe("alerts").await.unwrap();
    let mut at_3 = client(2).get_async_pubsub().await.unwrap();
    at_3.psubscribe("alert*").await.unwrap();

    let mut publisher = client(0).get_multiplexed_async_connection().await.unwrap();
    let receivers = publish(&mut publisher, "alerts", "disk full").await;
    assert_eq!(receivers, 2, "one subscriber at each of the other nodes");

    let next = |m: Option<redis::Msg>| {
        let m = m.expect("the subscription goes on");
        let payload: String = m.get_payload().unwrap();
        (m.get_channel_name().to_string(), payload, m.from_pattern())
    };
    let wait = Duration::from_secs(5);
    let got_2 = tokio::time::timeout(wait, at_2.on_message().next())
        .await
        .unwrap();
    assert_eq!(next(got_2), ("alerts".into(), "disk full".into(), false));
    let got_3 = tokio::time::timeout(wait, at_3.on_message().next())
        .await
        .unwrap();
    assert_eq!(next(got_3), ("alerts".into(), "disk full".into(), true));

    // A channel nobody listens to anywhere.
    let receivers = publish(&mut publisher, "quiet", "x").await;
    assert_eq!(receivers, 0);

    // A node that is down is skipped: the others still receive, within the call's timeout.
    let mut cluster = cluster;
    drop(at_3);
    cluster.kill_9(2);
    let started = std::time::Instant::now();
    let receivers = publish(&mut publisher, "alerts", "still here").await;
    assert_eq!(receivers, 1);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let got_2 = tokio::time::timeout(wait, at_2.on_message().next())
        .await
        .unwrap();
    assert_eq!(next(got_2), ("alerts".into(), "still here".into(), false));
}
