//! The admin subsystem's requests: keyspace definitions. Their one home is the cluster
//! layout in the meta group; shards apply the definitions the layout holds.

use serde::{Deserialize, Serialize};

use crate::keyspace::KeyspaceDef;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Defines a keyspace, or replaces its definition (spec and placement together).
    KeyspaceCreate(KeyspaceDef),
    KeyspaceDrop {
        prefix: String,
    },
    KeyspaceList,
    /// Where this node's shared-memory region is, for a client on the same host.
    LocalRegion,
    /// A keyspace's event-time watermark: read, wait for, advance, or its policy.
    Watermark(crate::WatermarkRequest),
}

/// What a client needs to open a node's shared-memory region (FIRN.LOCAL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalRegionInfo {
    /// The region file, as the node opened it.
    pub path: String,
    pub node_id: u64,
    /// Hex of the 16-byte cluster id the region carries (all zeros: not known yet).
    pub cluster_id: String,
    /// Bumped each time a node opens the file: tells a reader it has the node's live region.
    pub incarnation: u64,
    pub entries: u64,
    pub key_bytes_max: u64,
    pub value_bytes_max: u64,
}

impl AdminRequest {
    pub fn name(&self) -> &'static str {
        match self {
            AdminRequest::KeyspaceCreate(_) => "keyspace_create",
            AdminRequest::KeyspaceDrop { .. } => "keyspace_drop",
            AdminRequest::KeyspaceList => "keyspace_list",
            AdminRequest::LocalRegion => "local_region",
            AdminRequest::Watermark(crate::WatermarkRequest::Get { .. }) => "watermark_get",
            AdminRequest::Watermark(crate::WatermarkRequest::Advance { .. }) => "watermark_advance",
            AdminRequest::Watermark(crate::WatermarkRequest::Policy { .. }) => "watermark_policy",
        }
    }
}
