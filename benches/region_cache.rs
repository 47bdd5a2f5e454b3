//! `RegionCache::get_by_key` (a hit) at 100k and 1M cached Regions, beside a
//! plain `BTreeMap<Vec<u8>, u64>` range lookup (start key -> Region id) over
//! the same start keys, the floor an ordered Region map can reach.
//!
//! Run: `cargo bench --features unstable-internals --bench region_cache -- --warm-up-time 1 --measurement-time 3`
//!
//! Every iteration looks up the next key of a shuffled list holding one key
//! inside each Region, so a run touches the whole map as a client spread
//! over a large cluster would, not a few hot Regions that stay in the CPU
//! cache. After criterion's figures, the bench prints the ratio of the two,
//! measured again by alternating short batches of each (a shared, noisy
//! machine slows both sides of a pair alike).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::Bound;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use tikv_plan::__internals::RegionCache;
use tikv_plan::proto::metapb;
use tikv_plan::region::RegionWithLeader;

const SIZES: [usize; 2] = [100_000, 1_000_000];

/// Boundary of Region `i`: `t` and 18 decimal digits, 19 bytes like a TiDB
/// record key (`t` + table id + `_r` + handle).
fn boundary(i: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(KEY_LEN);
    key.push(b't');
    key.extend_from_slice(format!("{i:018}").as_bytes());
    key
}

const KEY_LEN: usize = 19;
/// A lookup key: a boundary and one more byte, strictly inside the Region.
const LOOKUP_LEN: usize = KEY_LEN + 1;

fn region(i: usize) -> RegionWithLeader {
    let id = i as u64 + 1;
    let peers: Vec<metapb::Peer> = (1..=3)
        .map(|s| metapb::Peer {
            id: id * 10 + s,
            store_id: s,
            ..Default::default()
        })
        .collect();
    let leader = peers.first().copied();
    RegionWithLeader::new(
        metapb::Region {
            id,
            start_key: boundary(i),
            end_key: boundary(i + 1),
            region_epoch: Some(metapb::RegionEpoch {
                conf_ver: 1,
                version: 1,
            }),
            peers,
            ..Default::default()
        },
        leader,
    )
}

struct Setup {
    cache: RegionCache,
    plain: BTreeMap<Vec<u8>, u64>,
    /// One key inside every Region, shuffled, back to back.
    lookups: Vec<u8>,
}

impl Setup {
    fn new(n: usize) -> Self {
        let started = Instant::now();
        let cache = RegionCache::with_capacity(n);
        let mut plain = BTreeMap::new();
        for i in 0..n {
            let region = region(i);
            plain.insert(region.start_key().to_vec(), region.id());
            cache.insert(region);
        }
        let mut order: Vec<usize> = (0..n).collect();
        fastrand::Rng::with_seed(14).shuffle(&mut order);
        let mut lookups = Vec::with_capacity(n * LOOKUP_LEN);
        for i in order {
            lookups.extend_from_slice(&boundary(i));
            lookups.push(b'x');
        }
        assert_eq!(cache.len(), n);
        eprintln!("{n} Regions set up in {:.1?}", started.elapsed());
        Setup {
            cache,
            plain,
            lookups,
        }
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.lookups.chunks_exact(LOOKUP_LEN).cycle()
    }
}

fn cache_lookup(cache: &RegionCache, key: &[u8]) {
    black_box(cache.get_by_key(black_box(key)));
}

fn plain_lookup(plain: &BTreeMap<Vec<u8>, u64>, key: &[u8]) {
    black_box(
        plain
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(black_box(key))))
            .next_back()
            .map(|(_, id)| *id),
    );
}

/// Median over alternating rounds of (cache time / plain time) for one
/// batch of lookups each.
fn paired_ratio(setup: &Setup, rounds: usize, batch: usize) -> (f64, Duration, Duration) {
    let mut keys = setup.keys();
    let mut ratios = Vec::with_capacity(rounds);
    let (mut cache_total, mut plain_total) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let started = Instant::now();
        for key in keys.by_ref().take(batch) {
            cache_lookup(&setup.cache, key);
        }
        let cache = started.elapsed();
        let started = Instant::now();
        for key in keys.by_ref().take(batch) {
            plain_lookup(&setup.plain, key);
        }
        let plain = started.elapsed();
        ratios.push(cache.as_secs_f64() / plain.as_secs_f64());
        cache_total += cache;
        plain_total += plain;
    }
    ratios.sort_by(f64::total_cmp);
    let per_lookup = (rounds * batch) as u32;
    (
        ratios[rounds / 2],
        cache_total / per_lookup,
        plain_total / per_lookup,
    )
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let mut ratios = Vec::new();
    for n in SIZES {
        let setup = Setup::new(n);
        // Every lookup must be a hit, on both sides.
        for key in setup.keys().take(1000) {
            let found = setup.cache.get_by_key(key).map(|r| r.id());
            let plain = setup
                .plain
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
                .next_back()
                .map(|(_, id)| *id);
            assert!(found.is_some() && found == plain, "{key:?}");
        }
        let mut group = criterion.benchmark_group("get_by_key");
        group.bench_function(BenchmarkId::new("region_cache", n), |b| {
            let mut keys = setup.keys();
            b.iter(|| cache_lookup(&setup.cache, keys.next().unwrap_or_default()))
        });
        group.bench_function(BenchmarkId::new("plain_btreemap", n), |b| {
            let mut keys = setup.keys();
            b.iter(|| plain_lookup(&setup.plain, keys.next().unwrap_or_default()))
        });
        group.finish();
        ratios.push((n, paired_ratio(&setup, 41, 50_000)));
    }
    criterion.final_summary();
    for (n, (ratio, cache, plain)) in ratios {
        println!(
            "get_by_key at {n} Regions: region_cache {cache:.0?}, plain BTreeMap {plain:.0?}, \
             ratio {ratio:.2} (median of 41 alternating batches of 50,000)"
        );
    }
}
