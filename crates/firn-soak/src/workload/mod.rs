//! The workloads a soak run checks, each recording a history for its checker in `firn-check`.

pub mod bank;
pub mod conn;
pub mod effects;
pub mod groups;
pub mod log;
pub mod register;
pub mod txn;
