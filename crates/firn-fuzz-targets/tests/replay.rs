//! Every file of every corpus in `fuzz/corpus/`, then seeded random mutations of each,
//! through the fuzz targets' bodies: a quick check in `cargo test` (uninstrumented, a few
//! seconds) that no input the corpora hold, nor any near one, panics. It is not
//! coverage-guided — the mutations are blind — so it guards against regressions; finding
//! new failures is `scripts/fuzz`'s job. A failing input is written to the test's scratch
//! folder, named in the failure.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use firn_fuzz_targets::TARGETS;

/// Mutated inputs per target: with the corpus itself, well under a few seconds each.
const MUTATIONS_PER_TARGET: usize = 2_000;
/// The longest input a mutation makes, as `scripts/fuzz` bounds the fuzzer's.
const INPUT_BYTES_MAX: usize = 4096;
/// Longer than any one input takes unless the target hangs: the slowest bounded input
/// known, a module whose start function runs out of its fuel, takes about 4 s here.
const INPUT_TIME_MAX: Duration = Duration::from_secs(20);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no inputs", dir.display());
    files
}

/// SplitMix64: a seeded, dependency-free source of the mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four of libFuzzer's simpler mutations: flip a bit, set a byte to a random or an
/// edge value, insert or erase bytes, write a random little-endian word, copy a slice
/// elsewhere, cut the tail.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(7) {
            0 if len > 0 => {
                let at = rng.below(len);
                input[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                input[at] = [0, 0xff, 0x7f, 0x80, 1, rng.next() as u8][rng.below(6)];
            }
            2 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(16));
                input.drain(at..at + n);
            }
            4 if len >= 4 => {
                let at = rng.below(len - 3);
                let word = [0u32, u32::MAX, 0x8000_0000, rng.next() as u32][rng.below(4)];
                input[at..at + 4].copy_from_slice(&word.to_le_bytes());
            }
            5 if len > 0 => {
                let from = rng.below(len);
                let n = 1 + rng.below((len - from).min(32));
                let slice = input[from..from + n].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, slice);
            }
            6 if len > 0 => input.truncate(rng.below(len)),
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(INPUT_BYTES_MAX);
}

/// Runs one input; a panic or an input running past [`INPUT_TIME_MAX`] fails the test with
/// the input kept.
fn run(target: &str, run: fn(&[u8]), what: &str, input: &[u8]) {
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| run(input)));
    let took = started.elapsed();
    if outcome.is_err() || took > INPUT_TIME_MAX {
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{target}-failed"));
        std::fs::write(&kept, input).unwrap();
        panic!(
            "{target}: {what} {} (took {took:?}); the input is in {}",
            if outcome.is_err() {
                "panicked"
            } else {
                "ran too long"
            },
            kept.display()
        );
    }
}

fn replay(target: &str) {
    let (_, body) = TARGETS.iter().find(|(name, _)| *name == target).unwrap();
    let files = corpus(target);
    for (name, bytes) in &files {
        run(target, *body, &format!("corpus file {name}"), bytes);
    }
    // Seeded by the target's name, so a failure repeats.
    let mut rng = Rng(target.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }));
    for i in 0..MUTATIONS_PER_TARGET {
        let (name, bytes) = &files[i % files.len()];
        let mut input = bytes.clone();
        mutate(&mut rng, &mut input);
        run(target, *body, &format!("mutation {i} of {name}"), &input);
    }
}

macro_rules! replay_tests {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target));
            }
        )*

        #[test]
        fn every_target_is_replayed_and_has_a_corpus_and_a_fuzz_binary() {
            let replayed = [$(stringify!($target)),*];
            let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
            for (name, _) in TARGETS {
                assert!(replayed.contains(name), "{name} is not replayed here");
                assert!(
                    manifest.contains(&format!("path = \"fuzz_targets/{name}.rs\"")),
                    "fuzz/Cargo.toml has no binary {name}"
                );
                assert!(fuzz_dir().join("corpus").join(name).is_dir(), "no corpus for {name}");
            }
            assert_eq!(replayed.len(), TARGETS.len());
        }
    };
}

replay_tests!(
    resp_parse,
    mqtt_codec,
    peer_frame,
    snapshot_file,
    local_region,
    blob_manifest,
    http_params,
    http_txn,
    wasm_module,
    backup_file,
    http_bodies,
    peer_stream,
    blob_file,
    http_headers,
    host_calls,
);
