//! Every persistent session's filters, as this node knows them: what a committed PUBLISH is
//! matched against to find the queues it goes to. Learnt from a scan of the session records
//! and a watch of them (so a session made on another node is known here once its record's
//! version reaches this node's watch), and at once for a session this node writes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use firn_model::{KeyRange, ReadConsistency, WatchFrom, WatchRequest};
use tokio::sync::watch;

use super::session::{SESSION_PREFIX, SessionRecord, client_of};
use super::topic::matches;
use crate::router::Router;

/// Persistent sessions a node keeps filters of, at most; past it a new session is refused
/// at its CONNECT (`Quota exceeded`, 5.0; `Server unavailable`, 3.1.1).
pub const SESSIONS_MAX: usize = 100_000;
/// How long the registry waits before following again after its watch ended.
const REFOLLOW_PAUSE: Duration = Duration::from_secs(1);

/// Client id → its persistent session's filters.
#[derive(Default)]
pub struct Registry {
    sessions: RwLock<HashMap<String, Vec<(String, u8)>>>,
}

impl Registry {
    /// The clients whose sessions have a filter that matches `topic`.
    pub fn matching(&self, topic: &str) -> Vec<String> {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        sessions
            .iter()
            .filter(|(_, filters)| filters.iter().any(|(f, _)| matches(f, topic)))
            .map(|(client, _)| client.clone())
            .collect()
    }

    /// Whether `client` has a session, as far as this node knows.
    pub fn knows(&self, client: &str) -> bool {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        sessions.contains_key(client)
    }

    /// Whether there is room for one more session.
    pub fn has_room(&self, client: &str) -> bool {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        sessions.contains_key(client) || sessions.len() < SESSIONS_MAX
    }

    /// `client`'s session is now `record` (`None`: it has none).
    pub fn set(&self, client: &str, record: Option<&SessionRecord>) {
        let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        match record {
            Some(r) => {
                sessions.insert(client.to_owned(), r.filters.clone());
            }
            None => {
                sessions.remove(client);
            }
        }
        counted_sessions(sessions.len());
    }

    fn replace(&self, all: HashMap<String, Vec<(String, u8)>>) {
        counted_sessions(all.len());
        *self.sessions.write().unwrap_or_else(|e| e.into_inner()) = all;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// The persistent sessions this node knows of (`firn_mqtt_persistent_sessions`).
fn counted_sessions(n: usize) {
    metrics::gauge!("firn_mqtt_persistent_sessions").set(n as f64);
}

/// Keeps `registry` up to date until `stop`: watch the session records, read them all, then
/// take each new version; when the watch ends (its backlog overflowed, a shard moved), start
/// again.
pub async fn follow(router: Arc<Router>, registry: Arc<Registry>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            ended = follow_once(&router, &registry) => {
                tracing::debug!("the MQTT session registry's watch ended: {ended}");
            }
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(REFOLLOW_PAUSE) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One watch of the records, from a full read on; returns why it ended.
async fn follow_once(router: &Router, registry: &Registry) -> String {
    let prefix = Bytes::from_static(SESSION_PREFIX);
    // Watch first, then read: a version committed in between is in both, and taking it
    // twice (in each key's commit order) ends at the same state.
    let request = WatchRequest {
        target: KeyRange::Prefix(prefix.clone()),
        from: WatchFrom::Now,
    };
    let mut events = match router.watches().watch(request).await {
        Ok(w) => w,
        Err(e) => return e.to_string(),
    };
    match read_all(router, prefix).await {
        Ok(all) => registry.replace(all),
        Err(e) => return e.to_string(),
    }
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => return e.to_string(),
        };
        let Some(client) = client_of(event.key.as_bytes()) else {
            continue;
        };
        let record = match event.info.deleted {
            true => None,
            false => event.info.value.as_deref().and_then(SessionRecord::decode),
        };
        registry.set(&client, record.as_ref());
    }
    "the watch closed".into()
}

async fn read_all(
    router: &Router,
    prefix: Bytes,
) -> Result<HashMap<String, Vec<(String, u8)>>, firn_model::FirnError> {
    let records = router
        .latest_under(prefix, SESSIONS_MAX, ReadConsistency::Linearizable)
        .await?;
    Ok(records
        .into_iter()
        .filter_map(|(key, version)| {
            let client = client_of(key.as_bytes())?;
            let record = version.value.as_deref().and_then(SessionRecord::decode)?;
            Some((client, record.filters))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_goes_to_the_sessions_whose_filters_match_it() {
        let registry = Registry::default();
        let record = |filters: &[&str]| SessionRecord {
            user: None,
            filters: filters.iter().map(|f| (f.to_string(), 1)).collect(),
            expiry_s: 60,
            epoch: 0,
        };
        registry.set("a", Some(&record(&["plant/+/temp"])));
        registry.set("b", Some(&record(&["plant/#", "other"])));
        registry.set("c", Some(&record(&["elsewhere/#"])));
        let mut got = registry.matching("plant/7/temp");
        got.sort();
        assert_eq!(got, ["a", "b"]);
        registry.set("b", None);
        assert_eq!(registry.matching("plant/7/temp"), ["a"]);
        assert_eq!(registry.len(), 2);
    }
}
