//! Firn's fault soak: a cluster of real `firn` processes under a random, seeded mix of faults
//! (kill -9 of any node or of leaders, pauses, partitions of a minority, one-way packet loss,
//! clock offsets within the bound, a full disk) while workloads run on durable keys,
//! memory-durability keys, large values, the shared log and a stream's consumer group, each
//! recorded as a history and checked by its checker in `firn-check`.
//!
//! A run is bounded (its faults stop after the given seconds; every wait after that has a
//! deadline) and its choices — which fault, which node, how long, which operations — come
//! from its seed, so `firn-soak --seed S` runs the same schedule again. (The processes'
//! timing is the machine's, so a replay meets the same faults, not always the same
//! interleaving.) A failing run keeps its directory: the histories, the fault journal and
//! every node's log.

pub mod cluster;
pub mod faults;
pub mod run;
pub mod workload;

/// A small deterministic generator (xorshift64).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }

    /// Process `p`'s own stream of the run's `seed`: the two mixed (splitmix64's finalizer),
    /// so that neighbouring seeds (a soak's runs are S, S+1, …) draw unrelated streams.
    pub fn for_process(seed: u64, p: usize) -> Rng {
        let mut z = seed.wrapping_add((p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
}

/// The first `n` keys `{prefix}{i}` that live in `shard` of a layout of `shards` shards.
pub fn keys_in_shard(shards: u32, shard: u32, prefix: &str, n: usize) -> Vec<String> {
    let layout = firn_node::cluster::layout::ClusterLayout::new(
        firn_node::cluster::layout::parse_peers("1=a,2=b,3=c").expect("three peers"),
        shards,
        3,
    )
    .expect("a layout of three nodes");
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| layout.shard_of_key(k.as_bytes()) == shard)
        .take(n)
        .collect()
}
