//! How long each stage of a write takes on this node, recorded as histograms that `/metrics`
//! shows (`firn_write_stage_seconds{stage=…}`), with how many appends each fsync covers and
//! how many entries each apply batch holds, and how many appends went to followers with
//! entries and without (`firn_replication_appends_total{entries=some|none}`). Together with
//! the request's whole time (`firn_request_seconds{op="put"}`) they show where a write waits.
//!
//! A write on its shard's leader, in order: `propose` (the proposal handed to openraft's
//! core), `log_append` (the entries into the log database), `fsync_wait` (queued for the
//! group commit until its fsync finished; `fsync` is the fsync itself), `replicate` (an
//! AppendEntries with entries sent to a follower until it answered: its append and fsync
//! included), `apply` (one apply batch), and `commit` (from openraft taking the proposal
//! until its apply answered: everything from `log_append` on).

use std::sync::LazyLock;
use std::time::Instant;

use metrics::{Counter, Histogram};

/// The handles, registered once with the process's recorder (a node installs it before it
/// opens any group; without one they record nothing).
pub(crate) struct Stages {
    pub propose: Histogram,
    pub log_append: Histogram,
    pub fsync_wait: Histogram,
    pub fsync: Histogram,
    pub replicate: Histogram,
    pub apply: Histogram,
    pub commit: Histogram,
    /// Appends (calls, each of one or more entries) one fsync made durable.
    pub fsync_appends: Histogram,
    /// Entries applied in one batch.
    pub apply_entries: Histogram,
    /// Appends of one replication stream unanswered as one more with entries goes out (it
    /// included): how far the pipeline is used (see `crate::pipeline`).
    pub appends_in_flight: Histogram,
    /// Appends sent to a follower that carry entries, and those that carry none (a new
    /// commit index on its own, or a heartbeat): how many rounds the writes take.
    pub appends_with_entries: Counter,
    pub appends_without_entries: Counter,
    /// One background fsync of the memory groups' log (`firn_memory_checkpoint_seconds`).
    pub checkpoint: Histogram,
}

const STAGE: &str = "firn_write_stage_seconds";
const APPENDS: &str = "firn_replication_appends_total";

pub(crate) static STAGES: LazyLock<Stages> = LazyLock::new(|| {
    metrics::describe_histogram!(
        STAGE,
        metrics::Unit::Seconds,
        "time a write spends in each stage on this node (propose, log_append, fsync_wait, \
         fsync, replicate, apply, commit)"
    );
    metrics::describe_histogram!(
        "firn_log_fsync_appends",
        "log appends made durable by one group-commit fsync"
    );
    metrics::describe_histogram!(
        "firn_apply_batch_entries",
        "Raft entries applied to the store in one batch"
    );
    metrics::describe_histogram!(
        "firn_replication_appends_in_flight",
        "appends of one replication stream to a follower unanswered as one more with entries \
         is sent (it included)"
    );
    metrics::describe_counter!(
        APPENDS,
        "appends this node sent to a follower, by whether they carried entries (`some`) or \
         only the leader's commit index and term (`none`: a heartbeat, or a commit that no \
         entry was there to carry)"
    );
    metrics::describe_histogram!(
        "firn_memory_checkpoint_seconds",
        metrics::Unit::Seconds,
        "one background fsync of the memory-durability groups' log"
    );
    Stages {
        propose: metrics::histogram!(STAGE, "stage" => "propose"),
        log_append: metrics::histogram!(STAGE, "stage" => "log_append"),
        fsync_wait: metrics::histogram!(STAGE, "stage" => "fsync_wait"),
        fsync: metrics::histogram!(STAGE, "stage" => "fsync"),
        replicate: metrics::histogram!(STAGE, "stage" => "replicate"),
        apply: metrics::histogram!(STAGE, "stage" => "apply"),
        commit: metrics::histogram!(STAGE, "stage" => "commit"),
        fsync_appends: metrics::histogram!("firn_log_fsync_appends"),
        apply_entries: metrics::histogram!("firn_apply_batch_entries"),
        appends_in_flight: metrics::histogram!("firn_replication_appends_in_flight"),
        appends_with_entries: metrics::counter!(APPENDS, "entries" => "some"),
        appends_without_entries: metrics::counter!(APPENDS, "entries" => "none"),
        checkpoint: metrics::histogram!("firn_memory_checkpoint_seconds"),
    }
});

/// Records the time since `start` in `stage`, and returns the time it ended (the start of
/// the next stage).
pub(crate) fn since(stage: &Histogram, start: Instant) -> Instant {
    let end = Instant::now();
    stage.record(end.duration_since(start).as_secs_f64());
    end
}
