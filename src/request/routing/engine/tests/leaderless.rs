//! Table tests of a Region with no leader in the shard retry engine
//! ([routing.md, "A Region with no
//! leader"](crate::spec::routing#a-region-with-no-leader)): rounds in which
//! every voter says `NotLeader` and nobody alive is named sleep on the
//! election wait, not on the Region backoff.

use super::*;

fn waiting(limit: Duration) -> RequestPolicy {
    RequestPolicy {
        leaderless_wait: Some(limit),
        ..RequestPolicy::default()
    }
}

/// Rounds of an election window until the shard ends: the cached leader's
/// store refuses, both voters answer `answer`, PD keeps naming the dead
/// leader. The sleeps between rounds, and how the shard ended.
fn window(run: &mut Run<'_>, answer: fn() -> errorpb::Error) -> (Vec<Duration>, Next) {
    let mut sleeps = Vec::new();
    let mut next = run.start();
    loop {
        assert_eq!(mapped_peer(&next), Some(11));
        assert_eq!(mapped_peer(&run.fail(refused())), Some(12));
        assert_eq!(mapped_peer(&run.answer(Some(answer()))), Some(13));
        let delay = match run.answer(Some(answer())) {
            Next::Sleep(d) => d,
            end => return (sleeps, end),
        };
        sleeps.push(delay);
        run.now += delay;
        assert!(matches!(run.step(Event::Slept), Next::Reshard));
        let check = run.step(Event::Resharded(region3(Some(11))));
        assert!(matches!(check, Next::CheckLeaderStore(1)), "{check:?}");
        next = run.step(Event::LeaderStore {
            unreachable: false,
            proxy: None,
        });
    }
}

fn naming_the_dead_leader() -> errorpb::Error {
    not_leader(Some(voter(11, 1)))
}

fn naming_nobody() -> errorpb::Error {
    not_leader(None)
}

fn retries_exhausted(next: &Next) -> bool {
    matches!(done_failure(next), Some(Failure::RetriesExhausted { .. }))
}

#[test]
fn without_a_wait_an_election_spends_the_region_backoff() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), policy(), &scope);
    let (sleeps, end) = window(&mut run, naming_the_dead_leader);
    assert_eq!(sleeps.len(), 3, "backoff(3): three sleeps, then give up");
    assert!(retries_exhausted(&end), "{end:?}");
}

#[test]
fn an_election_is_waited_out_before_the_region_backoff_is_touched() {
    for answer in [naming_the_dead_leader, naming_nobody] {
        let scope = RequestScope::default();
        let mut run = Run::new(region3(Some(11)), waiting(Duration::from_secs(3)), &scope);
        let start = run.now;
        let (sleeps, end) = window(&mut run, answer);
        assert!(retries_exhausted(&end), "{end:?}");
        let ms: Vec<u128> = sleeps.iter().map(|d| d.as_millis()).collect();
        assert_eq!(&ms[..9], &[2, 4, 8, 16, 32, 64, 128, 256, 500]);
        // The wait's sleeps add up to its 3 s; then the Region backoff's
        // three (2, 4 and 8 ms) follow.
        let (waited, backoff) = ms.split_at(ms.len() - 3);
        assert_eq!(waited.iter().sum::<u128>(), 3000, "{ms:?}");
        assert_eq!(backoff, &[2, 4, 8], "{ms:?}");
        assert_eq!(run.now - start, Duration::from_millis(3014));
    }
}

#[test]
fn rounds_that_are_not_an_election_spend_the_region_backoff() {
    fn busy_voter() -> errorpb::Error {
        busy(10, 0)
    }
    fn naming_a_peer_outside_the_region() -> errorpb::Error {
        not_leader(Some(voter(14, 4)))
    }
    for answer in [busy_voter, naming_a_peer_outside_the_region] {
        let scope = RequestScope::default();
        let mut run = Run::new(region3(Some(11)), waiting(Duration::from_secs(3)), &scope);
        let (sleeps, end) = window(&mut run, answer);
        assert_eq!(sleeps.len(), 3, "{sleeps:?}");
        assert!(retries_exhausted(&end), "{end:?}");
    }
}

#[test]
fn a_leader_found_after_the_election_ends_the_shard() {
    let scope = RequestScope::default();
    let mut run = Run::new(region3(Some(11)), waiting(Duration::from_secs(3)), &scope);
    assert_eq!(mapped_peer(&run.start()), Some(11));
    assert_eq!(mapped_peer(&run.fail(refused())), Some(12));
    assert_eq!(mapped_peer(&run.answer(Some(naming_nobody()))), Some(13));
    assert!(matches!(run.answer(Some(naming_nobody())), Next::Sleep(_)));
    assert!(matches!(run.step(Event::Slept), Next::Reshard));
    // PD heard of the winner, peer 13.
    let check = run.step(Event::Resharded(region3(Some(13))));
    assert!(matches!(check, Next::CheckLeaderStore(3)), "{check:?}");
    let next = run.step(Event::LeaderStore {
        unreachable: false,
        proxy: None,
    });
    assert_eq!(mapped_peer(&next), Some(13));
    assert!(matches!(run.answer(None), Next::Done(Ok(()))));
    assert_eq!(run.m.attempts, 2);
}

#[test]
fn a_caller_that_asked_for_no_retries_gets_no_election_wait() {
    let scope = RequestScope::default();
    let machine = ShardMachine::new(
        region3(Some(11)),
        Backoff::no_backoff(),
        waiting(Duration::from_secs(3)),
        None,
        &scope,
    );
    let mut run = Run {
        m: machine,
        effects: Vec::new(),
        finished_probes: Vec::new(),
        now: Instant::now(),
    };
    let (sleeps, end) = window(&mut run, naming_nobody);
    assert!(sleeps.is_empty(), "{sleeps:?}");
    assert!(retries_exhausted(&end), "{end:?}");
}
