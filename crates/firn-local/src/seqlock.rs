//! The seqlock over a run of shared 64-bit words: word 0 is the sequence, the rest the data.
//! One writer makes the sequence odd, writes, makes it even again; a reader copies the data
//! between two reads of the sequence and keeps the copy only if both were equal and even.
//! Every access is atomic (other processes write this memory: a plain read of it would be
//! a data race), data accesses relaxed, ordered by the fences below.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// A 64-bit word the seqlock can guard: std's `AtomicU64` over the mapped region, and loom's
/// in the model test (`loom_tests` below), so that the code loom checks is the code the
/// region runs.
pub trait SeqWord {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    /// A fence of the same memory model as the word.
    fn fence(order: Ordering);
    /// A pause between tries (loom needs it to know the thread waits for another).
    fn spin();
}

impl SeqWord for AtomicU64 {
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }

    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }

    #[inline]
    fn fence(order: Ordering) {
        fence(order)
    }

    #[inline]
    fn spin() {
        std::hint::spin_loop()
    }
}

/// Most attempts a reader makes on one guarded run before it reports contention: a writer
/// rewrites an entry in well under a microsecond, so 64 failed tries mean something is
/// rewriting it continuously.
pub const READ_TRIES_MAX: usize = 64;

/// Writes `words[1..]` through `write`, guarded by the sequence in `words[0]`. Only one
/// writer may ever write a given run (the region has one writer, the node).
pub fn write<W: SeqWord>(words: &[W], write: impl FnOnce(&[W])) {
    let seq = words[0].load(Ordering::Relaxed);
    debug_assert!(
        seq.is_multiple_of(2),
        "one writer: the sequence is even between writes"
    );
    words[0].store(seq.wrapping_add(1), Ordering::Relaxed);
    // Readers that see any of the data below also see the odd sequence.
    W::fence(Ordering::Release);
    write(&words[1..]);
    // Readers that see the even sequence also see all of the data.
    words[0].store(seq.wrapping_add(2), Ordering::Release);
}

/// Where a read of one guarded run stands.
pub enum Read<T> {
    /// A consistent copy, and the sequence it was taken at.
    Copied(T, u64),
    /// The run kept changing for [`READ_TRIES_MAX`] tries.
    Contended,
}

/// Copies `words[1..]` with `copy` (which must only load, relaxed) until the copy is
/// consistent.
pub fn read<W: SeqWord, T>(words: &[W], copy: impl FnMut(&[W]) -> T) -> Read<T> {
    read_within(words, READ_TRIES_MAX, copy)
}

/// [`read`], giving up after `tries`.
pub fn read_within<W: SeqWord, T>(
    words: &[W],
    tries: usize,
    mut copy: impl FnMut(&[W]) -> T,
) -> Read<T> {
    for _ in 0..tries {
        let before = words[0].load(Ordering::Acquire);
        if before % 2 == 1 {
            W::spin();
            continue;
        }
        let value = copy(&words[1..]);
        // The copy's loads happen before the second read of the sequence.
        W::fence(Ordering::Acquire);
        if words[0].load(Ordering::Relaxed) == before {
            return Read::Copied(value, before);
        }
        W::spin();
    }
    Read::Contended
}

/// Whether the run's sequence is still `seq`: after other reads, that it did not change
/// since a copy taken at `seq` (the loads before this call happen before it).
pub fn unchanged<W: SeqWord>(words: &[W], seq: u64) -> bool {
    W::fence(Ordering::Acquire);
    words[0].load(Ordering::Relaxed) == seq
}

/// Copies `len` bytes out of `words` (relaxed loads) into `out`, replacing its contents.
pub fn load_bytes(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    out.clear();
    for w in words.iter().take(len.div_ceil(8)) {
        out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    out.truncate(len);
}

/// Whether `words` hold exactly `bytes` (relaxed loads; the caller checks the sequence).
pub fn bytes_equal(words: &[AtomicU64], bytes: &[u8]) -> bool {
    bytes.chunks(8).zip(words).all(|(chunk, w)| {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        w.load(Ordering::Relaxed) == u64::from_le_bytes(word)
    })
}

/// Stores `bytes` into `words` (relaxed), zero-padding the last word.
pub fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    for (chunk, w) in bytes.chunks(8).zip(words) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(word), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn bytes_round_trip_through_words_whatever_their_length() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        for len in [0, 1, 7, 8, 9, 31, 32] {
            let bytes: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37) | 1).collect();
            store_bytes(&words, &bytes);
            let mut out = Vec::new();
            load_bytes(&words, len, &mut out);
            assert_eq!(out, bytes);
            assert!(bytes_equal(&words, &bytes));
        }
        assert!(!bytes_equal(&words, b"something else entirely, 32 b.."));
    }

    /// A writer fills every data word with one counter value; readers must only ever copy
    /// runs whose words all agree.
    #[test]
    fn a_reader_never_keeps_a_torn_copy() {
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..17).map(|_| AtomicU64::new(0)).collect());
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (words, done) = (words.clone(), done.clone());
            std::thread::spawn(move || {
                for n in 1..200_000u64 {
                    write(&words, |data| {
                        for w in data {
                            w.store(n, Ordering::Relaxed);
                        }
                    });
                }
                done.store(true, Ordering::Relaxed);
            })
        };
        let mut copies = 0u64;
        while !done.load(Ordering::Relaxed) {
            if let Read::Copied(values, _) = read(&words, |data| {
                data.iter()
                    .map(|w| w.load(Ordering::Relaxed))
                    .collect::<Vec<_>>()
            }) {
                assert!(
                    values.iter().all(|v| *v == values[0]),
                    "torn copy: {values:?}"
                );
                copies += 1;
            }
        }
        writer.join().unwrap();
        assert!(copies > 0, "the reader got consistent copies");
    }
}

/// Model check, run by `scripts/test` as `RUSTFLAGS="--cfg loom" cargo test -p firn-local
/// --lib seqlock` (in its own target folder): every interleaving of a writer and a reader,
/// and every reordering the memory model allows.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU64 as LoomU64;

    impl SeqWord for LoomU64 {
        fn load(&self, order: Ordering) -> u64 {
            LoomU64::load(self, order)
        }
        fn store(&self, value: u64, order: Ordering) {
            LoomU64::store(self, value, order)
        }
        fn fence(order: Ordering) {
            loom::sync::atomic::fence(order)
        }
        fn spin() {
            loom::hint::spin_loop()
        }
    }

    /// A writer writes `v` into both data words twice (v = 1, 2) with `write_with`; a reader
    /// that keeps a copy must see both words equal, and the value its sequence stands for.
    fn model(write_with: fn(&[LoomU64], u64)) {
        loom::model(move || {
            let r: Arc<[LoomU64; 3]> = Arc::new(std::array::from_fn(|_| LoomU64::new(0)));
            let writer = {
                let r = r.clone();
                loom::thread::spawn(move || {
                    for v in 1..=2 {
                        write_with(&r[..], v);
                    }
                })
            };
            if let Read::Copied((a, b), seq) = read_within(&r[..], 2, |d| {
                (d[0].load(Ordering::Relaxed), d[1].load(Ordering::Relaxed))
            }) {
                assert_eq!(a, b, "torn copy at sequence {seq}");
                assert_eq!(a * 2, seq, "the copy is not the value of its sequence");
            }
            writer.join().unwrap();
        });
    }

    #[test]
    fn a_reader_never_keeps_a_torn_copy() {
        model(|r, v| {
            write(r, |d| {
                d[0].store(v, Ordering::Relaxed);
                d[1].store(v, Ordering::Relaxed);
            })
        });
    }

    /// The model can fail: a writer that makes the sequence even before it writes the data
    /// is caught.
    #[test]
    #[should_panic(expected = "copy")]
    fn a_writer_that_publishes_before_its_data_is_caught() {
        model(|r, v| {
            let seq = r[0].load(Ordering::Relaxed);
            r[0].store(seq + 2, Ordering::Release);
            r[1].store(v, Ordering::Relaxed);
            r[2].store(v, Ordering::Relaxed);
        });
    }
}
