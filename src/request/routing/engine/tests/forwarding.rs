//! Table tests of forwarding in the shard retry engine ([routing.md,
//! "Forwarding"](crate::spec::routing#forwarding-beyond)): when the cached
//! leader's store cannot be reached from this client and a voter names that
//! leader, the leader is sent the request through the voter's store.

use super::*;

fn forwarding() -> RequestPolicy {
    RequestPolicy {
        forwarding: true,
        ..RequestPolicy::default()
    }
}

fn via(next: &Next) -> Option<(u64, StoreId)> {
    match next {
        Next::Map {
            peer,
            via: Some(proxy),
        } => Some((peer.id, *proxy)),
        _ => None,
    }
}

/// (target, proxy) pairs.
type Routes = Vec<(StoreId, StoreId)>;

/// The routes that worked and those that failed.
fn proxy_effects(run: &Run<'_>) -> (Routes, Routes) {
    let mut worked = Vec::new();
    let mut failed = Vec::new();
    for effect in &run.effects {
        match effect {
            Effect::ProxyWorked { target, proxy } => worked.push((*target, *proxy)),
            Effect::ProxyFailed { target, proxy } => failed.push((*target, *proxy)),
            _ => {}
        }
    }
    (worked, failed)
}

fn store_failures(run: &Run<'_>) -> Vec<StoreId> {
    run.effects
        .iter()
        .filter_map(|e| match e {
            Effect::StoreFailed(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// Starts the run's first round: store health says the leader's store is
/// `unreachable` or not, and the route to it `proxy` is remembered.
fn start(run: &mut Run<'_>, unreachable: bool, proxy: Option<StoreId>) -> Next {
    assert!(matches!(run.step(Event::Start), Next::CheckLeaderStore(1)));
    run.step(Event::LeaderStore { unreachable, proxy })
}

/// Leader 11 on store 1 refuses this client; voter 12 names it.
fn leader_cut_off_and_named(run: &mut Run<'_>) -> Next {
    assert_eq!(mapped_peer(&run.start()), Some(11));
    assert_eq!(mapped_peer(&run.fail(refused())), Some(12));
    run.answer(Some(not_leader(Some(voter(11, 1)))))
}

#[test]
fn a_voter_naming_an_unreachable_leader_forwards_to_it_through_its_own_store() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    let next = leader_cut_off_and_named(&mut run);
    assert_eq!(via(&next), Some((11, 2)), "the leader, through store 2");
    let next = run.answer(None);
    assert!(matches!(next, Next::Done(Ok(()))), "{next:?}");
    assert!(
        run.leader_updates().is_empty(),
        "the cached leader answered: the cache stays"
    );
    assert_eq!(proxy_effects(&run), (vec![(1, 2)], vec![]));
    assert_eq!(run.count(Counter::Forwarded), 1);
    assert_eq!(
        store_failures(&run),
        vec![1],
        "only the leader's store failed"
    );
}

#[test]
fn without_forwarding_the_round_goes_on_through_the_voters() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), policy(), &scope);
    let next = leader_cut_off_and_named(&mut run);
    assert_eq!(mapped_peer(&next), Some(13));
    assert_eq!(run.count(Counter::Forwarded), 0);
}

#[test]
fn a_voter_naming_a_reachable_leader_does_not_forward() {
    // The leader answered: it is reachable, the hint changes nothing.
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    let next = run.start();
    assert_eq!(mapped_peer(&next), Some(11));
    // Leader answered NotLeader without hint: the voters go next.
    assert_eq!(mapped_peer(&run.answer(Some(not_leader(None)))), Some(12));
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(mapped_peer(&next), Some(13), "no forwarding: {next:?}");
}

#[test]
fn store_health_and_a_remembered_proxy_start_the_round_on_the_route() {
    // Store health: the leader's store cools down; the voters go first and
    // the first that names the leader proxies.
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    assert!(matches!(run.step(Event::Start), Next::CheckLeaderStore(1)));
    let next = run.step(Event::LeaderStore {
        unreachable: true,
        proxy: None,
    });
    assert_eq!(mapped_peer(&next), Some(12));
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(via(&next), Some((11, 2)));

    // A route remembered client-wide: the first attempt takes it.
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    let next = start(&mut run, false, Some(3));
    assert_eq!(via(&next), Some((11, 3)));
    assert!(matches!(run.answer(None), Next::Done(Ok(()))));
    assert_eq!(run.count(Counter::FallbackAttempt), 0);
    assert_eq!(proxy_effects(&run), (vec![(1, 3)], vec![]));

    // ... unless forwarding is off for the request.
    let mut run = Run::new(region3(Some(11)), policy(), &scope);
    let next = start(&mut run, false, Some(3));
    assert_eq!(mapped_peer(&next), Some(11));
}

#[test]
fn a_write_that_may_have_reached_the_leader_through_a_proxy_is_undetermined_and_not_resent() {
    for failure in [transport(), client_timeout()] {
        let scope = RequestScope::default();
        let mut policy = forwarding();
        policy.never_resend();
        let mut run = Run::new(region3(Some(11)), policy, &scope);
        assert_eq!(via(&leader_cut_off_and_named(&mut run)), Some((11, 2)));
        let next = run.fail(failure);
        match &next {
            Next::Done(Err(e)) => assert!(e.is_undetermined(), "{e}"),
            other => panic!("sent again: {other:?}"),
        }
        assert_eq!(run.count(Counter::Undetermined), 1);
    }
}

#[test]
fn a_failed_proxy_is_dropped_and_the_next_voter_naming_the_leader_proxies() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    assert_eq!(via(&leader_cut_off_and_named(&mut run)), Some((11, 2)));
    // Store 2 cannot forward (say it lost its way to store 1).
    let next = run.step(Event::MappingFailed(transport()));
    assert_eq!(mapped_peer(&next), Some(13), "the next voter");
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(via(&next), Some((11, 3)), "store 3 proxies now");
    assert!(matches!(run.answer(None), Next::Done(Ok(()))));
    assert_eq!(proxy_effects(&run), (vec![(1, 3)], vec![(1, 2)]));
    assert_eq!(
        store_failures(&run),
        vec![1],
        "a failed route marks neither store"
    );
}

#[test]
fn each_store_proxies_at_most_once_a_round() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    let next = start(&mut run, false, Some(2));
    assert_eq!(via(&next), Some((11, 2)));
    assert_eq!(mapped_peer(&run.fail(transport())), Some(12));
    // Store 2 names the leader again: it proxied this round already.
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(mapped_peer(&next), Some(13));
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(via(&next), Some((11, 3)));
    // Store 3 fails too: the round is over; every voter said NotLeader and
    // the leader could not be reached, so the Region is reloaded.
    let next = run.fail(transport());
    assert!(matches!(next, Next::Sleep(_)), "{next:?}");
    assert_eq!(run.region_invalidations(), 1);
}

#[test]
fn the_leader_moving_while_forwarded_is_followed_directly() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    start(&mut run, false, Some(2));
    // Through the proxy, the old leader names the new one.
    let next = run.answer(Some(not_leader(Some(voter(13, 3)))));
    assert!(matches!(next, Next::CheckLeaderStore(3)), "{next:?}");
    assert_eq!(run.leader_updates(), vec![13]);
    let next = run.step(Event::LeaderStore {
        unreachable: false,
        proxy: None,
    });
    assert_eq!(mapped_peer(&next), Some(13), "directly");
}

#[test]
fn pd_naming_the_unreachable_leader_again_lets_a_hintless_voter_proxy() {
    for pd_names in [Some(11), Some(13)] {
        let scope = RequestScope::default();
        let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
        assert_eq!(mapped_peer(&run.start()), Some(11));
        assert_eq!(mapped_peer(&run.fail(refused())), Some(12));
        // Voters name no leader: no proof the leader lives, no forwarding.
        assert_eq!(mapped_peer(&run.answer(Some(not_leader(None)))), Some(13));
        let next = run.answer(Some(not_leader(None)));
        assert!(matches!(next, Next::Sleep(_)), "{next:?}");
        assert_eq!(run.region_invalidations(), 1, "reloaded from PD");
        assert!(matches!(run.step(Event::Slept), Next::Reshard));
        let next = run.step(Event::Resharded(region3(pd_names)));
        let leader_store = if pd_names == Some(11) { 1 } else { 3 };
        assert!(matches!(next, Next::CheckLeaderStore(s) if s == leader_store));
        let next = run.step(Event::LeaderStore {
            unreachable: pd_names == Some(11),
            proxy: None,
        });
        if pd_names == Some(13) {
            // Another leader: it is tried directly, nothing is forwarded.
            assert_eq!(mapped_peer(&next), Some(13));
            continue;
        }
        // PD still names peer 11: the first voter that answers proxies.
        assert_eq!(mapped_peer(&next), Some(12));
        let next = run.answer(Some(not_leader(None)));
        assert_eq!(via(&next), Some((11, 2)));
        assert!(matches!(run.answer(None), Next::Done(Ok(()))));
    }
}

#[test]
fn a_leader_that_timed_out_is_forwarded_to_but_one_that_answered_late_is_not() {
    // The client's own timeout: the leader may be cut off (packets dropped).
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    assert_eq!(mapped_peer(&run.start()), Some(11));
    assert_eq!(mapped_peer(&run.fail(client_timeout())), Some(12));
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(via(&next), Some((11, 2)));
    // The server's DeadlineExceeded is an answer: the store is reachable.
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    run.start();
    let deadline = Error::from(tonic::Status::deadline_exceeded("slow"));
    assert_eq!(mapped_peer(&run.fail(deadline)), Some(12));
    let next = run.answer(Some(not_leader(Some(voter(11, 1)))));
    assert_eq!(mapped_peer(&next), Some(13));
}

#[test]
fn a_route_that_times_out_is_dropped() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    start(&mut run, true, Some(2));
    let next = run.fail(client_timeout());
    assert_eq!(mapped_peer(&next), Some(12), "the voters go on");
    assert_eq!(proxy_effects(&run), (vec![], vec![(1, 2)]));
}

#[test]
fn a_region_error_through_a_proxy_drops_the_leaders_store_not_the_proxys() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), forwarding(), &scope);
    start(&mut run, false, Some(2));
    let store_not_match = errorpb::Error {
        store_not_match: Some(Default::default()),
        ..Default::default()
    };
    run.answer(Some(store_not_match));
    let dropped: Vec<StoreId> = run
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::InvalidateStore(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, vec![1]);
    assert!(run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StoreAnswered { store_id: 2, .. })));
}
