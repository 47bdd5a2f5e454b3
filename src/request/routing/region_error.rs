//! What to do with a Region error ([routing.md, "Region errors from the cached
//! leader"](crate::spec::routing#one-round-per-shard)). A pure function from
//! the error and its context to an action.

use std::time::Duration;

use crate::config::DEADLINE_EXCEEDED_REASON;
use crate::proto::{errorpb, metapb};
use crate::region::{can_become_leader, epoch_is_newer, RegionWithLeader};

/// The longest delay a `ServerIsBusy.backoff_ms` can ask for; longer wishes
/// are capped to it.
pub const MAX_BUSY_BACKOFF: Duration = Duration::from_secs(5);

/// How the shard continues after a Region error.
#[derive(Debug, Clone, PartialEq)]
pub enum RegionErrorStep {
    /// Retry at once without sleeping. Counts as an attempt, so hints that
    /// ping-pong cannot loop forever.
    RetryNow,
    /// Back off, then start a new round; `at_least` is the server's
    /// `backoff_ms` when it sent one.
    Backoff {
        /// The minimum delay the server asked for.
        at_least: Option<Duration>,
    },
    /// Go on to the next candidate of the same round (a leader's hint-less
    /// `NotLeader`, **beyond**).
    NextCandidate,
    /// Give the error to the caller.
    Return,
}

/// The decision for one Region error: the next step and the cache work to do
/// first.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionErrorAction {
    /// How the shard continues.
    pub step: RegionErrorStep,
    /// Record this peer as the Region's leader.
    pub update_leader: Option<metapb::Peer>,
    /// Drop the cached Region.
    pub invalidate_region: bool,
    /// Drop the cached store of the peer that answered.
    pub invalidate_store: bool,
    /// Regions to insert into the cache (from `EpochNotMatch`).
    pub insert_regions: Vec<metapb::Region>,
    /// A `ServerIsBusy` with `estimated_wait_ms == 0`: counts toward the
    /// follower probe.
    pub busy_zero_wait: bool,
    /// `UndeterminedResult`: the store cannot tell whether a write was
    /// applied. A request whose replay is unsafe ends undetermined; a read
    /// retries.
    pub undetermined: bool,
}

impl RegionErrorAction {
    fn step(step: RegionErrorStep) -> Self {
        RegionErrorAction {
            step,
            update_leader: None,
            invalidate_region: false,
            invalidate_store: false,
            insert_regions: Vec::new(),
            busy_zero_wait: false,
            undetermined: false,
        }
    }

    fn backoff() -> Self {
        Self::step(RegionErrorStep::Backoff { at_least: None })
    }

    fn invalidating_region(mut self) -> Self {
        self.invalidate_region = true;
        self
    }

    fn invalidating_store(mut self) -> Self {
        self.invalidate_store = true;
        self
    }
}

/// Decides what to do with a Region error answered by the cached leader (or
/// by a fallback peer, for errors other than `NotLeader` and `ServerIsBusy`,
/// which the candidate round handles itself).
pub fn decide_region_error(error: &errorpb::Error, region: &RegionWithLeader) -> RegionErrorAction {
    use RegionErrorAction as A;
    if let Some(not_leader) = &error.not_leader {
        return match &not_leader.leader {
            // A hint naming a peer the cache holds as a learner or witness
            // cannot be followed (the cached peer list is stale, or the hint
            // is garbage): reload like a hint from outside the Region.
            Some(hint) if region.has_peer(hint) && region_peer_can_lead(region, hint) => A {
                update_leader: Some(*hint),
                ..A::step(RegionErrorStep::RetryNow)
            },
            Some(_) => A::backoff().invalidating_region(),
            None => A::step(RegionErrorStep::NextCandidate),
        };
    }
    if let Some(epoch) = &error.epoch_not_match {
        let newer: Vec<metapb::Region> = epoch
            .current_regions
            .iter()
            .filter(|r| is_newer_than_cached(r, region))
            .cloned()
            .collect();
        let step = if newer.is_empty() {
            RegionErrorStep::Backoff { at_least: None }
        } else {
            RegionErrorStep::RetryNow
        };
        return A {
            insert_regions: newer,
            ..A::step(step).invalidating_region()
        };
    }
    if error.undetermined_result.is_some() {
        return A {
            undetermined: true,
            ..A::backoff().invalidating_region()
        };
    }
    if error.stale_command.is_some() {
        // A leader change overtook the proposal, and TiKV applied nothing
        // of it (the new term's entries replaced it): send it again at once,
        // as client-go does; the cached leader answers with a hint if it
        // no longer leads.
        return A::step(RegionErrorStep::RetryNow);
    }
    if error.region_not_found.is_some()
        || error.key_not_in_region.is_some()
        || error.recovery_in_progress.is_some()
        || error.is_witness.is_some()
    {
        return A::backoff().invalidating_region();
    }
    if error.store_not_match.is_some() {
        return A::backoff().invalidating_region().invalidating_store();
    }
    if let Some(busy) = &error.server_is_busy {
        // TiKV dropped a read whose `max_execution_duration_ms` ran out
        // before it was read (`tikv_util::deadline`): nothing was done, and
        // it is the client's own time that ran out, as a client timeout:
        // the next candidate, caches kept, no busy suspicion.
        if busy.reason == DEADLINE_EXCEEDED_REASON {
            return A::step(RegionErrorStep::NextCandidate);
        }
        // A store's wish is honoured up to a cap: one answering "an hour"
        // must not park the request for an hour (the request deadline
        // bounds it too).
        let at_least = (busy.backoff_ms > 0)
            .then(|| Duration::from_millis(busy.backoff_ms).min(MAX_BUSY_BACKOFF));
        return A {
            busy_zero_wait: busy.estimated_wait_ms == 0,
            ..A::step(RegionErrorStep::Backoff { at_least })
        };
    }
    if error.max_timestamp_not_synced.is_some()
        || error.read_index_not_ready.is_some()
        || error.proposal_in_merging_mode.is_some()
        || error.region_not_initialized.is_some()
        || error.data_is_not_ready.is_some()
        || error.disk_full.is_some()
    {
        return A::backoff();
    }
    if error.bucket_version_not_match.is_some() {
        return A::step(RegionErrorStep::RetryNow);
    }
    if error.raft_entry_too_large.is_some()
        || error.flashback_in_progress.is_some()
        || error.flashback_not_prepared.is_some()
    {
        return A::step(RegionErrorStep::Return);
    }
    // Unrecognised (including `MismatchPeerId` and message-only errors).
    A::backoff().invalidating_region().invalidating_store()
}

/// True when the cached Region holds `peer` in a role that can lead.
fn region_peer_can_lead(region: &RegionWithLeader, peer: &metapb::Peer) -> bool {
    region
        .peer(peer.id)
        .is_some_and(|cached| cached.store_id == peer.store_id && can_become_leader(cached))
}

/// True when `candidate` is a version of a Region the cache does not hold
/// yet: another Region (split product) or the same one with a newer epoch.
fn is_newer_than_cached(candidate: &metapb::Region, cached: &RegionWithLeader) -> bool {
    candidate.id != cached.id()
        || epoch_is_newer(&candidate.region_epoch.unwrap_or_default(), &cached.epoch())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::metapb::PeerRole;

    fn peer(id: u64, store: u64) -> metapb::Peer {
        metapb::Peer {
            id,
            store_id: store,
            role: PeerRole::Voter as i32,
            is_witness: false,
        }
    }

    fn cached() -> RegionWithLeader {
        RegionWithLeader::new(
            metapb::Region {
                id: 1,
                region_epoch: Some(metapb::RegionEpoch {
                    conf_ver: 1,
                    version: 1,
                }),
                peers: vec![peer(11, 1), peer(12, 2), peer(13, 3)],
                ..Default::default()
            },
            Some(peer(11, 1)),
        )
    }

    fn not_leader(hint: Option<metapb::Peer>) -> errorpb::Error {
        errorpb::Error {
            not_leader: Some(errorpb::NotLeader {
                region_id: 1,
                leader: hint,
            }),
            ..Default::default()
        }
    }

    fn backoff() -> RegionErrorStep {
        RegionErrorStep::Backoff { at_least: None }
    }

    /// (name, error, step, invalidate_region, invalidate_store)
    #[test]
    fn region_error_table() {
        let e = errorpb::Error::default;
        let table: Vec<(&str, errorpb::Error, RegionErrorStep, bool, bool)> = vec![
            (
                "not leader, hint outside",
                not_leader(Some(peer(99, 9))),
                backoff(),
                true,
                false,
            ),
            (
                "not leader, no hint",
                not_leader(None),
                RegionErrorStep::NextCandidate,
                false,
                false,
            ),
            (
                "region not found",
                errorpb::Error {
                    region_not_found: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                false,
            ),
            (
                "key not in region",
                errorpb::Error {
                    key_not_in_region: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                false,
            ),
            (
                "stale command",
                errorpb::Error {
                    stale_command: Some(Default::default()),
                    ..e()
                },
                RegionErrorStep::RetryNow,
                false,
                false,
            ),
            (
                "store not match",
                errorpb::Error {
                    store_not_match: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                true,
            ),
            (
                "max ts not synced",
                errorpb::Error {
                    max_timestamp_not_synced: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "read index not ready",
                errorpb::Error {
                    read_index_not_ready: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "merging",
                errorpb::Error {
                    proposal_in_merging_mode: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "not initialized",
                errorpb::Error {
                    region_not_initialized: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "data not ready",
                errorpb::Error {
                    data_is_not_ready: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "disk full",
                errorpb::Error {
                    disk_full: Some(Default::default()),
                    ..e()
                },
                backoff(),
                false,
                false,
            ),
            (
                "recovery",
                errorpb::Error {
                    recovery_in_progress: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                false,
            ),
            (
                "witness",
                errorpb::Error {
                    is_witness: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                false,
            ),
            (
                "bucket version",
                errorpb::Error {
                    bucket_version_not_match: Some(Default::default()),
                    ..e()
                },
                RegionErrorStep::RetryNow,
                false,
                false,
            ),
            (
                "entry too large",
                errorpb::Error {
                    raft_entry_too_large: Some(Default::default()),
                    ..e()
                },
                RegionErrorStep::Return,
                false,
                false,
            ),
            (
                "flashback in progress",
                errorpb::Error {
                    flashback_in_progress: Some(Default::default()),
                    ..e()
                },
                RegionErrorStep::Return,
                false,
                false,
            ),
            (
                "flashback not prepared",
                errorpb::Error {
                    flashback_not_prepared: Some(Default::default()),
                    ..e()
                },
                RegionErrorStep::Return,
                false,
                false,
            ),
            (
                "mismatch peer id (unrecognised)",
                errorpb::Error {
                    mismatch_peer_id: Some(Default::default()),
                    ..e()
                },
                backoff(),
                true,
                true,
            ),
            (
                "message only (unrecognised)",
                errorpb::Error {
                    message: "?".into(),
                    ..e()
                },
                backoff(),
                true,
                true,
            ),
        ];
        for (name, err, step, region, store) in table {
            let a = decide_region_error(&err, &cached());
            assert_eq!(a.step, step, "{name}");
            assert_eq!(a.invalidate_region, region, "{name}");
            assert_eq!(a.invalidate_store, store, "{name}");
            assert_eq!(a.update_leader, None, "{name}");
        }
    }

    #[test]
    fn not_leader_with_a_hint_inside_the_region_updates_and_retries_at_once() {
        let a = decide_region_error(&not_leader(Some(peer(12, 2))), &cached());
        assert_eq!(a.step, RegionErrorStep::RetryNow);
        assert_eq!(a.update_leader, Some(peer(12, 2)));
        assert!(!a.invalidate_region);
    }

    #[test]
    fn a_read_tikv_dropped_past_its_deadline_goes_to_the_next_candidate() {
        // What TiKV answers (storage::errors::extract_region_error_from_error).
        let dropped = errorpb::Error {
            message: "Deadline is exceeded".to_owned(),
            server_is_busy: Some(errorpb::ServerIsBusy {
                reason: DEADLINE_EXCEEDED_REASON.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = decide_region_error(&dropped, &cached());
        assert_eq!(a.step, RegionErrorStep::NextCandidate);
        assert!(!a.busy_zero_wait);
        assert!(!a.undetermined);
        assert!(!a.invalidate_region);
        assert!(!a.invalidate_store);
    }

    #[test]
    fn busy_honours_backoff_ms_and_marks_zero_wait() {
        let busy = |backoff_ms, estimated_wait_ms| errorpb::Error {
            server_is_busy: Some(errorpb::ServerIsBusy {
                backoff_ms,
                estimated_wait_ms,
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = decide_region_error(&busy(0, 0), &cached());
        assert_eq!(a.step, RegionErrorStep::Backoff { at_least: None });
        assert!(a.busy_zero_wait);
        let a = decide_region_error(&busy(300, 20), &cached());
        assert_eq!(
            a.step,
            RegionErrorStep::Backoff {
                at_least: Some(Duration::from_millis(300))
            }
        );
        assert!(!a.busy_zero_wait);
        // A store asking for an hour gets the cap.
        let a = decide_region_error(&busy(3_600_000, 20), &cached());
        assert_eq!(
            a.step,
            RegionErrorStep::Backoff {
                at_least: Some(MAX_BUSY_BACKOFF)
            }
        );
    }

    #[test]
    fn undetermined_result_is_flagged_and_reloads_the_region() {
        let e = errorpb::Error {
            undetermined_result: Some(errorpb::UndeterminedResult {
                message: "apply unknown".to_owned(),
            }),
            ..Default::default()
        };
        let a = decide_region_error(&e, &cached());
        assert!(a.undetermined);
        assert!(a.invalidate_region);
        assert_eq!(a.step, RegionErrorStep::Backoff { at_least: None });
    }

    #[test]
    fn epoch_not_match_inserts_only_newer_regions() {
        let mut newer = cached().region.clone();
        newer.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 2,
        });
        let split_off = metapb::Region {
            id: 2,
            ..Default::default()
        };
        let err = errorpb::Error {
            epoch_not_match: Some(errorpb::EpochNotMatch {
                current_regions: vec![cached().region.clone(), newer.clone(), split_off.clone()],
            }),
            ..Default::default()
        };
        let a = decide_region_error(&err, &cached());
        assert!(a.invalidate_region);
        assert_eq!(a.step, RegionErrorStep::RetryNow);
        assert_eq!(a.insert_regions, vec![newer, split_off]);

        let stale = errorpb::Error {
            epoch_not_match: Some(errorpb::EpochNotMatch {
                current_regions: vec![cached().region.clone()],
            }),
            ..Default::default()
        };
        let a = decide_region_error(&stale, &cached());
        assert!(a.invalidate_region);
        assert_eq!(a.step, RegionErrorStep::Backoff { at_least: None });
    }
}
