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
        describe();
        handle
    })
}

/// The `# HELP` lines of the metrics that need more than their name.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_counter!(
        "firn_log_index_hits_total",
        "log reads the local log index answered without asking the shards"
    );
    describe_counter!(
        "firn_log_index_misses_total",
        "log reads the local log index could have served but did not know, sent to the shards"
    );
    describe_gauge!(
        "firn_log_index_bytes",
        Unit::Bytes,
        "bytes the local log index holds (at most --log-index-bytes)"
    );
    describe_counter!(
        "firn_log_index_evictions_total",
        "tags (or a tag's oldest records) the local log index dropped to stay within its bound"
    );
    describe_counter!(
        "firn_leader_follow_moves_total",
        "moves of a shard's leader (step=leader) or of a replica first (step=replica) toward \
         the node its clients use, or to a pin; counted by the meta leader's steward"
    );
    describe_gauge!(
        "firn_leader_follow_share",
        "the share (0-1) of a shard's following requests sent by its busiest origin node, \
         over the last 5 s; set by the meta leader's steward"
    );
    describe_gauge!(
        "firn_storage_write_buffer_bytes",
        Unit::Bytes,
        "bytes in the memtables of a database (label db) not yet written out, the active one included"
    );
    describe_gauge!(
        "firn_storage_flushes_queued",
        "memtables of a database waiting to be written out"
    );
    describe_gauge!(
        "firn_storage_compactions_running",
        "compactions of a database's tables running now"
    );
    describe_counter!(
        "firn_storage_compactions_total",
        "compaction runs of a database's workers since the node started (each flush queues \
         some; a run that finds nothing to merge counts too)"
    );
    describe_counter!(
        "firn_storage_compaction_microseconds_total",
        Unit::Microseconds,
        "time a database's compaction runs took since the node started, all of them together \
         (a run that merges nothing takes about 1 ms)"
    );
    describe_gauge!(
        "firn_storage_journals",
        "journal files a database keeps (about 64 MiB each; see JOURNAL_BYTES_MAX)"
    );
    describe_counter!(
        "firn_pubsub_messages_dropped_total",
        "published messages a subscriber of this node lost because its queue was full \
         (pubsub::SUBSCRIBER_QUEUE_MESSAGES_MAX messages or SUBSCRIBER_QUEUE_BYTES_MAX bytes)"
    );
    describe_counter!(
        "firn_resp_clients_closed_total",
        "RESP connections the node closed for a bound (reason=output_stalled: the client took \
         none of its replies for --max-output-stall)"
    );
}
