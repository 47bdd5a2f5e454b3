//! Test your application against leader loss: a template for your own
//! tests with the simulated cluster (`tikv-sim`).
//!
//! The application here is a small login tracker on `RawClient`
//! ([`LoginTracker`]); put yours in its place. Each test starts a
//! `SimCluster` on 127.0.0.1, runs the application, then makes the leader
//! of the Region holding its keys unreachable while PD still names it as
//! the leader ([`lose_leader`]), and checks that the application keeps
//! working: its writes land, its reads see them, its scans are whole. Then
//! it checks that the test tested what it meant to: the client went
//! through voter fallback, a voter on another store leads now, and PD
//! still names the old leader.
//!
//! Three ways to lose a leader ([`Fault`]):
//!
//! - its store goes down (connections refused), and the Region's voters
//!   have no leader until a request wakes one, which takes over at once;
//! - the same, but the woken voter first answers `NotLeader` without a
//!   hint (an election takes a moment), and serves the next request;
//! - its host drops packets (`HangMode::Connect`): connections hang
//!   instead of being refused, so the client waits for its own timeouts.
//!
//! In each, the first write sent to the old leader may end undetermined:
//! when the host is partitioned (the request may be sitting in it), and
//! now and then when the store went down (its connections were reset, and
//! the client cannot always tell that its request never left: it reports
//! a transport error after sending). The application settles such a write
//! by reading back, so the tests pass either way.
//!
//! No test sleeps: each fault is in place when the call that makes it
//! returns (`store_down_cold` returns once the port is closed; `make_cold` and
//! `store_hang` change the cluster's state at once), and the only waiting
//! is the client's own timeouts, kept short by the test's `Config`.
//!
//! To use it in your crate: `tikv-sim` as a dev-dependency, this file under
//! `tests/` (drop `main`), and your application where `LoginTracker` is.
//! Here it is an example with tests (`test = true` in Cargo.toml), so both
//! of these run it:
//!
//! ```text
//! cargo test --example leader_loss_test
//! cargo run --example leader_loss_test
//! ```

use std::time::Duration;

use tikv_plan::request::RoutingStats;
use tikv_plan::{Backoff, Config, Error, RawClient};
use tikv_sim::proto::metapb;
use tikv_sim::{ColdMode, HangMode, SimCluster};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// ---- the application under test ----

/// Records each user's last login under `login/<user>`.
#[derive(Clone)]
struct LoginTracker {
    client: RawClient,
}

fn login_key(user: &str) -> String {
    format!("login/{user}")
}

impl LoginTracker {
    async fn connect(pd_endpoints: Vec<String>, config: Config) -> Result<Self, Error> {
        Ok(LoginTracker {
            client: RawClient::new_with_config(pd_endpoints, config).await?,
        })
    }

    /// Records a login. A write whose outcome is undetermined (it may have
    /// reached a store that then went silent) is read back; only when the
    /// read shows it missing is it written again.
    async fn record_login(&self, user: &str, at: &str) -> Result<(), BoxError> {
        let key = login_key(user);
        for _ in 0..3 {
            match self.client.put(key.clone(), at.to_owned()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.undetermined_anywhere() => {
                    let found = self.client.get(key.clone()).await?;
                    if found.as_deref() == Some(at.as_bytes()) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(format!("the login of {user} could not be recorded").into())
    }

    async fn last_login(&self, user: &str) -> Result<Option<String>, BoxError> {
        match self.client.get(login_key(user)).await? {
            None => Ok(None),
            Some(value) => Ok(Some(String::from_utf8(value)?)),
        }
    }

    /// Every user with a recorded login, in order.
    async fn users(&self) -> Result<Vec<String>, BoxError> {
        let pairs = self
            .client
            .scan("login/".to_owned().."login0".to_owned(), 1000)
            .await?;
        pairs
            .into_iter()
            .map(|pair| {
                let key = String::from_utf8(Vec::from(pair.key().clone()))?;
                Ok(key.trim_start_matches("login/").to_owned())
            })
            .collect()
    }

    /// What the client's routing did (for the test's own checks).
    fn routing_stats(&self) -> RoutingStats {
        self.client.routing_stats()
    }
}

// ---- the test harness ----

const USERS: [&str; 6] = ["alice", "bob", "carol", "mallory", "trent", "zoe"];

/// How the leader is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Its store goes down; a woken voter becomes leader in `ColdMode`.
    StoreDown(ColdMode),
    /// Its host drops packets; a woken voter becomes leader at once.
    Partitioned,
}

/// The leader that was lost.
#[derive(Debug)]
struct LostLeader {
    region_id: u64,
    old_leader: metapb::Peer,
}

/// Three stores, two Regions (split at `login/m`), three voters each.
async fn start_cluster() -> Result<SimCluster, BoxError> {
    Ok(SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![b"login/m".to_vec()])
        .start()
        .await?)
}

/// Short timeouts: a partitioned store costs one of them, not seconds.
fn test_config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300))
        .with_region_backoff(Backoff::no_jitter_backoff(10, 100, 5))
        .with_request_deadline(Duration::from_secs(3))
}

/// Makes the leader of the Region holding `key` unreachable. The Region
/// has no leader until a request wakes a voter; PD keeps naming the old
/// leader.
async fn lose_leader(
    cluster: &SimCluster,
    key: &[u8],
    fault: Fault,
) -> Result<LostLeader, BoxError> {
    let region_id = cluster.region_for_key(key).ok_or("no Region")?.id;
    let old_leader = cluster.leader_of(region_id).ok_or("no leader")?;
    match fault {
        Fault::StoreDown(mode) => {
            cluster.make_cold(region_id, mode)?;
            cluster.store_down_cold(old_leader.store_id).await?;
        }
        Fault::Partitioned => {
            cluster.make_cold(region_id, ColdMode::AcceptAtOnce)?;
            cluster.store_hang(old_leader.store_id, HangMode::Connect);
        }
    }
    Ok(LostLeader {
        region_id,
        old_leader,
    })
}

fn ensure(condition: bool, what: String) -> Result<(), BoxError> {
    if condition {
        Ok(())
    } else {
        Err(what.into())
    }
}

/// What the scenario saw, for the tests' extra checks and for `main`.
#[derive(Debug)]
struct Report {
    lost: LostLeader,
    new_leader_store: Option<u64>,
    pd_leader: Option<metapb::Peer>,
    fallback_successes: u64,
    /// Writes that ended undetermined (and were settled by reading back).
    undetermined_writes: u64,
}

/// The scenario: the application works, the leader of its Region is lost,
/// the application keeps working. Every expectation failure is an error.
async fn leader_loss_scenario(fault: Fault) -> Result<Report, BoxError> {
    let cluster = start_cluster().await?;
    let app = LoginTracker::connect(cluster.pd_endpoints(), test_config()).await?;

    // Before: the application works, and its client has cached the leaders.
    for user in USERS {
        app.record_login(user, "09:00").await?;
    }
    ensure(
        app.users().await? == USERS,
        "every user listed before the fault".to_owned(),
    )?;

    let lost = lose_leader(&cluster, login_key("alice").as_bytes(), fault).await?;

    // After: the same calls still work, and see the new writes.
    for user in USERS {
        app.record_login(user, "09:05").await?;
    }
    for user in USERS {
        let last = app.last_login(user).await?;
        ensure(
            last.as_deref() == Some("09:05"),
            format!("{user}'s last login is {last:?}, expected 09:05"),
        )?;
    }
    let users = app.users().await?;
    ensure(users == USERS, format!("users after the fault: {users:?}"))?;

    let report = Report {
        new_leader_store: cluster.leader_of(lost.region_id).map(|p| p.store_id),
        pd_leader: cluster.pd_leader_of(lost.region_id),
        fallback_successes: app.routing_stats().fallback_successes,
        undetermined_writes: app.routing_stats().undetermined_writes,
        lost,
    };
    if fault == Fault::Partitioned {
        cluster.store_unhang(report.lost.old_leader.store_id);
    }
    cluster.shutdown().await;
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    for fault in [
        Fault::StoreDown(ColdMode::AcceptAtOnce),
        Fault::StoreDown(ColdMode::NotLeaderFirst),
        Fault::Partitioned,
    ] {
        let started = std::time::Instant::now();
        let report = leader_loss_scenario(fault).await?;
        println!(
            "{fault:?}: the application kept working ({:?}). Region {} led from store {} before, from store {:?} now; PD still names store {:?}; fallback successes: {}; undetermined writes settled by reading back: {}",
            started.elapsed(),
            report.lost.region_id,
            report.lost.old_leader.store_id,
            report.new_leader_store,
            report.pd_leader.map(|p| p.store_id),
            report.fallback_successes,
            report.undetermined_writes,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every leader-loss test checks beyond the application's own
    /// results: the fault happened as intended and was survived by fallback.
    fn assert_survived_by_fallback(report: &Report) {
        let old_store = report.lost.old_leader.store_id;
        assert!(
            report.fallback_successes >= 1,
            "the client never needed voter fallback: the fault missed ({report:?})"
        );
        assert!(
            report.new_leader_store.is_some_and(|s| s != old_store),
            "a voter on another store should lead now ({report:?})"
        );
        assert_eq!(
            report.pd_leader.as_ref(),
            Some(&report.lost.old_leader),
            "PD should still name the old leader"
        );
    }

    #[tokio::test]
    async fn logins_survive_the_leader_store_going_down() -> Result<(), BoxError> {
        let report = leader_loss_scenario(Fault::StoreDown(ColdMode::AcceptAtOnce)).await?;
        assert_survived_by_fallback(&report);
        Ok(())
    }

    #[tokio::test]
    async fn logins_survive_an_election_that_takes_a_moment() -> Result<(), BoxError> {
        let report = leader_loss_scenario(Fault::StoreDown(ColdMode::NotLeaderFirst)).await?;
        assert_survived_by_fallback(&report);
        Ok(())
    }

    #[tokio::test]
    async fn logins_survive_a_partitioned_leader_host() -> Result<(), BoxError> {
        let report = leader_loss_scenario(Fault::Partitioned).await?;
        assert_survived_by_fallback(&report);
        Ok(())
    }

    /// A test of one step, written out in full: the shape to copy for
    /// checks of your own.
    #[tokio::test]
    async fn a_read_right_after_the_leader_store_dies_sees_the_last_write() -> Result<(), BoxError>
    {
        let cluster = start_cluster().await?;
        let app = LoginTracker::connect(cluster.pd_endpoints(), test_config()).await?;
        app.record_login("zoe", "10:00").await?;

        let lost = lose_leader(
            &cluster,
            login_key("zoe").as_bytes(),
            Fault::StoreDown(ColdMode::AcceptAtOnce),
        )
        .await?;
        assert_eq!(
            cluster.leader_of(lost.region_id),
            None,
            "the Region is cold"
        );

        assert_eq!(app.last_login("zoe").await?.as_deref(), Some("10:00"));
        assert!(app.routing_stats().fallback_successes >= 1);
        let new_leader = cluster.leader_of(lost.region_id).map(|p| p.store_id);
        assert!(new_leader.is_some_and(|s| s != lost.old_leader.store_id));
        cluster.shutdown().await;
        Ok(())
    }
}
