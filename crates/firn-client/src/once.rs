//! Exactly once from the client's side: each write this client makes carries an idempotency
//! key — the client's producer name and a counter (`IDMP producer id …`) — and is sent again
//! with the same key while its answer says it may not have applied (`UNCERTAIN`) or was not
//! taken for now (`TRYAGAIN`, `CLUSTERDOWN`). The node applies it once, whichever try got
//! through, and a later try answers what the first did (docs/api.md, "Exactly once").

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Value;

use super::{Client, ClientError, Result};

/// A client's producer: its name (random, unless given) and the next id.
#[derive(Debug)]
pub(crate) struct Producer {
    name: String,
    next: AtomicU64,
}

impl Producer {
    pub(crate) fn random() -> Self {
        let bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Producer::named(format!("rust-{bits:016x}"))
    }

    pub(crate) fn named(name: String) -> Self {
        Producer {
            name,
            next: AtomicU64::new(1),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl ClientError {
    /// Whether a write with an idempotency key may be sent again as it is: its outcome is
    /// unknown (`UNCERTAIN`), or it was not applied (`TRYAGAIN`, `CLUSTERDOWN`).
    pub fn is_resendable(&self) -> bool {
        self.is_transient()
            || matches!(self, ClientError::Server { code, .. } if code == "UNCERTAIN")
    }
}

impl Client {
    /// A command `name` that carries this client's next idempotency key.
    pub(crate) fn write_cmd(&self, name: &str) -> redis::Cmd {
        let id = self.producer.next.fetch_add(1, Ordering::Relaxed);
        let mut cmd = redis::cmd("IDMP");
        cmd.arg(&self.producer.name).arg(id).arg(name);
        cmd
    }

    /// Runs a write made by [`Client::write_cmd`], sent again with its key while it may be
    /// (see [`ClientError::is_resendable`]), for at most [`Client::with_resend_for`]
    /// ([`crate::TRANSIENT_RETRY_FOR`] unless set).
    pub(crate) async fn run_write(&self, cmd: &redis::Cmd) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + self.resend_for;
        loop {
            match self.run(cmd).await {
                Err(e) if e.is_resendable() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                r => return r,
            }
        }
    }

    /// This client, its writes' idempotency keys under `producer` (a device or process name
    /// that survives its restarts, so that a write sent again after one is still applied
    /// once). Its ids then start at 1 again: give a producer name per run, or keep ids apart.
    pub fn with_producer(mut self, producer: &str) -> Self {
        self.producer = std::sync::Arc::new(Producer::named(producer.to_string()));
        self
    }

    /// How long this client sends a write again with its key while it may be;
    /// `Duration::ZERO`: each write is sent once and its answer returned as it is (a caller
    /// that wants to see a refusal itself).
    pub fn with_resend_for(mut self, resend_for: std::time::Duration) -> Self {
        self.resend_for = resend_for;
        self
    }

    /// The producer name this client's writes carry.
    pub fn producer(&self) -> &str {
        self.producer.name()
    }
}
