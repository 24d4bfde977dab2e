//! The node's configuration the flags describe, checked before anything starts.

use firn_model::Limits;
use firn_node::NodeConfig;
use firn_node::config::LocalRegionSetting;

use super::args::ServeArgs;
use super::node_id::HOST_ORDINAL;
use super::unix_group;
use crate::config::{Setting, render};

/// The region setting the four `--local-*` flags describe, checked.
pub(super) fn local_region(args: &ServeArgs) -> Result<LocalRegionSetting, String> {
    let config = firn_local::RegionConfig {
        entries: args.local_entries,
        value_bytes_max: args.local_value_bytes,
        ..firn_local::RegionConfig::default()
    };
    config
        .validate()
        .map_err(|e| format!("--local-entries / --local-value-bytes: {e}"))?;
    let readers = match args.local_region_group.as_deref() {
        None => firn_local::RegionReaders::Owner,
        Some(_) if args.local_region.as_deref() == Some("off") => {
            return Err(
                "--local-region-group names the region's readers, but --local-region \
                        is off: there is no region"
                    .into(),
            );
        }
        Some(group) => firn_local::RegionReaders::Group(
            unix_group::group_id(group).map_err(|e| format!("--local-region-group: {e}"))?,
        ),
    };
    Ok(match args.local_region.as_deref() {
        Some("off") => LocalRegionSetting::Off,
        Some(path) => LocalRegionSetting::At(path.into(), config, readers),
        None => LocalRegionSetting::Default(config, readers),
    })
}

/// The node's configuration the settings describe, checked, and the host name its id was
/// taken from (with `--node-id host-ordinal`).
pub(super) fn node_config(args: &ServeArgs) -> Result<(NodeConfig, Option<String>), String> {
    if args.max_value_bytes == 0
        || args.max_value_bytes > firn_model::limits::VALUE_BYTES_MAX_CEILING
    {
        return Err(format!(
            "--max-value-bytes must be 1..={}",
            firn_model::limits::VALUE_BYTES_MAX_CEILING
        ));
    }
    if args.max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    if args.max_output_stall.is_zero() {
        return Err("--max-output-stall must be more than 0".into());
    }
    let (node_id, host) = args.node_id.resolve()?;
    let config = NodeConfig {
        resp_addr: args.resp_addr,
        http_addr: args.http_addr,
        data_dir: args.data_dir.clone(),
        in_memory: args.in_memory,
        limits: Limits {
            value_bytes_max: args.max_value_bytes,
        },
        allow_flushall: args.allow_flushall,
        retention_interval: args.retention_interval,
        snapshot_every_entries: args.snapshot_every,
        snapshot_catchup_entries: args.snapshot_catchup_entries,
        close_time_every: args.close_time_every,
        close_time_idle_every: args.close_time_idle_every,
        max_clock_offset: args.max_clock_offset,
        clock_offset_file: args.clock_offset_file.clone(),
        node_id,
        peer_addr: args.peer_addr,
        peers: firn_node::cluster::layout::parse_peers(&args.peers)
            .map_err(|e| format!("--peers: {e}"))?,
        shards: args.shards,
        replication: args.replication,
        join: args.join.clone(),
        advertise_host: args.advertise_host.clone(),
        resp_connections_max: args.max_connections,
        resp_output_stall_max: args.max_output_stall,
        mqtt_addr: args.mqtt_addr,
        mqtt_prefix: args.mqtt_prefix.clone(),
        uplink: match (&args.site, &args.hub) {
            (Some(site), Some(hub)) => Some(
                firn_node::uplink::UplinkConfig::parse(
                    site,
                    hub,
                    args.uplink.as_deref(),
                    args.downlink.as_deref(),
                )?
                .naming_hub(args.hub_cluster_id.as_deref())?
                .trusting(args.hub_ca.as_deref())?,
            ),
            _ => None,
        },
        log_index_bytes: args.log_index_bytes,
        local_region: local_region(args)?,
        follow_interval: args.follow_interval,
        memory_checkpoint_every: args.memory_checkpoint_every,
        stripes: args.stripes.map(usize::from),
        appends_in_flight: args.appends_in_flight.map(usize::from),
        blob_sweep_every: args.blob_sweep_every,
        blob_grace: args.blob_grace,
        disk_reserve_bytes: args.disk_reserve_bytes,
        users: args
            .users
            .as_deref()
            .map(|path| firn_node::auth::Users::load(path).map(std::sync::Arc::new))
            .transpose()?,
        tls: firn_node::tls::TlsSettings {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
            ca: args.tls_ca.clone(),
            required: args.tls_required,
        },
    };
    // Read and checked here, so that --print-config refuses what a start would.
    config.tls.load()?;
    Ok((config, host))
}

/// `--print-config`: the settings as a config file, the node id resolved.
pub(super) fn print_config(mut settings: Vec<Setting>, node_id: u64, host: Option<String>) {
    if let (Some(host), Some(s)) = (host, settings.iter_mut().find(|s| s.key == "node-id")) {
        s.value = Some(node_id.to_string());
        s.source = format!("{HOST_ORDINAL} of host name {host} ({})", s.source);
    }
    print!("{}", render(&settings));
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::serve::test_cli::{Cli, serve_args};

    #[test]
    fn the_flags_defaults_are_the_node_configs_defaults() {
        if std::env::vars().any(|(k, _)| k.starts_with("FIRN_")) {
            eprintln!("skipped: FIRN_* variables are set in this environment");
            return;
        }
        let (config, host) = node_config(&serve_args(&[])).unwrap();
        assert_eq!(host, None);
        assert_eq!(
            format!("{config:?}"),
            format!("{:?}", NodeConfig::default())
        );
    }

    #[test]
    fn every_setting_is_read_from_its_firn_environment_variable() {
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let env = arg.get_env().and_then(|e| e.to_str());
            if long == "help" || long == "print-config" {
                assert_eq!(env, None, "--{long}");
            } else {
                let want = format!("FIRN_{}", long.to_uppercase().replace('-', "_"));
                assert_eq!(env, Some(want.as_str()), "--{long}");
            }
        }
    }

    #[test]
    fn the_node_id_flag_is_read() {
        assert_eq!(
            serve_args(&["--node-id", "4"]).node_id,
            super::super::node_id::NodeIdSetting::Id(4)
        );
    }

    fn region_readers(args: &[&str]) -> Result<firn_local::RegionReaders, String> {
        match node_config(&serve_args(args))?.0.local_region {
            LocalRegionSetting::Default(_, readers) | LocalRegionSetting::At(_, _, readers) => {
                Ok(readers)
            }
            LocalRegionSetting::Off => Err("off".into()),
        }
    }

    #[test]
    fn the_region_is_the_node_users_alone_unless_a_group_is_named() {
        use firn_local::RegionReaders::{Group, Owner};
        assert_eq!(region_readers(&[]), Ok(Owner));
        assert_eq!(
            region_readers(&["--local-region-group", "4242"]),
            Ok(Group(4242))
        );
        // Every Unix host has the group `root`, id 0.
        assert_eq!(
            region_readers(&["--local-region-group", "root"]),
            Ok(Group(0))
        );
        assert_eq!(
            region_readers(&["--local-region", "/dev/shm/r", "--local-region-group", "0"]),
            Ok(Group(0))
        );
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"local-region-group = \"7\"\n").unwrap();
        assert_eq!(
            region_readers(&["--config", file.path().to_str().unwrap()]),
            Ok(Group(7))
        );
    }

    #[test]
    fn a_region_group_that_is_not_is_refused_before_starting() {
        let e = region_readers(&["--local-region-group", "no-such-group-of-firn"]).unwrap_err();
        assert_eq!(
            e,
            "--local-region-group: no group named 'no-such-group-of-firn' on this host"
        );
        let e = region_readers(&["--local-region-group", "99999999999"]).unwrap_err();
        assert!(e.contains("is no group id"), "{e}");
        let e =
            region_readers(&["--local-region", "off", "--local-region-group", "0"]).unwrap_err();
        assert!(e.contains("--local-region is off"), "{e}");
    }

    #[test]
    fn a_bad_peers_list_is_refused_before_starting() {
        let e = node_config(&serve_args(&["--peers", "1=a:7381,x"])).unwrap_err();
        assert!(e.starts_with("--peers: "), "{e}");
    }
}
