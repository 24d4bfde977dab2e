//! Firn against a real `redis-server`: the same commands on one connection to each, the
//! replies compared (see `common/reference.rs`). Each test is a case where an application
//! would notice a difference.

mod common;

use common::reference::{Both, Raw, RedisServer};
use common::*;

/// On a node without users (Redis without a password), AUTH of a password alone is an
/// error, not a sign-in the client would believe in; the default user takes any password;
/// a named user does not exist.
#[tokio::test]
async fn auth_without_users_answers_as_redis_without_a_password() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["AUTH", "secret"], 1),
        (&["AUTH", "default", "secret"], 1),
        (&["AUTH", "alice", "secret"], 1),
        (&["HELLO", "2", "AUTH", "alice", "secret"], 1),
        (&["ACL", "WHOAMI"], 1),
        (&["PING"], 1),
    ])
    .await;
}

/// Unsubscribing from channels a connection never subscribed to answers once per channel,
/// with a count of 0; from nothing, once, with a nil channel.
#[tokio::test]
async fn unsubscribing_from_nothing_answers_as_redis() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let mut both = Both::connect(node.resp_addr.port(), &redis).await;
    both.same(&[
        (&["UNSUBSCRIBE", "a", "b", "c"], 3),
        (&["PUNSUBSCRIBE", "x*", "y*"], 2),
        (&["UNSUBSCRIBE"], 1),
        (&["PUNSUBSCRIBE"], 1),
        (&["PING"], 1),
    ])
    .await;
}

/// PUBSUB NUMPAT counts patterns, not subscriptions: two connections on one pattern are one.
#[tokio::test]
async fn pubsub_numpat_counts_unique_patterns() {
    let (node, redis) = (start_node(false).await, RedisServer::start().await);
    let port = node.resp_addr.port();
    let mut subscribers = Vec::new();
    for _ in 0..2 {
        for p in [port, redis.port] {
            let mut c = Raw::connect(p).await;
            c.send(&["PSUBSCRIBE", "sensors.*", "alarms.*"]).await;
            for _ in 0..2 {
                c.read().await;
            }
            subscribers.push(c);
        }
    }
    let mut both = Both::connect(port, &redis).await;
    both.same(&[(&["PUBSUB", "NUMPAT"], 1)]).await;
}

/// The comparison itself: two connections whose replies differ are reported.
#[tokio::test]
async fn the_comparison_reports_a_difference() {
    let redis = RedisServer::start().await;
    let mut both = Both {
        firn: Raw::connect(redis.port).await,
        redis: Raw::connect(redis.port).await,
    };
    both.firn.send(&["CLIENT", "SETNAME", "one"]).await;
    both.firn.read().await;
    let differ = both.differences(&["CLIENT", "GETNAME"], 1).await;
    assert_eq!(differ.len(), 1, "{differ:?}");
    assert!(differ[0].contains("one"), "{differ:?}");
    assert!(both.differences(&["PING"], 1).await.is_empty());
}
