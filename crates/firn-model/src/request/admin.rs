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
}

impl AdminRequest {
    pub fn name(&self) -> &'static str {
        match self {
            AdminRequest::KeyspaceCreate(_) => "keyspace_create",
            AdminRequest::KeyspaceDrop { .. } => "keyspace_drop",
            AdminRequest::KeyspaceList => "keyspace_list",
        }
    }
}
