//! The cached leader's store marked unreachable (docs/routing.md, "Store
//! health"): a round tries the voters first and the leader last, through
//! the stores of the voters that show it alive, else by one dial. Against the simulator over
//! loopback gRPC on tokio's paused clock: the leader's store goes down
//! (refusing connections, or dropping packets) and the voters have lost
//! the leader (an election: `NotLeader` without a hint) or still name it;
//! then they elect another, or the old leader's store comes back while
//! this client still marks it unreachable. One client calls again as soon
//! as a call fails.
//!
//! `the_measured_rows` prints the table docs/benchmarks.md quotes:
//! `cargo test --all-features --test routing the_measured_rows --
//! --nocapture`.

use std::sync::Arc;
use std::time::Duration;

use tikv_plan::backoff::DEFAULT_REGION_BACKOFF;
use tikv_plan::pd::PdRpcClient;
use tikv_plan::raw_lowering::new_raw_get_request;
use tikv_plan::request::{CollectSingle, Plan, PlanBuilder, RoutingState};
use tikv_plan::store::TikvConnect;
use tikv_plan::Config;
use tikv_sim::{HangMode, SimCluster};
use tokio::time::Instant;

/// What happens to the Region after its leader's store goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The voters lose the leader (`NotLeader`, no hint) and elect one
    /// of them after the delay; PD learns of it.
    Election,
    /// The voters lose the leader; after the delay its store comes
    /// back and it still leads (no election happened).
    LeaderBack,
    /// The voters keep naming the dead leader, then elect one of them
    /// after the delay; PD learns of it.
    HintedElection,
}

/// How the leader's store is out of reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Its process is down: connections are refused at once.
    Refuse,
    /// Its host drops packets: connects and open connections hang.
    Drop,
}

/// What one client that calls again as soon as a call fails paid, from the
/// fault to its first successful call.
#[derive(Debug)]
struct Row {
    fault: Fault,
    cut: Cut,
    forwarding: bool,
    /// From the fault to the first successful call, on the paused clock.
    recovered_after: Duration,
    /// Calls that failed before it.
    failed_calls: u64,
    /// Rounds that ended without an answer (each reloads the Region).
    failed_rounds: u64,
    /// Connections this client tried to open to the dead store.
    dead_store_connects: u64,
    /// RPCs sent to it on a connection that stopped moving bytes, given up.
    given_up: u64,
    /// RPCs the voters' stores received.
    voter_rpcs: u64,
    /// Calls the voters' stores proxied to the leader's store, and apart
    /// from those, calls they could not get through to it.
    forwarded: (u64, u64),
    /// Calls PD received (Region and store lookups).
    pd_calls: u64,
}

fn config(forwarding: bool) -> Config {
    let mut config = Config::default();
    config.forwarding = forwarding;
    config
}

async fn get(pd: &Arc<PdRpcClient<TikvConnect>>, routing: &Arc<RoutingState>) -> bool {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_get_request(b"k".to_vec().into(), None),
    )
    .routing(routing.clone())
    .retry_multi_region(DEFAULT_REGION_BACKOFF)
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
    .is_ok()
}

/// One run: the leader's store goes down (`fault`), and `after` later the
/// Region recovers as `fault` says.
async fn measure(fault: Fault, cut: Cut, forwarding: bool, after: Duration) -> Row {
    let cluster = Arc::new(
        SimCluster::builder()
            .stores(3)
            .replicas(3)
            .start()
            .await
            .unwrap(),
    );
    let config = config(forwarding);
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &config)
            .await
            .unwrap(),
    );
    let routing = Arc::new(RoutingState::new(&config));
    assert!(get(&pd, &routing).await, "a healthy cluster answers");
    let region = cluster.region_for_key(b"k").unwrap().id;
    let dead = cluster.leader_of(region).unwrap().store_id;
    let winner = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != dead)
        .unwrap();
    let address = cluster.store_addr(dead).unwrap();
    let connects_before = pd.connect_counts(&address).attempts;

    // The election is the scenario's to play (start_election, then
    // transfer_leader), not Raft's clock: the dead store keeps its leaders.
    cluster.keep_leaders(dead, true).unwrap();
    cluster.reset_counters();
    let fault_at = Instant::now();
    match cut {
        Cut::Refuse => cluster.store_down(dead).await,
        Cut::Drop => cluster.store_hang(dead, HangMode::Connect),
    }
    if fault != Fault::HintedElection {
        cluster.start_election(region).unwrap();
    }
    let recovery = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(fault_at + after).await;
            match fault {
                Fault::LeaderBack => match cut {
                    Cut::Refuse => cluster.store_up(dead).await.unwrap(),
                    Cut::Drop => cluster.store_unhang(dead),
                },
                Fault::Election | Fault::HintedElection => {
                    cluster.transfer_leader(region, winner, true).unwrap()
                }
            }
        })
    };
    let mut failed_calls = 0;
    while !get(&pd, &routing).await {
        failed_calls += 1;
        assert!(
            fault_at.elapsed() < Duration::from_secs(120),
            "{fault:?}: no call succeeded in two minutes"
        );
    }
    let recovered_after = fault_at.elapsed();
    recovery.await.unwrap();
    let voters = cluster.store_ids().into_iter().filter(|s| *s != dead);
    let (mut voter_rpcs, mut forwarded) = (0, (0, 0));
    for store in voters {
        let counters = cluster.counters(store);
        let (proxied, failed) = counters.forwarded();
        voter_rpcs += counters.total_requests();
        forwarded = (forwarded.0 + proxied, forwarded.1 + failed);
    }
    let row = Row {
        fault,
        cut,
        forwarding,
        recovered_after,
        failed_calls,
        dead_store_connects: pd.connect_counts(&address).attempts - connects_before,
        given_up: routing.stats().rpcs_given_up,
        failed_rounds: routing.stats().region_invalidations,
        voter_rpcs,
        forwarded,
        pd_calls: cluster.pd_calls().values().sum(),
    };
    cluster.shutdown().await;
    row
}

fn print(rows: &[Row]) {
    println!(
        "| fault | cut | forwarding | first success after | failed calls | failed rounds | \
         connects to the dead store | RPCs given up | voter RPCs | proxied / could not | PD calls |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {:?} | {:?} | {} | {} ms | {} | {} | {} | {} | {} | {} / {} | {} |",
            r.fault,
            r.cut,
            if r.forwarding { "on" } else { "off" },
            r.recovered_after.as_millis(),
            r.failed_calls,
            r.failed_rounds,
            r.dead_store_connects,
            r.given_up,
            r.voter_rpcs,
            r.forwarded.0,
            r.forwarded.1,
            r.pd_calls
        );
    }
}

/// When the Region recovers, in every measured case.
const AFTER: Duration = Duration::from_secs(3);

#[tokio::test(start_paused = true)]
async fn the_measured_rows() {
    let mut rows = Vec::new();
    for fault in [Fault::Election, Fault::LeaderBack, Fault::HintedElection] {
        for cut in [Cut::Refuse, Cut::Drop] {
            for forwarding in [true, false] {
                rows.push(measure(fault, cut, forwarding, AFTER).await);
            }
        }
    }
    print(&rows);
    for row in &rows {
        // The next round after the recovery finds the leader: at most the
        // longest backoff step (500 ms) later, plus one liveness verdict
        // (1 s) when a round waits on a store that drops packets.
        assert!(
            row.recovered_after < AFTER + Duration::from_millis(1_500),
            "{row:?}"
        );
    }
}

/// Within the longest backoff step (500 ms) of the recovery, and the few
/// milliseconds the round itself takes.
fn found_in_the_next_round(row: &Row) -> bool {
    row.recovered_after <= AFTER + Duration::from_millis(520)
}

#[tokio::test(start_paused = true)]
async fn without_forwarding_the_marked_leader_is_dialled_last_in_every_round() {
    let row = measure(Fault::LeaderBack, Cut::Refuse, false, AFTER).await;
    // The first round reached the leader on the connection it had (the
    // store then marked); every later one dialled it once, after the
    // voters, up to the round whose dial the returned store answered.
    assert_eq!(row.dead_store_connects, row.failed_rounds, "{row:?}");
    assert!(row.failed_rounds >= 10, "{row:?}");
    assert_eq!(row.forwarded, (0, 0), "{row:?}");
    assert!(found_in_the_next_round(&row), "{row:?}");
}

#[tokio::test(start_paused = true)]
async fn with_forwarding_a_voters_store_stands_in_for_the_marked_leaders_dial() {
    let row = measure(Fault::Election, Cut::Refuse, true, AFTER).await;
    // Each failed round tried the dead leader once, after the voters: the
    // first call's first round on the connection it had; a later call's
    // first round by a dial (no voter had shown the leader alive yet); every
    // other round through both voters' stores (PD named it again after the
    // reload), and then not by a dial.
    let first_rounds = row.failed_calls + 1;
    assert_eq!(row.dead_store_connects, row.failed_calls, "{row:?}");
    let forwarded_rounds = row.failed_rounds - first_rounds;
    assert_eq!(row.forwarded, (0, 2 * forwarded_rounds), "{row:?}");
    assert!(forwarded_rounds >= 10, "{row:?}");
    assert!(found_in_the_next_round(&row), "{row:?}");
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_store_returns_while_marked_is_found_in_the_next_round() {
    for forwarding in [true, false] {
        let row = measure(Fault::LeaderBack, Cut::Refuse, forwarding, AFTER).await;
        assert!(found_in_the_next_round(&row), "{row:?}");
        // With forwarding it answered through a voter's store (the route
        // proven first: one call or two, by transport); without, a dial.
        assert_eq!(row.forwarded.0 > 0, forwarding, "{row:?}");
    }
}
