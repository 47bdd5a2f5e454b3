//! The request plan and its routing: leader-first candidate rounds with
//! voter fallback (`../shared/docs/routing.md`).
//!
//! A plan is built with [`PlanBuilder`] from composable stages, in
//! client-rust's vocabulary: [`Dispatch`] → [`RetryableMultiRegion`] →
//! [`MergeResponse`] ([`Collect`], [`CollectSingle`], [`CollectError`]) →
//! [`ProcessResponse`] ([`DefaultProcessor`]) / [`ExtractError`].
//!
//! The routing decisions are pure and synchronous:
//! [`classify_grpc_error`] (what a failed RPC means), [`decide_region_error`]
//! (the Region-error table), and [`CandidateRound`] (the state of one round:
//! who was tried, what each answered, hint reordering, what to invalidate,
//! which error is strongest). [`RetryableMultiRegion`] is the thin async
//! shell that maps stores, dispatches, sleeps and updates caches, as loops.
//! [`RoutingState`] is the client-wide part: store health, the shared
//! `ServerIsBusy(0)` suspicion, and the [`RoutingStats`] counters.
//!
//! Fail points (feature `failpoints`): `tikv_plan::before_map_store` and
//! `tikv_plan::before_dispatch`. With `return` they fail that step as a
//! connect failure (mapping) or a transport failure (dispatch);
//! `return(timeout)` fails it as `DeadlineExceeded`, `return(fatal)` as
//! `InvalidArgument`.
//!
//! # Behaviours and their tests
//!
//! Every behaviour of routing.md, and the test that shows it. Test files are
//! under `tests/` (`routing_*.rs`, `plan_*.rs`); unit tests live beside the
//! code (`request::classify`, `request::region_error`, `request::round`,
//! `request::routing_state`).
//!
//! | behaviour (routing.md section) | test |
//! |---|---|
//! | unreachable cached leader falls back to a voter, no `replica_read` (Why, Invariants) | `routing_fallback::unreachable_leader_falls_back_to_voter_without_replica_read` |
//! | only `Context.peer` changes; region id and epoch stay the cached ones; other context fields kept (Invariants) | `routing_fallback::fallback_changes_only_the_target_peer` |
//! | a Region without a known leader starts with its first voter; the first to accept leads (Candidates) | `routing_fallback::leaderless_region_starts_with_first_voter` |
//! | learners and witnesses are never candidates (Candidates) | `routing_fallback::learner_and_witness_are_skipped`, `region::tests::learners_and_witnesses_are_never_candidates` |
//! | a failed follower mapping does not hide a later healthy voter (One round) | `routing_mapping::failed_follower_mapping_does_not_hide_later_voter` |
//! | all mapping failures invalidate the Region and reload new peers (One round) | `routing_mapping::all_mapping_failures_invalidate_region_and_reload_peers` |
//! | transport failures invalidate the store and the Region route (gRPC table) | `routing_transport::transport_failure_invalidates_store_and_region`, `routing_transport::transport_failure_then_region_error_reloads_the_region` |
//! | deadline and client timeouts retry without cache churn; a client timeout keeps caches (gRPC table, **beyond**) | `routing_transport::deadline_retries_without_cache_churn`, `routing_transport::client_timeout_keeps_caches` |
//! | classification by source chain, then code (gRPC table) | `request::classify::tests::code_table_without_source`, `request::classify::tests::source_chain_decides_before_the_code`, `routing_transport::transport_status_with_io_source_is_a_routing_failure` |
//! | any other gRPC status is returned, never replayed (gRPC table) | `routing_transport::other_grpc_status_is_returned_without_replay` |
//! | each RPC is bounded by the request timeout; a timeout keeps caches (Connections) | `routing_transport::rpc_is_bounded_by_the_request_timeout` |
//! | fallback `NotLeader` and `ServerIsBusy` do not hide remaining voters (One round) | `routing_fallback::fallback_not_leader_and_busy_do_not_hide_remaining_voters` |
//! | follower hints never update the leader cache (Candidates) | `routing_fallback::follower_hint_never_updates_leader_cache` |
//! | successful fallback and fallback key error both update the shared leader cache (One round) | `routing_fallback::fallback_success_updates_leader_cache`, `routing_fallback::fallback_key_error_updates_leader_cache` |
//! | every voter says `NotLeader`: reload the Region (One round) | `routing_fallback::all_voters_not_leader_reloads_region` |
//! | precedence: routing failure > all `NotLeader` > busy > timeout (One round) | `request::round::tests::precedence_table`, `routing_fallback::exhausted_backoff_returns_strongest_error` |
//! | Region-error table from the cached leader (Region errors) | `request::region_error::tests::region_error_table`, `routing_region_error::region_error_table_drives_cache_work`, `request::region_error::tests::busy_honours_backoff_ms_and_marks_zero_wait` |
//! | leader `NotLeader` hint inside the Region: update, retry at once, counted (Region errors) | `routing_region_error::leader_hint_updates_leader_and_retries_without_sleep`, `routing_region_error::ping_pong_hints_stop_at_the_attempt_budget` |
//! | a leader's hint-less `NotLeader` moves on to the voters in the same round (**beyond**) | `routing_fallback::leader_hintless_not_leader_moves_to_voters_in_same_round` |
//! | a fallback hint naming an untried voter reorders the round (**beyond**) | `routing_fallback::fallback_hint_naming_untried_voter_reorders_round`, `request::round::tests::fallback_hint_naming_an_untried_voter_reorders_the_round` |
//! | `EpochNotMatch` inserts newer Regions and retries, split shards stay in order (Region errors) | `routing_region_error::epoch_not_match_splits_the_shard_and_keeps_order`, `routing_region_error::epoch_not_match_keeps_the_cached_leader_for_the_new_regions` |
//! | two `ServerIsBusy(0)` trigger exactly one followers-only probe, never `replica_read` (busy probe) | `routing_busy::two_busy_zero_trigger_one_followers_only_probe` |
//! | inconclusive probe restores the leader, one probe per request (busy probe) | `routing_busy::inconclusive_probe_restores_leader_and_probes_once`, `routing_busy::a_request_split_after_its_probe_does_not_probe_again` |
//! | non-zero busy follows the normal path, honours `backoff_ms` (busy probe) | `routing_busy::non_zero_busy_follows_normal_path` |
//! | concurrent requests share one busy probe (**beyond**) | `routing_busy::concurrent_requests_share_one_busy_probe` |
//! | non-idempotent dispatch errors stay terminal (Replay safety) | `plan_replay::cas_dispatch_error_is_undetermined_and_not_replayed`, `plan_replay::cas_mapping_failure_still_falls_back` |
//! | undetermined outcomes stay terminal and win over other shards' errors (Replay safety) | `plan_replay::undetermined_wins_over_other_shard_errors`, `plan_replay::terminal_on_undetermined_returns_before_slow_shards_finish` |
//! | idempotent requests keep ordinary retries (Replay safety) | `plan_replay::idempotent_requests_keep_ordinary_retries` |
//! | batches split by Region and by size (Invariants, raw requests) | `plan_multi::batch_put_splits_by_region_and_size` |
//! | multi-shard order and error precedence stay stable (Replay safety) | `plan_multi::multi_shard_results_keep_shard_order`, `plan_multi::multi_shard_error_precedence_is_stable` |
//! | dropping a request mid-round contacts no one else and leaks no permit (Cancellation) | `plan_cancel::dropping_request_mid_round_contacts_no_one_and_leaks_no_permit`, `plan_cancel::dropping_a_probing_request_releases_waiters` |
//! | one permit per shard, only while an RPC is in flight (Invariants) | `plan_multi::concurrency_limit_holds_one_permit_per_rpc` |
//! | connection setup is bounded (Connections) | `routing_mapping::connection_setup_is_bounded` (a connect timeout moves on, counted; the bound itself is `TikvConnect`'s) |
//! | the fast path maps and calls only the leader (Invariants) | `routing_fallback::fast_path_maps_one_store_and_dispatches_once`, `request::round::tests::fast_path_accepts_the_leader_without_recording_anything` |
//! | store health: a dead leader store costs about one connect attempt for a hundred Regions (**beyond**) | `routing_store_health::hundred_regions_on_dead_store_cost_one_connect_attempt`, `routing_store_health::voters_naming_the_dead_leader_do_not_bring_it_forward` |
//! | store health: cool-down and recovery; switch off restores upstream (**beyond**) | `request::routing_state::tests::store_health_cools_down_with_jitter_and_recovers`, `routing_store_health::store_health_off_pays_every_time`, `routing_store_health::unreachable_store_is_tried_first_again_after_cooldown` |
//! | consecutive timeouts mark a store unreachable without cache churn (**beyond**) | `routing_store_health::timeout_strikes_mark_store_unreachable_without_invalidation` |
//! | fail points before dispatch and before store mapping | `routing_failpoints::fail_points_before_dispatch_and_mapping_fall_back` |
//! | shared busy suspicion: window, leader change, one probe in flight (**beyond**) | `request::routing_state::tests::shared_busy_suspicion_allows_one_probe_in_flight`, `request::routing_state::tests::busy_window_and_leader_change_restart_the_count`, `request::routing_state::tests::a_leader_change_never_starts_a_second_probe_of_the_region`, `request::routing_state::tests::abandoned_probe_releases_waiters_and_keeps_the_count` |
//! | counters (Observability) | asserted throughout, e.g. `routing_store_health::hundred_regions_on_dead_store_cost_one_connect_attempt`, `routing_mapping::all_mapping_failures_invalidate_region_and_reload_peers` |
//! | end to end over gRPC (`PdRpcClient`, `TikvConnect`, simulated cluster): unreachable leader store, busy(0) stale leader, cold Region | `routing_sim::sim_unreachable_leader_store_falls_back_to_voter`, `routing_sim::sim_busy_zero_stale_leader_is_probed_past`, `routing_sim::sim_cold_region_wakes_through_voters`, `routing_sim::sim_regions_led_from_dead_store_cost_about_one_connect_attempt` (0 new connects with store health, 29 for 30 Regions without) |
//! | this table names real tests | `plan_docs::behaviour_table_names_existing_tests` |

mod builder;
mod classify;
mod engine;
mod plan;
mod region_error;
mod retry;
mod round;
mod routing_state;
mod traits;

pub use builder::PlanBuilder;
pub use classify::{classify_dispatch_error, classify_grpc_error, DispatchFailure};
pub(crate) use plan::collect_in_order;
pub use plan::{
    Collect, CollectError, CollectSingle, DefaultProcessor, Dispatch, ExtractError, Merge,
    MergeResponse, Plan, PreserveShard, Process, ProcessResponse, ResponseWithShard,
};
pub use region_error::{decide_region_error, RegionErrorAction, RegionErrorStep};
pub use retry::RetryableMultiRegion;
pub use routing_state::{RoutingState, RoutingStats};
pub(crate) use traits::{pair_key_errors, string_key_error, strongest_shard_error};
pub use traits::{
    set_context_for_store, Batchable, HasKeyErrors, HasRegionError, KvRequest, Shardable,
};
