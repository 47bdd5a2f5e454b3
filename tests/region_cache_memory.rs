//! Memory of the Region cache, measured with a counting allocator: what one
//! cached Region costs (the Region, its keys and peers, both indexes, the
//! eviction queue), that a hit allocates nothing, and that the capacity
//! bounds the total (maps that only grow are bounded).
//!
//! The budget is 300 bytes per Region at a realistic shape: three
//! voters, the first leading, and boundaries of 16 and of 24 bytes (TiDB
//! record keys are `t` + table id + `_r` + handle, 19 bytes raw). Two
//! figures are checked against it: the bytes requested from the allocator,
//! and the same rounded up to the chunks glibc's malloc hands out (8 bytes
//! of header, 16-byte steps, 32 at least), which is closer to what the
//! process pays.
//!
//! Counts are per thread, so the tests of this file can run in parallel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use tikv_plan::__internals::RegionCache;
use tikv_plan::proto::metapb;
use tikv_plan::region::RegionWithLeader;

struct Counting;

#[derive(Clone, Copy, Default)]
struct Counts {
    /// Bytes requested and not yet freed.
    live: isize,
    /// The same, each allocation rounded up to a glibc malloc chunk.
    live_chunks: isize,
    /// Allocations made.
    allocations: usize,
}

thread_local! {
    static COUNTS: Cell<Counts> = const {
        Cell::new(Counts { live: 0, live_chunks: 0, allocations: 0 })
    };
}

/// The chunk glibc's malloc uses for `size` bytes on 64-bit targets.
fn chunk(size: usize) -> isize {
    ((size + 8 + 15) & !15).max(32) as isize
}

fn track(size: usize, sign: isize) {
    // `try_with`: the thread's counters may already be gone while it exits.
    let _ = COUNTS.try_with(|c| {
        let mut counts = c.get();
        counts.live += sign * size as isize;
        counts.live_chunks += sign * chunk(size);
        if sign > 0 {
            counts.allocations += 1;
        }
        c.set(counts);
    });
}

fn counts() -> Counts {
    COUNTS.with(|c| c.get())
}

// SAFETY: delegates every call to the system allocator unchanged; only
// counts the bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size(), 1);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(layout.size(), -1);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Region `i` of a layout with `key_len`-byte boundaries (`t`, zeros, then
/// the decimal index) and three voters, led by the first.
fn region(i: u64, key_len: usize) -> RegionWithLeader {
    let key = |n: u64| {
        let digits = key_len - 1;
        format!("t{n:0digits$}").into_bytes()
    };
    let peers: Vec<metapb::Peer> = (1..=3)
        .map(|s| metapb::Peer {
            id: i * 10 + s,
            store_id: s,
            ..Default::default()
        })
        .collect();
    let leader = peers.first().copied();
    RegionWithLeader::new(
        metapb::Region {
            id: i + 1,
            start_key: key(i),
            end_key: key(i + 1),
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

/// Bytes per Region (requested, and in malloc chunks) of a cache holding
/// `n` Regions with `key_len`-byte keys.
fn bytes_per_region(n: u64, key_len: usize) -> (isize, isize) {
    // One insert and drop first: the cache's first log event registers its
    // call site with `tracing` (a one-time allocation that stays).
    drop({
        let warm = RegionCache::with_capacity(1);
        warm.insert(region(0, key_len));
        warm.insert(region(1, key_len));
        warm
    });
    let before = counts();
    let cache = RegionCache::with_capacity(n as usize);
    for i in 0..n {
        cache.insert(region(i, key_len));
    }
    assert_eq!(cache.len(), n as usize);
    let full = counts();
    let per_region = (full.live - before.live) / n as isize;
    let per_region_chunks = (full.live_chunks - before.live_chunks) / n as isize;
    drop(cache);
    assert_eq!(counts().live, before.live, "the cache frees what it held");
    (per_region, per_region_chunks)
}

#[test]
fn a_region_costs_at_most_300_bytes_at_16_and_24_byte_keys() {
    const BUDGET: isize = 300;
    for key_len in [16, 24] {
        let (bytes, chunks) = bytes_per_region(100_000, key_len);
        println!(
            "region cache: {bytes} bytes per cached Region requested, {chunks} in malloc chunks \
             (100,000 Regions, {key_len}-byte keys, 3 voters)"
        );
        assert!(
            bytes <= BUDGET,
            "{key_len}-byte keys: {bytes} bytes per Region"
        );
        assert!(
            chunks <= BUDGET,
            "{key_len}-byte keys: {chunks} bytes per Region in chunks"
        );
    }
}

#[test]
fn a_hit_allocates_nothing_and_shares_the_cached_region() {
    let cache = RegionCache::new();
    for i in 0..1_000 {
        cache.insert(region(i, 19));
    }
    let key = region(500, 19).region.start_key;
    let before = counts().allocations;
    let by_key = cache.get_by_key(&key);
    let by_id = cache.get_by_id(501);
    let again = cache.get_by_key(&key);
    assert_eq!(counts().allocations, before, "a hit allocated");
    let (by_key, by_id, again) = (by_key.unwrap(), by_id.unwrap(), again.unwrap());
    assert_eq!(by_key.id(), 501);
    assert!(Arc::ptr_eq(&by_key, &by_id) && Arc::ptr_eq(&by_key, &again));
    // The cache's two indexes and our three handles.
    assert_eq!(Arc::strong_count(&by_key), 5);
}

#[test]
fn memory_stops_growing_at_the_capacity() {
    const N: u64 = 50_000;
    let before = counts().live;
    let cache = RegionCache::with_capacity(N as usize);
    for i in 0..N {
        cache.insert(region(i, 16));
    }
    let full = counts().live - before;
    // Three times as many Regions again: the memory stays at the capacity's.
    for i in N..4 * N {
        cache.insert(region(i, 16));
    }
    assert_eq!(cache.len(), N as usize);
    let after = counts().live - before;
    assert!(
        after < full * 2,
        "memory kept growing past the capacity: {full} -> {after} bytes"
    );
}
