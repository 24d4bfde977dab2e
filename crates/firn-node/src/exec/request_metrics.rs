//! The metrics every request records, whichever front end sent it: `firn_requests_total`,
//! `firn_request_seconds` and `firn_request_errors_total`, labelled by the operation (`op`).
//! Each operation's handles are registered with the process's recorder once and kept (a
//! node installs the recorder before it serves: `crate::metrics`), so a request records
//! with atomic updates only, without building and looking up its metric's name and labels
//! each time.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Instant;

use metrics::{Counter, Histogram};

use super::Pending;

/// One operation's handles.
pub(crate) struct OpMetrics {
    requests: Counter,
    seconds: Histogram,
    errors: Counter,
}

/// The handles of every operation seen so far (a few dozen at most: one per name).
static OPS: LazyLock<RwLock<HashMap<&'static str, Arc<OpMetrics>>>> =
    LazyLock::new(Default::default);

/// Counts a request of operation `op` as it arrives; its [`Request::finished`] records how
/// it ended.
pub(crate) fn request(op: &'static str) -> Request {
    request_since(op, Instant::now())
}

/// Counts a request of operation `op` whose time runs from `started` (a read served in a
/// batch counts from the batch's start).
pub(crate) fn request_since(op: &'static str, started: Instant) -> Request {
    let known = OPS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(op)
        .cloned();
    let metrics = known.unwrap_or_else(|| {
        OPS.write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(op)
            .or_insert_with(|| {
                Arc::new(OpMetrics {
                    requests: metrics::counter!("firn_requests_total", "op" => op),
                    seconds: metrics::histogram!("firn_request_seconds", "op" => op),
                    errors: metrics::counter!("firn_request_errors_total", "op" => op),
                })
            })
            .clone()
    });
    metrics.requests.increment(1);
    Request { metrics, started }
}

/// A request being served.
pub(crate) struct Request {
    metrics: Arc<OpMetrics>,
    started: Instant,
}

impl Request {
    /// Records the request's time and, if it failed, its error.
    pub(crate) fn finished(&self, ok: bool) {
        self.metrics
            .seconds
            .record(self.started.elapsed().as_secs_f64());
        if !ok {
            self.count_error();
        }
    }

    /// `pending`, recording this request's time and outcome when it finishes: what every
    /// request whose answer is still to come is wrapped in, so none goes unrecorded.
    pub(crate) fn around(self, pending: Pending) -> Pending {
        Box::pin(async move {
            let result = pending.await;
            self.finished(result.is_ok());
            result
        })
    }

    /// Counts an error without a time (a request refused before it was served).
    pub(crate) fn count_error(&self) {
        self.metrics.errors.increment(1);
    }
}
