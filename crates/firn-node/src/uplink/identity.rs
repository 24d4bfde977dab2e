//! Which hub a site sends to: the cluster id the hub answers with (`CLUSTER INFO`'s
//! `firn_cluster_id`). The first hub a site reaches is recorded at the site
//! (`_firn/uplink/hub`); a hub that answers with another id — another cluster now at the
//! address, a hub rebuilt empty — is refused, nothing sent to it or taken from it, until the
//! site is started with `--hub-cluster-id` naming it.

use bytes::Bytes;
use firn_model::{
    CallContext, Key, KvRead, KvWrite, PutRequest, ReadAt, ReadConsistency, Response,
};

use super::UplinkConfig;
use super::hub::Hub;
use crate::router::Router;

/// Where a site keeps the id of the hub it sends to.
const RECORD: &[u8] = b"_firn/uplink/hub";

/// Whether `hub` is the cluster this site sends to; records it on the first contact.
pub async fn check(router: &Router, config: &UplinkConfig, hub: &mut Hub) -> Result<(), String> {
    let answered = hub.cluster_id().await?;
    let key = Key::new(Bytes::from_static(RECORD)).map_err(|e| e.to_string())?;
    let ctx = CallContext::default();
    let get = KvRead::Get {
        key: key.clone(),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    let recorded = match router.execute(&ctx, get.into()).await {
        Ok(a) => match a.response {
            Response::Value(Some(v)) => v.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            _ => None,
        },
        Err(e) => return Err(format!("reading which hub this site sends to: {e}")),
    };
    let expected = config.hub_cluster_id.clone().or(recorded.clone());
    if let Some(expected) = &expected
        && *expected != answered
    {
        let why = format!(
            "the hub at {} is cluster {answered}, not {expected}, the one this site sends to: \
             nothing is sent to it or taken from it (start the site with --hub-cluster-id \
             {answered} if it is the hub now)",
            config.hub_address()
        );
        tracing::warn!("{why}");
        metrics::counter!("firn_uplink_wrong_hub_total").increment(1);
        return Err(why);
    }
    if recorded.as_deref() != Some(answered.as_str()) {
        let put = KvWrite::Put(PutRequest::new(key, Bytes::from(answered)));
        router
            .execute(&ctx, put.into())
            .await
            .map_err(|e| format!("recording which hub this site sends to: {e}"))?;
    }
    Ok(())
}
