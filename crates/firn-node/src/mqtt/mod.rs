//! The MQTT face (docs/architecture.md, "MQTT"): `firn serve --mqtt-addr`. A third front end
//! over the same core as RESP and HTTP: a topic is a key under `--mqtt-prefix`, a retained
//! PUBLISH a version of it, any other a record of the shared log under its tag; a
//! subscription listens on the cluster's publish/subscribe channels of those keys.

mod alias;
mod clients;
mod connection;
mod exactly_once;
mod frame;
mod queue;
mod registry;
mod session;
mod takeover;
pub mod topic;
mod wills;
mod wire;

use std::sync::Arc;

use firn_model::Key;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

pub use alias::TOPIC_ALIAS_MAX;
pub use connection::{INFLIGHT_MAX, RETAINED_PER_SUBSCRIBE_MAX};
pub use queue::SESSION_QUEUE_MAX;
pub use registry::SESSIONS_MAX;
pub use session::{SESSION_EXPIRY_S_MAX, SESSION_FILTERS_MAX};
pub use takeover::{ClientsHere, MqttTakeOver, REMOTE_TAKEOVER_WAIT};
pub use wills::DELAYED_WILLS_MAX;

use crate::router::Router;
use crate::tls::{ClientListener, ClientTls};

/// The default key prefix of MQTT topics.
pub const PREFIX_DEFAULT: &str = "mqtt/";

/// How the MQTT listener maps topics and what it takes.
pub struct MqttSettings {
    /// Topic `T` is the key `prefix T`.
    pub prefix: String,
    /// The log non-retained messages are appended to: the prefix without its last `/`.
    pub log: Key,
    /// The largest packet taken: a value's limit and room for the topic.
    pub packet_bytes_max: u32,
    pub connections_max: usize,
}

impl MqttSettings {
    pub fn new(
        prefix: &str,
        value_bytes_max: usize,
        connections_max: usize,
    ) -> Result<Self, String> {
        let log_name = prefix.strip_suffix('/').unwrap_or(prefix);
        if log_name.is_empty() {
            return Err(
                "--mqtt-prefix needs a name before its '/' (the log of non-retained messages)"
                    .into(),
            );
        }
        let log = Key::new(bytes::Bytes::copy_from_slice(log_name.as_bytes()))
            .map_err(|e| format!("--mqtt-prefix: {e}"))?;
        Ok(MqttSettings {
            prefix: prefix.to_owned(),
            log,
            packet_bytes_max: u32::try_from(value_bytes_max.saturating_add(64 * 1024))
                .unwrap_or(u32::MAX),
            connections_max,
        })
    }
}

/// Counts an event of the MQTT listener (`firn_mqtt_total{event}`).
fn counted(event: &'static str) {
    counted_by(event, 1);
}

/// Counts `n` events of the MQTT listener.
fn counted_by(event: &'static str, n: u64) {
    metrics::counter!("firn_mqtt_total", "event" => event).increment(n);
}

/// Serves MQTT on `listener` until `stop`: at most `connections_max` connections (one past
/// it is closed at once). `here` keeps the connections by client id and the delayed wills,
/// which peers' takeovers reach too.
pub async fn serve(
    listener: TcpListener,
    router: Arc<Router>,
    settings: Arc<MqttSettings>,
    tls: ClientTls,
    here: Arc<ClientsHere>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(settings.connections_max));
    let sessions = Arc::new(registry::Registry::default());
    let (clients, wills) = (here.clients.clone(), here.wills.clone());
    let following = tokio::spawn(registry::follow(
        router.clone(),
        sessions.clone(),
        stop.clone(),
    ));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    counted("refused_at_limit");
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let (router, settings, sessions, clients, wills, tls, stop) = (
                    router.clone(),
                    settings.clone(),
                    sessions.clone(),
                    clients.clone(),
                    wills.clone(),
                    tls.clone(),
                    stop.clone(),
                );
                connections.spawn(async move {
                    let _slot = slot;
                    if let Some(stream) = tls.accept(tcp, ClientListener::Mqtt).await {
                        let shared = connection::Shared {
                            sessions,
                            clients,
                            wills,
                        };
                        connection::run(stream, router, settings, shared, stop).await;
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    connections.shutdown().await;
    following.abort();
}
