//! [`RequestPolicy`]: what a request may do when an attempt fails, and how
//! long it and each of its RPCs may take. One `Copy` value, built by
//! [`PlanBuilder`](crate::request::PlanBuilder) from the request, the
//! builder's switches and the client's [`Config`](crate::Config), handed to
//! the retry stage and from it to each shard's engine. The per-RPC bound is
//! computed here ([`RequestPolicy::rpc_bound`]); the store client takes
//! the smaller of it and its own timeout (`store::call_timeout`).

use std::time::Duration;

use crate::config::DEFAULT_REQUEST_DEADLINE;

/// May the request be sent again once an attempt may have reached a store?
/// ([routing.md, "Replay safety"](crate::spec::routing#replay-safety).)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Yes: a read, or a write TiKV applies idempotently (a transaction's
    /// prewrite or a secondary's commit).
    #[default]
    Resend,
    /// Never: a dispatch error that may have reached a store ends the
    /// request as [`Failure::Undetermined`](crate::Failure::Undetermined)
    /// (every raw write: with two writers, a re-sent or late copy of an old
    /// write overwrites a newer one).
    Never,
    /// A transaction's commit point ([txn.md, "Undetermined, done
    /// right"](crate::spec::txn#behaviour-we-require)): re-sent, as TiKV
    /// answers it idempotently, but once an attempt may have reached a store
    /// without an answer, a final failure is undetermined, never a plain
    /// error.
    CommitPoint,
}

/// A request's policy: replay safety, what an undetermined outcome does to
/// the rest of the request, concurrency, and its time bounds. Fields left
/// `None` take the client's defaults ([`RequestPolicy::or_defaults`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestPolicy {
    /// May an attempt that may have reached a store be sent again?
    pub(crate) replay: Replay,
    /// An undetermined outcome ends the whole request at once and wins over
    /// determinate errors of other shards.
    pub(crate) terminal_on_undetermined: bool,
    /// How many RPCs the request may have in flight at once.
    pub(crate) max_concurrency: Option<usize>,
    /// The bound on each RPC, on top of the store client's own.
    pub(crate) rpc_timeout: Option<Duration>,
    /// The whole request's deadline: rounds, sleeps and RPCs together.
    pub(crate) deadline: Option<Duration>,
    /// The `ServerIsBusy(0)` suspicion lives in the client-wide routing
    /// state instead of the shard.
    pub(crate) shared_busy_probe: bool,
    /// A live leader this client cannot reach is sent its requests through
    /// a voter's store ([`Config::forwarding`](crate::Config::forwarding)).
    pub(crate) forwarding: bool,
    /// Where a read may go first: a replica, or a stale read (the request's
    /// own; leader only by default).
    pub(crate) read: super::replica::ReadMode,
    /// How long a shard waits out a Region with no leader before its rounds
    /// count against the Region backoff ([`Config::leaderless_wait`](crate::Config::leaderless_wait)).
    pub(crate) leaderless_wait: Option<Duration>,
}

impl RequestPolicy {
    /// The policy of a request whose replay is unsafe or not: an unsafe one
    /// is never re-sent and its undetermined outcome ends the request.
    pub(crate) fn for_request(replay_unsafe: bool) -> Self {
        RequestPolicy {
            replay: if replay_unsafe {
                Replay::Never
            } else {
                Replay::Resend
            },
            terminal_on_undetermined: replay_unsafe,
            ..RequestPolicy::default()
        }
    }

    /// Each bound and limit left unset taken from `defaults` (the client's
    /// configuration); the switches are this policy's own, except the busy
    /// probe's sharing, which is the client's.
    pub(crate) fn or_defaults(self, defaults: &RequestPolicy) -> Self {
        RequestPolicy {
            max_concurrency: self.max_concurrency.or(defaults.max_concurrency),
            rpc_timeout: self.rpc_timeout.or(defaults.rpc_timeout),
            deadline: self.deadline.or(defaults.deadline),
            leaderless_wait: self.leaderless_wait.or(defaults.leaderless_wait),
            shared_busy_probe: defaults.shared_busy_probe,
            forwarding: defaults.forwarding,
            ..self
        }
    }

    /// Dispatch errors that may have reached a store end the request.
    pub(crate) fn terminal_on_dispatch_error(&self) -> bool {
        self.replay == Replay::Never
    }

    /// The request is a commit point (see [`Replay::CommitPoint`]).
    pub(crate) fn commit_point(&self) -> bool {
        self.replay == Replay::CommitPoint
    }

    /// Marks the request's dispatch errors terminal.
    pub(crate) fn never_resend(&mut self) {
        self.replay = Replay::Never;
    }

    /// Marks the request a commit point, unless it is never re-sent at all
    /// (the stricter rule wins).
    pub(crate) fn mark_commit_point(&mut self) {
        if self.replay != Replay::Never {
            self.replay = Replay::CommitPoint;
        }
    }

    /// At-least-once: an attempt that may have reached a store is re-sent,
    /// and an undetermined outcome no longer ends the request. A commit
    /// point stays one.
    pub(crate) fn at_least_once(&mut self) {
        if self.replay == Replay::Never {
            self.replay = Replay::Resend;
        }
        self.terminal_on_undetermined = false;
    }

    /// The in-flight limit, never below one.
    pub(crate) fn concurrency(&self) -> usize {
        self.max_concurrency
            .unwrap_or_else(|| crate::Config::default().max_concurrency)
            .max(1)
    }

    /// The deadline of a lock-resolving request: the policy's, else the
    /// default.
    pub(crate) fn deadline_or_default(&self) -> Duration {
        self.deadline.unwrap_or(DEFAULT_REQUEST_DEADLINE)
    }

    /// The bound of one RPC sent with `deadline_left` of the request's
    /// deadline: the RPC timeout cut short by the deadline, or whichever of
    /// the two is set.
    pub(crate) fn rpc_bound(&self, deadline_left: Option<Duration>) -> RpcBound {
        let bound = match (self.rpc_timeout, deadline_left) {
            (Some(timeout), Some(left)) => Some(timeout.min(left)),
            (timeout, left) => timeout.or(left),
        };
        // Near the deadline the caller keeps a timer of its own, at the
        // deadline: a transport's timer can start late (a channel
        // reconnecting first, a stream opening), and the call must end by
        // then. Far from it, the store client's timer is the only one.
        let backstop = deadline_left
            .filter(|left| Some(*left) <= self.rpc_timeout.map(|t| t * 4))
            .map(|left| left + crate::store::BACKSTOP_SLACK);
        RpcBound { bound, backstop }
    }
}

/// The bound of one RPC: what the store client is asked to keep, and the
/// backstop its caller keeps when the store client keeps the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RpcBound {
    /// The RPC's bound; `None` leaves it to the store client's own timeout.
    pub(crate) bound: Option<Duration>,
    /// A timer at the deadline, kept by the caller besides the store
    /// client's; `None` when the deadline is far or unset.
    pub(crate) backstop: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stricter_replay_rule_wins() {
        let mut raw_write = RequestPolicy::for_request(true);
        raw_write.mark_commit_point();
        assert!(raw_write.terminal_on_dispatch_error());
        assert!(!raw_write.commit_point());

        let mut commit = RequestPolicy::for_request(false);
        commit.mark_commit_point();
        commit.at_least_once();
        assert!(commit.commit_point(), "at-least-once keeps a commit point");

        let mut write = RequestPolicy::for_request(true);
        write.at_least_once();
        assert_eq!(write.replay, Replay::Resend);
        assert!(!write.terminal_on_undetermined);
    }

    #[test]
    fn unset_bounds_come_from_the_defaults_and_set_ones_stay() {
        let defaults = RequestPolicy {
            max_concurrency: Some(4),
            rpc_timeout: Some(Duration::from_secs(2)),
            deadline: Some(Duration::from_secs(20)),
            shared_busy_probe: true,
            ..RequestPolicy::default()
        };
        let own = RequestPolicy {
            rpc_timeout: Some(Duration::from_millis(300)),
            ..RequestPolicy::for_request(true)
        }
        .or_defaults(&defaults);
        assert_eq!(own.rpc_timeout, Some(Duration::from_millis(300)));
        assert_eq!(own.deadline, Some(Duration::from_secs(20)));
        assert_eq!(own.concurrency(), 4);
        assert!(own.shared_busy_probe);
        assert!(own.terminal_on_dispatch_error() && own.terminal_on_undetermined);
    }

    #[test]
    fn the_rpc_bound_is_the_timeout_cut_by_the_deadline_with_a_backstop_near_it() {
        let policy = RequestPolicy {
            rpc_timeout: Some(Duration::from_secs(2)),
            ..RequestPolicy::default()
        };
        let far = policy.rpc_bound(Some(Duration::from_secs(20)));
        assert_eq!(far.bound, Some(Duration::from_secs(2)));
        assert_eq!(far.backstop, None, "far from the deadline: one timer");
        let near = policy.rpc_bound(Some(Duration::from_secs(5)));
        assert_eq!(near.bound, Some(Duration::from_secs(2)));
        assert_eq!(
            near.backstop,
            Some(Duration::from_secs(5) + crate::store::BACKSTOP_SLACK)
        );
        let cut = policy.rpc_bound(Some(Duration::from_millis(700)));
        assert_eq!(cut.bound, Some(Duration::from_millis(700)));
        assert_eq!(
            crate::store::call_timeout(cut.bound, Duration::from_secs(2)),
            (Duration::from_millis(700), true)
        );
        assert_eq!(
            crate::store::call_timeout(far.bound, Duration::from_secs(1)),
            (Duration::from_secs(1), false),
            "the store client's own, shorter timeout is its own"
        );
        let unbounded = RequestPolicy::default().rpc_bound(None);
        assert_eq!(
            unbounded,
            RpcBound {
                bound: None,
                backstop: None
            }
        );
    }
}
