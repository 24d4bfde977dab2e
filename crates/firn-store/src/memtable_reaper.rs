//! Frees fjall's memtables outside fjall's locks.
//!
//! A memtable written out to disk is freed when the last of the tree's versions that name it
//! goes, and lsm-tree drops old versions (`SuperVersions::maintenance`) while it holds the
//! tree's version lock — the lock every insert into the tree and every read of it takes. A
//! 16 MiB memtable is a skiplist of about 100,000 entries; freeing it took 27–127 ms on the
//! busy 2-core machine (measured with uprobes around `maintenance`), and each time every
//! write into the tree waited it out — and, as fjall inserts into memtables with its journal
//! lock held, every write into the database (docs/benchmarks.md, "The longest waits were
//! memtables freed under a lock").
//!
//! So a reaper thread keeps a handle on each memtable of the keyspaces it watches, taken
//! while the memtable is the active one, and lets go of it once it is the last holder: the
//! free then happens on the reaper's thread, with no lock of fjall's held. A memtable that
//! was active for less than [`TICK`] may escape the reaper; fjall then frees it as before.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use fjall::{AbstractTree, Keyspace};

/// How often the reaper looks at the watched keyspaces' active memtables and at the
/// memtables it holds. A memtable stays active far longer (it fills with writes first), and
/// a freed one outlives fjall's last use of it by at most this.
pub const TICK: Duration = Duration::from_millis(20);

type Held = Arc<dyn Any + Send + Sync>;

struct Watched {
    watch: u64,
    keyspace: Keyspace,
    /// The active memtable last taken (a weak handle keeps its address from being reused).
    active: Weak<dyn Any + Send + Sync>,
}

#[derive(Default)]
struct Reaper {
    watched: Mutex<Vec<Watched>>,
}

static REAPER: OnceLock<Arc<Reaper>> = OnceLock::new();
static NEXT_WATCH: AtomicU64 = AtomicU64::new(0);

fn reaper() -> &'static Arc<Reaper> {
    REAPER.get_or_init(|| {
        let reaper = Arc::new(Reaper::default());
        let looked_after = reaper.clone();
        std::thread::Builder::new()
            .name("memtable-reaper".into())
            .spawn(move || {
                // The memtables taken, each until the reaper is its last holder.
                let mut held = Vec::new();
                loop {
                    std::thread::sleep(TICK);
                    looked_after.tick(&mut held);
                }
            })
            .expect("spawning the memtable reaper");
        reaper
    })
}

impl Reaper {
    fn tick(&self, held: &mut Vec<Held>) {
        for w in self
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
        {
            let active: Held = w.keyspace.tree.active_memtable();
            if !std::ptr::addr_eq(w.active.as_ptr(), Arc::as_ptr(&active)) {
                w.active = Arc::downgrade(&active);
                held.push(active);
            }
        }
        // The frees happen here, outside every lock (the reaper's too).
        held.retain(|m| Arc::strong_count(m) > 1);
    }
}

/// The reaper watches a set of keyspaces while this lives (their owner keeps it).
pub struct MemtableWatch {
    id: u64,
}

/// Has the reaper watch `keyspaces` until the returned handle is dropped.
pub fn watch(keyspaces: impl IntoIterator<Item = Keyspace>) -> MemtableWatch {
    let id = NEXT_WATCH.fetch_add(1, Ordering::Relaxed);
    let mut watched = reaper().watched.lock().unwrap_or_else(|p| p.into_inner());
    watched.extend(keyspaces.into_iter().map(|keyspace| Watched {
        watch: id,
        keyspace,
        active: Weak::<()>::new(),
    }));
    MemtableWatch { id }
}

impl Drop for MemtableWatch {
    fn drop(&mut self) {
        // The memtables already held stay until their trees let go of them. The keyspaces'
        // handles go outside the reaper's lock (the last may close a database).
        if let Some(reaper) = REAPER.get() {
            let gone: Vec<Watched> = {
                let mut watched = reaper.watched.lock().unwrap_or_else(|p| p.into_inner());
                let (gone, kept) = std::mem::take(&mut *watched)
                    .into_iter()
                    .partition(|w| w.watch == self.id);
                *watched = kept;
                gone
            };
            drop(gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(TICK);
        }
    }

    #[test]
    fn a_flushed_memtable_is_freed_by_the_reaper_not_by_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db
            .keyspace("t", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let watch = watch([ks.clone()]);
        for i in 0..1_000u32 {
            ks.insert(i.to_be_bytes(), [7u8; 100]).unwrap();
        }
        // The reaper has taken the active memtable: the tree and the reaper hold it.
        let first = ks.tree.active_memtable();
        wait_for("the reaper to hold the active memtable", || {
            Arc::strong_count(&first) >= 3
        });
        // Written out and rotated: the tree lets go of it once no version of the tree
        // names it; then the reaper's handle (and ours) are the last.
        ks.rotate_memtable_and_wait().unwrap();
        for i in 0..10u32 {
            ks.insert(i.to_be_bytes(), [8u8; 100]).unwrap();
        }
        ks.rotate_memtable_and_wait().unwrap();
        wait_for("the tree to let go of the flushed memtable", || {
            Arc::strong_count(&first) == 2
        });
        // With ours gone the reaper's is the last, and the reaper frees it.
        let weak = Arc::downgrade(&first);
        drop(first);
        wait_for("the reaper to free the memtable", || {
            weak.strong_count() == 0
        });
        // Its data is on disk, and the tree reads it as before.
        assert_eq!(
            ks.get(500u32.to_be_bytes()).unwrap().unwrap().as_ref(),
            [7u8; 100]
        );
        assert_eq!(
            ks.get(5u32.to_be_bytes()).unwrap().unwrap().as_ref(),
            [8u8; 100]
        );
        drop(watch);
    }
}
