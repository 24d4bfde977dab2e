//! A Firn node: one `firn serve` process.
//!
//! The node owns its shard replicas, the [`router::Router`] that executes every typed
//! request, and the two front ends that parse into it: [`resp`] (the Redis protocol) and
//! [`http`] (HTTP/JSON). A front end parses and renders; it never holds store logic.

pub mod cluster;
pub mod config;
pub mod http;
pub mod meta;
pub mod metrics;
pub mod node;
pub mod replicas;
pub mod resp;
pub mod router;
pub mod watch;

pub use config::NodeConfig;
pub use node::RunningNode;
