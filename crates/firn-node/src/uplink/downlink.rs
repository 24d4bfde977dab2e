//! A site's downlink (`--downlink`): the hub's keys `sites/NAME/P…` are the desired state of
//! the site's keys `P…`, for each downlink prefix P. Desired state, not a log: once a second
//! the node that leads the site's first shard reads the hub's keys under the prefix and makes
//! the site's the same — a key whose value differs is written, a key the hub no longer has
//! is deleted — so the site converges on the hub's newest values whenever the link is up,
//! and versions the hub went through while the link was down are not replayed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{CallContext, Key, KvWrite, PutRequest, ReadConsistency, TwinSide};
use tokio::sync::watch;

use super::UplinkConfig;
use super::hub::Hub;
use crate::router::Router;

/// How often the site's keys are made like the hub's.
const SYNC_EVERY: Duration = Duration::from_secs(1);
/// Keys a downlink prefix holds at most; past it the rest are left as they are (logged).
pub const DOWNLINK_KEYS_MAX: usize = 10_000;

/// Keeps the site's downlink prefixes like the hub's, until `stop`.
pub async fn run(router: Arc<Router>, config: Arc<UplinkConfig>, mut stop: watch::Receiver<bool>) {
    let mut hub: Option<Hub> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SYNC_EVERY) => {}
            _ = stop.changed() => return,
        }
        if !leads_first_shard(&router) {
            hub = None;
            continue;
        }
        if hub.is_none() {
            let connected = match Hub::connect(&config).await {
                Ok(mut h) => super::identity::check(&router, &config, &mut h)
                    .await
                    .map(|()| h),
                Err(e) => Err(e),
            };
            match connected {
                Ok(h) => hub = Some(h),
                Err(e) => {
                    tracing::debug!("downlink from the hub: {e}");
                    continue;
                }
            }
        }
        let h = hub.as_mut().expect("connected above");
        for (prefix, only) in config.downlink_prefixes() {
            if let Err(e) = sync(&router, &config, h, &prefix, only).await {
                tracing::debug!("downlink from the hub: {e}");
                metrics::counter!("firn_downlink_errors_total").increment(1);
                hub = None;
                break;
            }
        }
    }
}

/// Whether this node leads the site's first shard (one node of the site runs the downlink).
fn leads_first_shard(router: &Router) -> bool {
    let kernel = router.kernel();
    let Some(first) = kernel.layout().shard_ids().min() else {
        return false;
    };
    kernel
        .replicas()
        .get(first)
        .is_some_and(|r| r.leader() == Some(kernel.node_id()))
}

/// Makes the site's keys under `prefix` the hub's `sites/NAME/prefix…` — with `only`, just
/// the twin documents of that side (a twin prefix's desired documents: its reported ones
/// go up).
async fn sync(
    router: &Router,
    config: &UplinkConfig,
    hub: &mut Hub,
    prefix: &Bytes,
    only: Option<TwinSide>,
) -> Result<(), String> {
    let taken = |key: &[u8]| only.is_none() || TwinSide::of_key(key) == only;
    let hub_prefix = config.hub_key(prefix);
    let wanted: BTreeMap<Vec<u8>, Bytes> = hub
        .values_under(&hub_prefix, DOWNLINK_KEYS_MAX)
        .await?
        .into_iter()
        .filter_map(|(k, v)| Some((config.site_key_of(&k)?.to_vec(), v)))
        .filter(|(k, _)| taken(k))
        .collect();
    let mut have = site_values(router, prefix)
        .await
        .map_err(|e| e.to_string())?;
    have.retain(|k, _| taken(k));
    let ctx = CallContext::default();
    let mut changed = 0u64;
    for (key, value) in &wanted {
        if have.get(key) == Some(value) {
            continue;
        }
        let key = Key::new(Bytes::from(key.clone())).map_err(|e| e.to_string())?;
        let put = KvWrite::Put(PutRequest::new(key, value.clone()));
        router
            .execute(&ctx, put.into())
            .await
            .map_err(|e| e.to_string())?;
        changed += 1;
    }
    let gone: Vec<Key> = have
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .filter_map(|k| Key::new(Bytes::from(k.clone())).ok())
        .collect();
    if !gone.is_empty() {
        changed += gone.len() as u64;
        let delete = KvWrite::Delete { keys: gone };
        router
            .execute(&ctx, delete.into())
            .await
            .map_err(|e| e.to_string())?;
    }
    metrics::counter!("firn_downlink_applied_total").increment(changed);
    Ok(())
}

/// The site's live keys under `prefix` and their values.
async fn site_values(
    router: &Router,
    prefix: &Bytes,
) -> Result<BTreeMap<Vec<u8>, Bytes>, firn_model::FirnError> {
    let keys = router
        .latest_under(
            prefix.clone(),
            DOWNLINK_KEYS_MAX,
            ReadConsistency::Linearizable,
        )
        .await?;
    Ok(keys
        .into_iter()
        .filter_map(|(key, version)| Some((key.as_bytes().to_vec(), version.value?)))
        .collect())
}
