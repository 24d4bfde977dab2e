//! How a node finds its cluster at start: it creates one (alone, or as the lowest id of
//! `--peers`), it is one of `--peers`, or it joins through a member.

use std::collections::BTreeMap;

use firn_model::FirnError;
use firn_raft::NodeId;

use crate::cluster::layout::ClusterLayout;
use crate::config::NodeConfig;

/// What a starting node knows of its cluster before the meta group tells it more.
pub(super) struct Formation {
    /// The nodes it knows of, with their peer addresses.
    pub nodes: BTreeMap<NodeId, String>,
    /// The first layout, where this node can derive it (alone, or from `--peers`).
    pub initial: Option<ClusterLayout>,
    /// The first layout, on the node that stores it in the meta group.
    pub bootstrap: Option<ClusterLayout>,
    /// The meta group's first voters: an odd number, at most five, lowest ids first.
    pub meta_members: BTreeMap<NodeId, String>,
    /// The members to join through (none: it forms the cluster or is listed in it).
    pub join_through: Vec<String>,
}

impl Formation {
    /// How the node of `config`, reached by peers at `peer_addr_text`, finds its cluster.
    pub fn of(config: &NodeConfig, peer_addr_text: &str) -> Result<Formation, FirnError> {
        let peer_addr_text = peer_addr_text.to_string();
        // How this node finds its cluster: it creates one (alone, or as the lowest id of
        // `--peers`), it is one of `--peers`, or it joins through a member: the one `--join`
        // names or, for a node `--peers` does not list (a StatefulSet scaled up past the
        // list it was created with), the nodes listed.
        let listed = config.peers.contains_key(&config.node_id);
        let join_through: Vec<String> = match &config.join {
            Some(contact) => vec![contact.clone()],
            None if !listed => config.peers.values().cloned().collect(),
            None => Vec::new(),
        };
        let (nodes, initial, creates) = match (&config.join, config.peers.is_empty()) {
            (Some(_), false) => {
                return Err(FirnError::BadArgument(
                    "give either --peers (to form a cluster) or --join (to join one), not both"
                        .into(),
                ));
            }
            (Some(_), true) => (
                BTreeMap::from([(config.node_id, peer_addr_text.clone())]),
                None,
                false,
            ),
            (None, false) if !listed => {
                tracing::info!(
                    node = config.node_id,
                    "--peers does not list this node: it joins the cluster through them"
                );
                (
                    BTreeMap::from([(config.node_id, peer_addr_text.clone())]),
                    None,
                    false,
                )
            }
            (None, true) => {
                let single = ClusterLayout::single(
                    config.node_id,
                    peer_addr_text.clone(),
                    config.replication,
                );
                (single.nodes.clone(), Some(single), true)
            }
            (None, false) => {
                let layout =
                    ClusterLayout::new(config.peers.clone(), config.shards, config.replication)?;
                let first = config.peers.keys().next() == Some(&config.node_id);
                (config.peers.clone(), Some(layout), first)
            }
        };
        let bootstrap = initial.clone().filter(|_| creates);
        let meta_members: BTreeMap<NodeId, String> = {
            let want = bootstrap
                .as_ref()
                .map_or(1, |l| l.meta_voters(&Default::default()).len());
            nodes
                .iter()
                .take(want)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        };
        Ok(Formation {
            nodes,
            initial,
            bootstrap,
            meta_members,
            join_through,
        })
    }
}
