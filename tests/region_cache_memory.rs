//! Memory of the Region cache, measured with a counting allocator: how many
//! bytes one cached Region costs, and that the capacity bounds the total
//! (issue 8: maps that only grow are bounded). The figure is printed for
//! README; the assertion is only that memory stops growing at the capacity.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use tikv_plan::proto::metapb;
use tikv_plan::region::{RegionCache, RegionWithLeader};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: delegates every call to the system allocator unchanged; only
// counts the bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Region `i` of a layout with 16-byte keys and three voters, led by the
/// first.
fn region(i: u64) -> RegionWithLeader {
    let key = |n: u64| format!("t{n:015}").into_bytes();
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

#[test]
fn memory_per_region_and_the_capacity_bound() {
    const N: u64 = 50_000;
    let before = LIVE.load(Ordering::Relaxed);
    let cache = RegionCache::with_capacity(N as usize);
    for i in 0..N {
        cache.insert(region(i));
    }
    let full = LIVE.load(Ordering::Relaxed) - before;
    let per_region = full / N as isize;
    println!(
        "region cache: {per_region} bytes per cached Region ({N} Regions, 16-byte keys, 3 peers)"
    );
    // Three times as many Regions again: the memory stays at the capacity's.
    for i in N..4 * N {
        cache.insert(region(i));
    }
    assert_eq!(cache.len(), N as usize);
    let after = LIVE.load(Ordering::Relaxed) - before;
    assert!(
        after < full * 2,
        "memory kept growing past the capacity: {full} -> {after} bytes"
    );
}
