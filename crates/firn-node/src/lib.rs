//! A Firn node: one `firn serve` process.
//!
//! The two front ends, [`resp`] (the Redis protocol) and [`http`] (HTTP/JSON), parse into one
//! typed request and run it in a client's [`session`] through the [`router`], which sends it
//! to the subsystem it belongs to: the shared [`log`], consumer [`groups`], [`services`],
//! [`pubsub`], [`watch`], [`large`] values, [`admin`]. Each subsystem plans its requests onto
//! the execution kernel ([`exec`]), which runs each part on the shard [`replicas`] held here
//! or forwards it elsewhere (reaching other nodes through typed [`rpc`] calls, answered by
//! [`inbound`]); kv requests are the kernel's own. The [`cluster`] part keeps the layout
//! (meta group, steward, follower) and publishes it on a channel the kernel reads. A front
//! end parses and renders; it never holds store logic.

pub mod admin;
pub mod auth;
pub mod blob;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cursors;
pub mod disk;
pub mod exec;
pub mod expiry;
pub mod faults;
pub mod functions;
pub mod groups;
pub mod http;
pub mod inbound;
pub mod large;
pub mod lease;
pub mod local;
pub mod log;
pub mod metrics;
pub mod mqtt;
pub mod node;
pub mod pubsub;
pub mod recovery;
pub mod replicas;
pub mod resp;
pub mod router;
pub mod rpc;
pub mod services;
pub mod session;
pub mod storage_stats;
pub mod tls;
pub mod twin;
pub mod txn;
pub mod uplink;
pub mod watch;
pub mod watermark;

pub use config::NodeConfig;
pub use node::RunningNode;
