//! The storage engine's background work in `/metrics`: for each of the node's fjall databases
//! (label `db`: `log`, `state`, `log-1`, … `memlog`, as their folders are named), its
//! memtables' bytes, the flushes queued, the compactions running, and counters of the
//! compaction runs done and the time they took (fjall counts a run of its compaction worker,
//! which each flush queues, whether or not it found tables to merge; one that merges nothing
//! takes about a millisecond, a real merge of a large table seconds). Under sustained writes
//! a small machine's put latency dips while compactions run (docs/benchmarks.md, "The dips
//! of a cluster under sustained puts are compactions"); these say when.
//!
//! fjall counts all of it itself, with atomics and a channel's length; [`StorageStats::run`]
//! copies the counts into the metrics every [`STORAGE_STATS_EVERY`]. The only lock it takes
//! is the journal list's read lock, for a moment (a memtable's rotation takes it to write).

use std::time::Duration;

use fjall::Database;
use tokio::sync::watch;

/// How often the storage metrics are refreshed.
pub const STORAGE_STATS_EVERY: Duration = Duration::from_secs(1);

/// The node's databases, each under the name its metrics carry.
pub struct StorageStats {
    databases: Vec<(String, Database)>,
}

impl StorageStats {
    pub fn new(databases: Vec<(String, Database)>) -> Self {
        StorageStats { databases }
    }

    /// Sets every database's metrics from its counts now.
    pub fn observe(&self) {
        for (name, db) in &self.databases {
            metrics::gauge!("firn_storage_write_buffer_bytes", "db" => name.clone())
                .set(db.write_buffer_size() as f64);
            metrics::gauge!("firn_storage_flushes_queued", "db" => name.clone())
                .set(db.outstanding_flushes() as f64);
            metrics::gauge!("firn_storage_compactions_running", "db" => name.clone())
                .set(db.active_compactions() as f64);
            metrics::counter!("firn_storage_compactions_total", "db" => name.clone())
                .absolute(db.compactions_completed() as u64);
            metrics::counter!("firn_storage_compaction_microseconds_total", "db" => name.clone())
                .absolute(db.time_compacting().as_micros() as u64);
            metrics::gauge!("firn_storage_journals", "db" => name.clone())
                .set(db.journal_count() as f64);
        }
    }

    /// Observes every [`STORAGE_STATS_EVERY`] until `stop`.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            self.observe();
            tokio::select! {
                _ = tokio::time::sleep(STORAGE_STATS_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::KeyspaceCreateOptions;

    /// `name`'s value of the series `metric` in the rendered metrics.
    fn series(rendered: &str, metric: &str, name: &str) -> Option<f64> {
        let prefix = format!("{metric}{{db=\"{name}\"}} ");
        rendered
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.trim().parse().unwrap())
    }

    #[test]
    fn a_databases_memtables_and_compactions_show_in_the_metrics() {
        let handle = crate::metrics::handle();
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder(dir.path()).open().unwrap();
        let table = db.keyspace("t", KeyspaceCreateOptions::default).unwrap();
        let name = "storage-stats-test";
        let stats = StorageStats::new(vec![(name.to_string(), db.clone())]);

        stats.observe();
        let before = handle.render();
        let buffered = |r: &str| series(r, "firn_storage_write_buffer_bytes", name).unwrap();
        assert_eq!(buffered(&before), 0.0, "{before}");

        for i in 0..1_000u32 {
            table.insert(i.to_be_bytes(), [7u8; 100]).unwrap();
        }
        stats.observe();
        let written = handle.render();
        assert!(buffered(&written) >= 100_000.0, "{written}");
        assert_eq!(
            series(&written, "firn_storage_compactions_running", name),
            Some(0.0)
        );
        assert_eq!(
            series(&written, "firn_storage_flushes_queued", name),
            Some(0.0)
        );
        assert_eq!(series(&written, "firn_storage_journals", name), Some(1.0));

        // A flush queues compaction runs on fjall's workers (which count them, whatever they
        // merge); the counters follow fjall's once one has run. More of the queued runs may end
        // while the metrics are read, so they lie between fjall's counts before and after.
        table.rotate_memtable_and_wait().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while db.compactions_completed() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (runs_before, time_before) = (db.compactions_completed(), db.time_compacting());
        stats.observe();
        let (runs_after, time_after) = (db.compactions_completed(), db.time_compacting());
        let compacted = handle.render();
        let done = series(&compacted, "firn_storage_compactions_total", name).unwrap();
        assert!(done >= 1.0, "no compaction run after a flush: {compacted}");
        assert!(
            (runs_before as f64..=runs_after as f64).contains(&done),
            "{done} runs shown, fjall counted {runs_before}..={runs_after}: {compacted}"
        );
        let took = series(
            &compacted,
            "firn_storage_compaction_microseconds_total",
            name,
        )
        .unwrap();
        assert!(
            (time_before.as_micros() as f64..=time_after.as_micros() as f64).contains(&took),
            "{took} µs shown, fjall counted {time_before:?}..={time_after:?}: {compacted}"
        );
    }
}
