//! Prometheus metrics: one process-wide recorder, rendered by `/metrics`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the recorder on first use (several nodes in one test process share it).
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed (an embedding program); then ours still
        // renders, just without the embedder's metrics.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}
