//! `firn serve`: running one node until Ctrl-C or SIGTERM. Its flags are in `args`, the
//! node's configuration they make in `node_config`.

use firn_node::RunningNode;

mod args;
mod node_config;
mod node_id;
mod open_files;
mod unix_group;

pub use args::ServeArgs;
#[cfg(test)]
pub(crate) use args::test_cli;
use node_config::{node_config, print_config};

/// What a node logs unless `RUST_LOG` says otherwise (and then openraft's warnings are
/// thinned: see [`crate::logs::ConsensusWarnings`]).
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,fjall=warn,lsm_tree=warn";

pub async fn serve(args: ServeArgs) -> Result<(), String> {
    // Checked before anything else happens: a bad setting starts nothing.
    let (config, host) = node_config(&args)?;
    if args.print_config {
        print_config(args.settings, config.node_id, host);
        return Ok(());
    }
    // Colours only on a terminal: a log written to a file or a journal stays plain text.
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{Layer as _, filter};
    let explicit = std::env::var_os("RUST_LOG").is_some();
    let env = filter::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| filter::EnvFilter::new(DEFAULT_LOG_FILTER));
    let quiet = crate::logs::ConsensusWarnings::new(!explicit);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::stdout().is_terminal())
                .with_filter(crate::logs::filter(env, quiet)),
        )
        .init();
    firn_node::faults::from_env()?;
    if let Some(host) = host {
        tracing::info!(node = config.node_id, %host, "node id taken from the host name");
    }
    match (&config.users, &args.users) {
        (Some(users), Some(file)) => tracing::info!(
            users = users.len(),
            file = %file.display(),
            "users and permissions on: clients sign in (AUTH, Authorization: Bearer)"
        ),
        _ => tracing::info!("no users file: nothing is checked (see --users)"),
    }
    let mut config = config;
    let listeners = 1 + u64::from(config.mqtt_addr.is_some());
    config.resp_connections_max =
        open_files::fit_connections(config.resp_connections_max, listeners);
    let node = RunningNode::start(config)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "{}",
        banner(
            node.resp_addr.port(),
            &node.http_addr.to_string(),
            &node.peer_addr.to_string(),
            args.tls_cert.is_some(),
            args.users.is_some()
        )
    );
    if let Some(mqtt) = node.mqtt_addr {
        println!(
            "firn MQTT: mosquitto_sub -h {} -p {} -t '#' -v   (topic T is the key {}T)",
            mqtt.ip(),
            mqtt.port(),
            args.mqtt_prefix
        );
    }
    let failed = tokio::select! {
        _ = wait_for_stop_signal() => None,
        why = node.failure() => Some(why),
    };
    node.shutdown().await;
    match failed {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// Ctrl-C (SIGINT) or SIGTERM: stop gracefully. (kill -9 is safe too: nothing acknowledged
/// is lost, it only skips the orderly close.)
async fn wait_for_stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The line a started node prints: how to reach it with redis-cli and curl as it is set up
/// (over TLS, and signed in, when it takes only that).
fn banner(resp_port: u16, http_addr: &str, peer_addr: &str, tls: bool, users: bool) -> String {
    let (redis_tls, curl_tls, scheme) = if tls {
        (" --tls --cacert CA.pem", " --cacert CA.pem", "https")
    } else {
        ("", "", "http")
    };
    let (redis_user, curl_user) = if users {
        (
            " --user USER --pass PASSWORD",
            " -H 'Authorization: Bearer TOKEN'",
        )
    } else {
        ("", "")
    };
    format!(
        "firn serving: redis-cli -p {resp_port}{redis_tls}{redis_user}   |   \
         curl{curl_tls}{curl_user} {scheme}://{http_addr}/v1/kv/hello   |   peers {peer_addr}"
    )
}

#[cfg(test)]
mod banner_tests {
    use super::banner;

    #[test]
    fn the_banner_shows_how_to_reach_the_node_as_it_is_set_up() {
        let plain = banner(7379, "127.0.0.1:7380", "127.0.0.1:7381", false, false);
        assert!(plain.contains("redis-cli -p 7379   |"), "{plain}");
        assert!(
            plain.contains("curl http://127.0.0.1:7380/v1/kv/hello"),
            "{plain}"
        );
        let guarded = banner(7379, "127.0.0.1:7380", "127.0.0.1:7381", true, true);
        assert!(
            guarded.contains("--tls --cacert CA.pem --user USER"),
            "{guarded}"
        );
        assert!(
            guarded.contains("curl --cacert CA.pem -H 'Authorization: Bearer TOKEN' https://"),
            "{guarded}"
        );
    }
}
