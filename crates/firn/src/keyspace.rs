//! `firn keyspace create|list|drop`: keyspace definitions, over RESP (`FIRN.KEYSPACE`).

use std::time::Duration;

use clap::Subcommand;
use firn_model::KeyspaceSpec;

use crate::{Target, connect, show};

#[derive(Subcommand)]
pub enum KeyspaceAction {
    /// Register (or update) a keyspace.
    Create {
        /// The keys it holds: every key starting with this prefix (longest prefix wins).
        prefix: String,
        /// versioned (every version kept) | latest (the newest only) | notify (none
        /// stored: watches and local reads only)
        #[arg(long, default_value = "versioned")]
        mode: String,
        /// Versions kept per key; older ones are dropped as new ones come (default: all).
        #[arg(long)]
        max_versions: Option<u64>,
        /// Drop versions older than this (seconds, or 90s, 15m, 7d; default: kept).
        #[arg(long)]
        max_age: Option<String>,
        /// The keys' default TTL (seconds, or 90s, 15m, 7d; default: none): a write without an
        /// expiry of its own ends this long after it.
        #[arg(long)]
        ttl: Option<String>,
        /// disk (fsync'd on a majority before the answer) | memory (held in a majority's
        /// memory, fsync'd at the next checkpoint)
        #[arg(long, default_value = "disk")]
        durability: String,
        /// Publish the newest values in each node's shared-memory region (local reads).
        #[arg(long)]
        local: bool,
        /// on | off | a node id: shard leaders follow the keyspace's clients, or stay pinned.
        #[arg(long, default_value = "off")]
        follow: String,
        #[command(flatten)]
        target: Target,
    },
    /// The keyspaces, with their settings.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Forget a keyspace's settings (its keys stay, under the next longest prefix's).
    Drop {
        /// The keyspace's prefix.
        prefix: String,
        #[command(flatten)]
        target: Target,
    },
}

pub async fn run_keyspace(action: KeyspaceAction) -> Result<(), String> {
    match action {
        KeyspaceAction::Create {
            prefix,
            mode,
            max_versions,
            max_age,
            ttl,
            durability,
            local,
            follow,
            target,
        } => {
            let spec = KeyspaceSpec {
                prefix,
                mode: mode
                    .parse()
                    .map_err(|e: firn_model::FirnError| e.to_string())?,
                max_versions,
                max_age_us: max_age
                    .map(|a| firn_model::time::parse_duration_us(&a))
                    .transpose()
                    .map_err(|e| e.to_string())?,
                durability: durability
                    .parse()
                    .map_err(|e: firn_model::FirnError| e.to_string())?,
                ttl_ms: ttl
                    .map(|t| firn_model::time::parse_duration_us(&t).map(|us| us / 1_000))
                    .transpose()
                    .map_err(|e| e.to_string())?,
            };
            let placement = firn_model::KeyspacePlacement {
                local,
                follow: follow
                    .parse()
                    .map_err(|e: firn_model::FirnError| e.to_string())?,
            };
            let def = firn_model::KeyspaceDef { spec, placement };
            connect(&target)
                .await?
                .keyspace_create(&def)
                .await
                .map_err(show)?;
            println!("keyspace '{}' created ({})", def.spec.prefix, def.spec.mode);
            Ok(())
        }
        KeyspaceAction::List { target } => {
            for def in connect(&target)
                .await?
                .keyspace_list()
                .await
                .map_err(show)?
            {
                let (spec, placement) = (&def.spec, &def.placement);
                println!(
                    "{:<24} {:<10} durability={} max_versions={} max_age={} local={} follow={}",
                    format!("'{}'", spec.prefix),
                    spec.mode,
                    spec.durability,
                    spec.max_versions.map_or("-".into(), |n| n.to_string()),
                    spec.max_age_us
                        .map_or("-".into(), |us| humantime::format_duration(
                            Duration::from_micros(us)
                        )
                        .to_string()),
                    if placement.local { "on" } else { "off" },
                    placement.follow,
                );
            }
            Ok(())
        }
        KeyspaceAction::Drop { prefix, target } => {
            connect(&target)
                .await?
                .keyspace_drop(&prefix)
                .await
                .map_err(show)?;
            println!("keyspace '{prefix}' dropped");
            Ok(())
        }
    }
}
