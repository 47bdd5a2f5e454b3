//! Property tests of the whole plan through the public mock: for
//! random answer sequences, every dispatched request is a leader request
//! (`replica_read` and `stale_read` never set), goes only to peers that can
//! lead, carries the cached Region's id and epoch, and a write is never
//! sent again once an attempt may have reached a store.
#![cfg(feature = "mock")]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::common::*;
use proptest::prelude::*;
use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::proto::{errorpb, metapb};
use tikv_plan::{Backoff, Error};
use tikv_plan_proto::meta::can_become_leader;

#[derive(Debug, Clone, Copy)]
enum Reply {
    Accept,
    NotLeader(Option<usize>),
    Busy(u32),
    EpochNotMatch,
    RegionNotFound,
    Transport,
    ClientTimeout,
    Deadline,
    Fatal,
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        3 => Just(Reply::Accept),
        4 => proptest::option::of(0usize..5).prop_map(Reply::NotLeader),
        2 => prop_oneof![Just(0u32), Just(7u32)].prop_map(Reply::Busy),
        1 => Just(Reply::EpochNotMatch),
        1 => Just(Reply::RegionNotFound),
        2 => Just(Reply::Transport),
        2 => Just(Reply::ClientTimeout),
        1 => Just(Reply::Deadline),
        1 => Just(Reply::Fatal),
    ]
}

/// Peers `1i@i` for i in 1..=n; maybe the last a learner, the one before a
/// witness; a leader index that may name none of them.
fn peers() -> impl Strategy<Value = (Vec<metapb::Peer>, Option<u64>)> {
    (3u64..=5, any::<bool>(), any::<bool>(), 0u64..6).prop_map(|(n, learner, witness, leader)| {
        let mut peers: Vec<metapb::Peer> = (1..=n).map(|i| mock::voter(10 + i, i)).collect();
        if learner {
            peers[n as usize - 1] = mock::learner(10 + n, n);
        }
        if witness {
            peers[n as usize - 2] = mock::witness(9 + n, n - 1);
        }
        let leader = (1..=n).contains(&leader).then_some(10 + leader);
        (peers, leader)
    })
}

fn run(
    (peers, leader): (Vec<metapb::Peer>, Option<u64>),
    replies: Vec<Reply>,
    write: bool,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    runtime.block_on(async move {
        let region = mock::region(1, b"", b"", &peers, leader);
        let epoch = region.region.region_epoch;
        let pd = Arc::new(MockPdClient::new(vec![region]));
        let routing = routing();
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        let hook_peers = peers.clone();
        let hook_script = Arc::clone(&script);
        let answered: Arc<Mutex<Vec<Reply>>> = Arc::default();
        let hook_answered = Arc::clone(&answered);
        pd.set_dispatch_hook(move |peer, req| {
            let next = hook_script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Reply::Accept);
            hook_answered.lock().unwrap().push(next);
            match next {
                Reply::Accept => accept(peer, req),
                Reply::NotLeader(hint) => region_error(
                    req,
                    mock::not_leader(1, hint.and_then(|i| hook_peers.get(i).copied())),
                ),
                Reply::Busy(wait) => region_error(req, mock::server_is_busy(wait, 0)),
                Reply::EpochNotMatch => region_error(
                    req,
                    errorpb::Error {
                        epoch_not_match: Some(Default::default()),
                        ..Default::default()
                    },
                ),
                Reply::RegionNotFound => region_error(
                    req,
                    errorpb::Error {
                        region_not_found: Some(Default::default()),
                        ..Default::default()
                    },
                ),
                Reply::Transport => unavailable(),
                Reply::ClientTimeout => client_timeout(),
                Reply::Deadline => deadline(),
                Reply::Fatal => Err(Error::from(tonic::Status::invalid_argument("no"))),
            }
        });
        let backoff = Backoff::no_jitter_backoff(2, 50, 4);
        let result = if write {
            put(&pd, &routing).await.map(|_| ())
        } else {
            get_with(&pd, Some(&routing), backoff, b"k")
                .await
                .map(|_| ())
        };
        let log = pd.dispatch_log();
        for d in &log {
            prop_assert!(!d.context.replica_read, "replica_read set: {d:?}");
            prop_assert!(!d.context.stale_read, "stale_read set: {d:?}");
            prop_assert!(can_become_leader(&d.peer), "sent to {:?}", d.peer);
            prop_assert_eq!(d.context.region_id, 1);
            prop_assert_eq!(d.context.region_epoch, epoch);
            prop_assert_eq!(d.context.peer, Some(d.peer));
        }
        if write {
            // After the first answer that may hide a delivery, nothing more
            // is sent, and the write ends undetermined.
            let answered = answered.lock().unwrap().clone();
            let lost = answered.iter().position(|r| {
                matches!(r, Reply::Transport | Reply::ClientTimeout | Reply::Deadline)
            });
            if let Some(i) = lost {
                prop_assert_eq!(log.len(), i + 1, "re-sent after {:?}", answered);
                prop_assert!(
                    matches!(&result, Err(e) if e.is_undetermined()),
                    "{:?}",
                    result
                );
            }
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_dispatch_is_a_leader_request_to_a_voter(
        peers in peers(),
        replies in proptest::collection::vec(reply(), 0..24),
        write in any::<bool>(),
    ) {
        run(peers, replies, write)?;
    }
}
