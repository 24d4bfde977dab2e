//! Where a node keeps its data: the data directory and its layout (`FORMAT`), the
//! databases of each stripe and of the memory groups' log, and the threads that make them
//! durable (group commit, writeback, checkpoints).

use std::sync::Arc;

use firn_model::FirnError;
use firn_raft::log_store::{Checkpoints, Fsync, GroupCommit};
use firn_store::journal_sync::{self, Writeback};

use super::startup;
use crate::config::NodeConfig;
use crate::disk::DiskSpace;
use crate::replicas::Stripe;
use crate::storage_stats::StorageStats;

/// The node's Raft logs, under the data directory.
const LOG_DB: &str = "log";
/// The node's state machines, under the data directory.
const STATE_DB: &str = "state";
/// The Raft logs of the node's memory-durability groups, under the data directory.
const MEMORY_LOG_DB: &str = "memlog";
/// Where large values are kept, beside the databases (see [`crate::blob`]).
pub(super) const BLOB_DIR: &str = "blobs";
/// Names the layout of a data directory; a node refuses a directory in another layout
/// rather than reading it wrongly. 3: the Raft log's entries carry one intent type
/// (`firn_store::Op::{Kv, Log, Group, System}`); a log written as 2 cannot be read by it.
/// 4: keys are typed (`KeyMeta.kind`; a stream is a key with a version of its own), where 3
/// kept streams apart from keys. 5: a put in the log carries its lifetime (`SET … EX`,
/// `LEASE`) and a keyspace its default TTL; the state a backup of 4 holds reads as it is.
const DATA_FORMAT_FILE: &str = "FORMAT";
const DATA_FORMAT: &str = "firn-data 5\n";
/// How many stripes a new data directory gets on a machine of at least
/// [`STRIPES_CORES_MIN`] cores, unless `--stripes` says (see [`crate::replicas::Stripe`]): a
/// log database and a state database each, a group's id picking its stripe. fjall makes
/// every write into one database in turn (its journal and its memtable inserts under one
/// lock, which the log's fsync holds too), so with one of each, every group on a node waited
/// for every other. On a smaller machine one stripe: more fsyncs, each covering fewer
/// appends, cost more CPU than the turns do there. The count is part of the directory's
/// layout: written into `FORMAT` when the directory is made (a directory from before has
/// one stripe) and kept for its life.
const STRIPES_DEFAULT: usize = 4;
pub(super) const STRIPES_CORES_MIN: usize = 4;
/// Most stripes a `FORMAT` file may name.
const STRIPES_MAX: usize = 64;

/// Locks `<data-dir>/LOCK` (an exclusive `flock`, released when the process ends, however it
/// ends): a second node started on the same directory is refused at once with a message
/// that says so, before it touches a database.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, FirnError> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| startup(&format!("opening {}", path.display()), e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            FirnError::Refused(format!(
                "the data directory {} is in use by another firn process (it holds {}); stop that \
             one, or give this one another --data-dir",
                dir.display(),
                path.display()
            ))
        },
    )?;
    Ok(file)
}

/// Marks a new data directory with this build's layout and `wanted` stripes (by default
/// [`STRIPES_DEFAULT`] or one, by the cores), or checks an existing one has it (and, if
/// `wanted`, that many stripes); returns its stripe count.
fn check_data_format(dir: &std::path::Path, wanted: Option<usize>) -> Result<usize, FirnError> {
    let path = dir.join(DATA_FORMAT_FILE);
    let refuse = |found: &str| {
        FirnError::Internal(format!(
            "{} holds data in another layout ({found}) than this build reads ({}); start with an empty --data-dir (data moves across by `firn backup` with the build that wrote it and `firn restore` into this one)",
            dir.display(),
            DATA_FORMAT.trim()
        ))
    };
    let found = match std::fs::read_to_string(&path) {
        Ok(found) => {
            let Some(rest) = found.strip_prefix(DATA_FORMAT) else {
                return Err(refuse(found.lines().next().unwrap_or("").trim()));
            };
            match rest.trim() {
                "" => 1,
                stripes => stripes
                    .strip_prefix("stripes ")
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| (1..=STRIPES_MAX).contains(n))
                    .ok_or_else(|| refuse(&format!("{}, {stripes}", DATA_FORMAT.trim())))?,
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("db").exists() {
                return Err(refuse("firn-data 1"));
            }
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let stripes = wanted.unwrap_or(if cores >= STRIPES_CORES_MIN {
                STRIPES_DEFAULT
            } else {
                1
            });
            std::fs::write(&path, format!("{DATA_FORMAT}stripes {stripes}\n"))
                .and_then(|()| std::fs::File::open(dir)?.sync_all())
                .map_err(|e| startup(&format!("writing {}", path.display()), e))?;
            return Ok(stripes);
        }
        Err(e) => return Err(startup(&format!("reading {}", path.display()), e)),
    };
    match wanted {
        Some(n) if n != found => Err(FirnError::Internal(format!(
            "{} was made with {found} stripe(s); --stripes {n} cannot change that (leave it out, or start with an empty --data-dir)",
            dir.display()
        ))),
        _ => Ok(found),
    }
}

/// The name of stripe `i`'s database `base` under the data directory (stripe 0 keeps the
/// name a directory of one stripe has).
fn stripe_db(base: &str, i: usize) -> String {
    if i == 0 {
        base.to_string()
    } else {
        format!("{base}-{i}")
    }
}

/// A node's storage, opened: its data directory, its disk, its databases.
pub(super) struct Storage {
    /// Holds an in-memory node's scratch directory until shutdown.
    pub scratch: Option<tempfile::TempDir>,
    /// `<data-dir>/LOCK`, locked while the node runs (see [`lock_data_dir`]).
    pub lock: std::fs::File,
    pub data_dir: std::path::PathBuf,
    pub disk: Arc<DiskSpace>,
    /// Each stripe's log and state databases, until [`Storage::start_syncing`] takes them.
    databases: Vec<(fjall::Database, fjall::Database)>,
    pub memory_db: fjall::Database,
    pub stats: StorageStats,
}

impl Storage {
    /// Makes or checks the data directory (a scratch one for `--in-memory`) and opens its
    /// databases.
    pub fn open(config: &NodeConfig) -> Result<Storage, FirnError> {
        let scratch = if config.in_memory {
            Some(tempfile::tempdir().map_err(|e| startup("creating a scratch directory", e))?)
        } else {
            None
        };
        let data_dir = scratch
            .as_ref()
            .map_or(config.data_dir.clone(), |s| s.path().to_path_buf());
        std::fs::create_dir_all(&data_dir).map_err(|e| {
            startup(
                &format!("creating data directory {}", data_dir.display()),
                e,
            )
        })?;
        let lock = lock_data_dir(&data_dir)?;
        let disk = Arc::new(DiskSpace::new(
            config.node_id,
            &data_dir,
            config.disk_reserve_bytes,
        ));
        if let Err(e) = disk.refresh() {
            tracing::warn!(dir = %data_dir.display(), "looking at the free space: {e}");
        }
        let stripes = check_data_format(&data_dir, config.stripes)?;
        // The Raft logs and the state machines live in separate databases (a pair a stripe,
        // see `STRIPES_DEFAULT`): the group commit's fsync holds the log database's journal,
        // and applying writes must not wait for it.
        // State needs no fsync of its own: the log is purged only after a snapshot has
        // persisted the state it covers, so a crash replays the log onto the state.
        // Neither database writes its journal out on each batch (`manual_journal_persist`):
        // the log's is written and fsync'd once per group commit, the state's when a
        // snapshot persists it; each keeps at most `JOURNAL_BYTES_MAX` of journal.
        let open_db = |name: &str| {
            journal_sync::open_database(&data_dir.join(name))
                .map_err(|e| startup(&format!("opening storage in {}", data_dir.display()), e))
        };
        let mut databases = Vec::with_capacity(stripes);
        for i in 0..stripes {
            databases.push((
                open_db(&stripe_db(LOG_DB, i))?,
                open_db(&stripe_db(STATE_DB, i))?,
            ));
        }
        let memory_db = open_db(MEMORY_LOG_DB)?;
        let stats = StorageStats::new(
            databases
                .iter()
                .enumerate()
                .flat_map(|(i, (log, state))| {
                    [
                        (stripe_db(LOG_DB, i), log.clone()),
                        (stripe_db(STATE_DB, i), state.clone()),
                    ]
                })
                .chain([(MEMORY_LOG_DB.to_string(), memory_db.clone())])
                .collect(),
        );
        Ok(Storage {
            scratch,
            lock,
            data_dir,
            disk,
            databases,
            memory_db,
            stats,
        })
    }

    /// Starts the threads that make the databases durable — each stripe's group commit and
    /// writeback, the memory log's checkpoints (none sync on an `--in-memory` node) — and
    /// hands over the stripes.
    pub fn start_syncing(
        &mut self,
        config: &NodeConfig,
    ) -> Result<(Vec<Stripe>, Arc<Checkpoints>), FirnError> {
        let fsync = if config.in_memory {
            Fsync::Never
        } else {
            Fsync::Always
        };
        let data_dir = &self.data_dir;
        let stripes = std::mem::take(&mut self.databases)
            .into_iter()
            .enumerate()
            .map(|(i, (log, state))| {
                let commit =
                    GroupCommit::start(log.clone(), &data_dir.join(stripe_db(LOG_DB, i)), fsync)
                        .map_err(|e| startup("starting the fsync thread", e))?;
                let state_dir = data_dir.join(stripe_db(STATE_DB, i));
                let writeback = match fsync {
                    Fsync::Always => Some(
                        Writeback::start(state.clone(), &state_dir)
                            .map_err(|e| startup("starting the writeback thread", e))?,
                    ),
                    Fsync::Never => None,
                };
                Ok(Stripe {
                    log,
                    state,
                    state_dir,
                    commit,
                    writeback,
                })
            })
            .collect::<Result<Vec<_>, FirnError>>()?;
        let checkpoints = Checkpoints::start(
            self.memory_db.clone(),
            &data_dir.join(MEMORY_LOG_DB),
            config.memory_checkpoint_every,
            fsync,
        )
        .map_err(|e| startup("starting the checkpoint thread", e))?;
        Ok((stripes, checkpoints))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_is_marked_and_another_layout_is_refused() {
        let fresh = tempfile::tempdir().unwrap();
        check_data_format(fresh.path(), None).unwrap();
        assert!(
            std::fs::read_to_string(fresh.path().join(DATA_FORMAT_FILE))
                .unwrap()
                .starts_with(DATA_FORMAT)
        );
        // Opening it again is fine.
        check_data_format(fresh.path(), None).unwrap();

        // A directory written by the first layout (one database under `db/`) is refused.
        let old = tempfile::tempdir().unwrap();
        std::fs::create_dir(old.path().join("db")).unwrap();
        let e = check_data_format(old.path(), None).unwrap_err().to_string();
        assert!(
            e.contains("firn-data 1") && e.contains("empty --data-dir"),
            "{e}"
        );
        assert!(!old.path().join(DATA_FORMAT_FILE).exists());

        // So are those of the layouts before this build's (log entries of another shape,
        // streams apart from keys), with or without their stripes.
        for before in [
            "firn-data 2\n",
            "firn-data 2\nstripes 1\n",
            "firn-data 3\nstripes 1\n",
            "firn-data 4\nstripes 2\n",
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(DATA_FORMAT_FILE), before).unwrap();
            let e = check_data_format(dir.path(), None).unwrap_err().to_string();
            assert!(
                e.contains(before.lines().next().unwrap())
                    && e.contains("firn-data 5")
                    && e.contains("empty --data-dir")
                    && e.contains("firn backup"),
                "{e}"
            );
            assert_eq!(
                std::fs::read_to_string(dir.path().join(DATA_FORMAT_FILE)).unwrap(),
                before,
                "a refused directory is left as it was"
            );
        }

        // So is one marked with a layout this build does not know.
        std::fs::write(fresh.path().join(DATA_FORMAT_FILE), "firn-data 9\n").unwrap();
        let e = check_data_format(fresh.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("firn-data 9"), "{e}");
    }

    #[test]
    fn a_second_lock_on_a_data_directory_is_refused_until_the_first_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).unwrap();
        let e = lock_data_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("in use by another firn process"), "{e}");
        drop(first);
        lock_data_dir(dir.path()).unwrap();
    }

    #[test]
    fn a_data_directory_keeps_the_stripes_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_data_format(dir.path(), Some(3)).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(DATA_FORMAT_FILE)).unwrap(),
            "firn-data 5\nstripes 3\n"
        );
        // Later starts find the count, with or without the flag; a different one is refused.
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 3);
        assert_eq!(check_data_format(dir.path(), Some(3)).unwrap(), 3);
        let refused = check_data_format(dir.path(), Some(4))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("made with 3 stripe(s)"), "{refused}");
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 3);
    }

    #[test]
    fn a_directory_from_before_stripes_has_one_and_a_bad_count_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let format = dir.path().join(DATA_FORMAT_FILE);
        std::fs::write(&format, DATA_FORMAT).unwrap();
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 1);
        for bad in ["stripes 0", "stripes 65", "stripes x", "shelves 2"] {
            std::fs::write(&format, format!("{DATA_FORMAT}{bad}\n")).unwrap();
            let refused = check_data_format(dir.path(), None).unwrap_err().to_string();
            assert!(refused.contains("another layout"), "{bad}: {refused}");
        }
        std::fs::write(&format, "firn-data 99\n").unwrap();
        assert!(check_data_format(dir.path(), None).is_err());
    }

    #[test]
    fn a_new_directory_gets_the_default_for_its_machine() {
        let dir = tempfile::tempdir().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let want = if cores >= STRIPES_CORES_MIN {
            STRIPES_DEFAULT
        } else {
            1
        };
        assert_eq!(check_data_format(dir.path(), None).unwrap(), want);
    }
}
