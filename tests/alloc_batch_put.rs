//! A large batch put allocates in proportion to its size, not to its size
//! times its number of shards: every shard's request is built without the
//! other shards' pairs (`Shardable::clone_then_apply_shard`), and re-aimed
//! (not copied) per attempt. The plan here is built as a caller builds one,
//! with `PlanBuilder::new`.
//!
//! A counting global allocator (this binary's own) adds up every byte
//! allocated while the plan is built and run (a reallocation counts its new
//! size); the budget is [`BUDGET_FACTOR`] = 4 times the payload (keys +
//! values). What the plan must allocate, with 1 KB values: one copy of the
//! keys and values when it shards the request (1×; the caller's request
//! stays whole, since a plan can run again); the shards' wire pairs (0.5×: a
//! prost `KvPair` is 520 bytes before its key and value, for its unused
//! error field); the entries sorted, grouped by Region and batched (~0.4×);
//! and per shard a fixed cost that does not grow with the payload: the
//! shard's retry-loop future (each inner future held once, pinned where it
//! is made) and its small boxes, under 1× at 16 KB shards. Copying the
//! whole request per shard instead allocates about 300× for 2,000 pairs
//! (docs/benchmarks.md has the measurements).
//!
//! The test runs alone in its binary: the counter is process-wide, and the
//! one test here runs the two sizes one after the other (the small one
//! first, so a regression fails before it can exhaust memory).
#![cfg(feature = "mock")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::request::{CollectError, Keyspace, Plan, PlanBuilder};
use tikv_plan::Backoff;

/// The allowed bytes allocated per payload byte (see the module docs).
const BUDGET_FACTOR: u64 = 4;

/// Counts the bytes every allocation asks for (a reallocation counts its
/// new size, as if it allocated afresh).
struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const REGIONS: u64 = 64;

/// 64 Regions, each led on one of three stores, cutting the key space
/// `k00000000…` evenly for `pairs` keys.
fn cluster(pairs: u64) -> Arc<MockPdClient> {
    let step = pairs.div_ceil(REGIONS);
    let regions = (0..REGIONS)
        .map(|i| {
            let start = if i == 0 { Vec::new() } else { key(i * step) };
            let end = if i == REGIONS - 1 {
                Vec::new()
            } else {
                key((i + 1) * step)
            };
            let id = i + 1;
            mock::region(
                id,
                &start,
                &end,
                &[
                    mock::voter(id * 10 + 1, 1),
                    mock::voter(id * 10 + 2, 2),
                    mock::voter(id * 10 + 3, 3),
                ],
                Some(id * 10 + 1 + i % 3),
            )
        })
        .collect();
    Arc::new(MockPdClient::new(regions))
}

/// A 16-byte key.
fn key(i: u64) -> Vec<u8> {
    format!("k{i:015}").into_bytes()
}

/// Runs a batch put of `pairs` pairs with `value_len`-byte values and
/// returns (payload bytes, bytes allocated by planning and running it,
/// pairs the stores received, RPCs sent).
async fn batch_put(pairs: u64, value_len: usize) -> (u64, u64, usize, usize) {
    let pd = cluster(pairs);
    let received = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&received);
    pd.set_dispatch_hook(move |_peer, request| {
        if let Some(put) = request
            .as_any()
            .downcast_ref::<kvrpcpb::RawBatchPutRequest>()
        {
            counted.fetch_add(put.pairs.len(), Ordering::Relaxed);
        }
        Ok(Box::new(kvrpcpb::RawBatchPutResponse::default()))
    });
    let request = kvrpcpb::RawBatchPutRequest {
        pairs: (0..pairs)
            .map(|i| kvrpcpb::KvPair {
                key: key(i),
                value: vec![(i % 251) as u8; value_len],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let payload: u64 = request
        .pairs
        .iter()
        .map(|p| (p.key.len() + p.value.len()) as u64)
        .sum();

    let before = ALLOCATED.load(Ordering::Relaxed);
    let plan = PlanBuilder::new(pd.clone(), Keyspace::Disable, request)
        .retry_multi_region(Backoff::no_backoff())
        .merge(CollectError)
        .plan();
    let result = plan.execute().await;
    let allocated = ALLOCATED.load(Ordering::Relaxed) - before;
    assert!(result.is_ok(), "the batch put failed: {result:?}");
    drop(plan);
    (
        payload,
        allocated,
        received.load(Ordering::Relaxed),
        pd.dispatches(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_put_allocates_in_proportion_to_its_size() {
    // A small batch first (~2 MB in ~130 shards), then the large one
    // (~50 MB: 50,000 pairs of a 16-byte key and a 1 KB value, in ~3,200
    // shards of at most 16 KB across 64 Regions).
    for (pairs, value_len) in [(2_000u64, 1_024usize), (50_000, 1_024)] {
        let (payload, allocated, received, rpcs) = batch_put(pairs, value_len).await;
        assert_eq!(received as u64, pairs, "every pair reaches a store once");
        assert!(
            rpcs as u64 > REGIONS,
            "the batch is cut into many shards ({rpcs} RPCs)"
        );
        let ratio = allocated as f64 / payload as f64;
        println!(
            "{pairs} pairs: payload {payload} B, allocated {allocated} B ({ratio:.2}x), {rpcs} RPCs"
        );
        assert!(
            allocated <= BUDGET_FACTOR * payload,
            "{pairs} pairs in {rpcs} RPCs allocated {allocated} B, {ratio:.1}x the \
             {payload} B payload (budget {BUDGET_FACTOR}x)"
        );
    }
}
