//! # tikv-sim
//!
//! A simulated TiKV cluster over real gRPC on 127.0.0.1, with fault
//! injection, for testing any TiKV client (and the application above it)
//! against leader loss, dead stores, lost answers and transactional
//! conflicts. It depends only on the wire types
//! ([`tikv_plan_proto`]), not on a client.
//!
//! [`SimCluster`] runs one PD (or several PD members) and N stores, each a
//! tonic server on its own loopback port, speaking the wire protocol of
//! [wire.md](https://github.com/tikv-plan/tikv-plan/blob/main/docs/wire.md). Any TiKV client can bootstrap from
//! [`SimCluster::pd_addr`] and run raw KV or transactions against it. It is strict: a request
//! with a wrong context gets the Region error real TiKV would give.
//!
//! ```no_run
//! # async fn demo() -> tikv_sim::Result<()> {
//! use std::time::Duration;
//! use tikv_sim::{ColdMode, HangMode, SimCluster};
//!
//! let cluster = SimCluster::builder()
//!     .stores(3)
//!     .split_keys(vec![b"g".to_vec(), b"n".to_vec()]) // ["",g) [g,n) [n,"")
//!     .replicas(3)
//!     .start()
//!     .await?;
//! let region = cluster.region_for_key(b"a").unwrap();
//! cluster.make_cold(region.id, ColdMode::NotLeaderFirst)?;
//! cluster.store_busy(1, Some(0));
//! cluster.store_hang(2, HangMode::Respond);
//! cluster.store_slow(3, Duration::from_millis(50));
//! cluster.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! To run the servers on a network of your own (a simulated one, such as
//! turmoil's), [`SimClusterBuilder::build_hosted`] builds the cluster
//! without binding a port and hands back each server's address and gRPC
//! routes ([`HostedServers`]) to serve there.
//!
//! # Layout and numbering
//!
//! * Store ids are `1..=n`, then TiFlash stores' if any (see
//!   [TiFlash stores](#tiflash-stores)). Every server listens on
//!   `127.0.0.1:0` (a free port) unless the builder names an address.
//! * Regions are created in key order from the split keys. Region ids and
//!   peer ids come from **one counter starting at 1000**
//!   ([`FIRST_REGION_ID`]): the first Region gets 1000 and its peers
//!   1001, 1002, … in peer order, then the next Region takes the next id,
//!   and so on. A split allocates the new Region's id, then its peers' ids,
//!   from the same counter. So ids are unique and deterministic.
//! * With [`SimClusterBuilder::replicas`]`(k)`, Region `i` (from 0) has voters
//!   on stores `(i + j) % n + 1` for `j` in `0..k`; the first leads.
//!   [`SimClusterBuilder::region_layout`] gives one Region explicit peers
//!   ([`SimPeer::voter`], [`SimPeer::learner`], [`SimPeer::witness`]) and a
//!   leader ([`RegionLayout::leader`]), or starts it cold
//!   ([`RegionLayout::cold`]).
//! * Every epoch starts at `conf_ver = 1, version = 1`.
//! * PD members are named `pd-0`, `pd-1`, … with member ids 9001, 9002, …
//!   ([`PD_MEMBER_ID_BASE`]); member 0 leads. Every PD header carries the
//!   cluster id ([`DEFAULT_CLUSTER_ID`] unless set).
//!
//! # PD
//!
//! `GetMembers` (all members, `client_urls = ["http://127.0.0.1:port"]`, the
//! real leader), `GetRegion`, `GetRegionByID`, `GetPrevRegion` and
//! `ScanRegions` (Regions with PD's view of their leaders, which faults can
//! leave stale), `GetStore` and `GetAllStores` (with the labels
//! [`SimCluster::set_store_labels`] gives a store, after `engine=tiflash`
//! on a TiFlash store), and a bidirectional
//! `Tso` stream of monotonic timestamps (physical
//! milliseconds, 18 logical bits; a response carries the last timestamp of
//! its `count`). A member that is not the leader answers every call but
//! `GetMembers` with gRPC `Unavailable` "not leader". A request header with
//! a non-zero cluster id other than this cluster's is refused with
//! `FailedPrecondition`. An unknown store gets an error header; an unknown
//! Region an empty response, like real PD. A `Tso` request for 0 timestamps,
//! or for more than the logical part holds, is refused with
//! `InvalidArgument`. The TSO's physical clock is the wall clock (or the
//! clock given to [`SimClusterBuilder::tso_clock`], a simulation's virtual
//! one) plus an offset that [`SimCluster::advance_tso_clock`] moves
//! forward, so lock TTLs expire in tests without waiting. `GetGCSafePoint` and
//! `UpdateGCSafePoint` keep one safe point that never moves backwards (an
//! older one is ignored and the current one returned). PD also serves
//! `keyspacepb.Keyspace`'s `LoadKeyspace` for API v2 clients
//! ([`SimClusterBuilder::keyspace`]).
//!
//! # PD's HTTP API
//!
//! As PD does, each PD member also serves its HTTP API on its gRPC port
//! (HTTP/1.1 beside gRPC's HTTP/2; a request with content type
//! `application/grpc` is gRPC): the part client test suites and tools
//! read, in the JSON PD writes (its field names, order and `omitempty`
//! rules). `GET /pd/api/v1/regions` (`count` and `regions`, each with
//! `id`, `start_key` and `end_key` as upper-case hex of the key PD holds,
//! `epoch`, `peers` and `leader` with `role_name`, `down_peers`, and the
//! statistics fields PD always writes, all 0 here),
//! `/pd/api/v1/region/id/{id}` (PD's 404 and 400 answers for a missing or
//! bad id), `/pd/api/v1/regions/count`, `/pd/api/v1/stores` (each `store`
//! with `state_name` `Up`, or `Disconnected` while it is down, and a
//! `status` with its Region, leader, learner and witness counts,
//! `is_busy`, sizes 0), `/pd/api/v1/members` (what `GetMembers` answers),
//! `/pd/api/v1/health` (a member that is down or hangs is unhealthy) and
//! `/pd/api/v1/ping`. Another path is a 404 (`404 page not found`),
//! another method a 405. A member that does not lead answers for the
//! leader, as PD's redirect to the leader would: it waits while the
//! leader hangs, and answers 503 when no leader is up; `health` and
//! `ping`, and a request with `PD-Allow-follower-handle`, are its own.
//! The routes [`SimClusterBuilder::build_hosted`] hands out carry the API
//! too; their host decides whether it accepts HTTP/1.1.
//!
//! # Stores
//!
//! A store serves every raw method. A request whose `Context.api_version`
//! is not the stores' ([`SimClusterBuilder::api_version`], V1 by default)
//! is refused with `ApiVersionNotMatched` first, as TiKV refuses it. Then
//! it runs its checks in this order, answering with the first that fails:
//!
//! 1. **busy** ([`SimCluster::store_busy`]): `ServerIsBusy` with the
//!    configured `estimated_wait_ms`, before any Region or leader check;
//! 2. the Region has a peer on this store, else `RegionNotFound`;
//! 3. `Context.peer.store_id` is this store, else `StoreNotMatch` (a missing
//!    peer counts as store 0); `Context.peer.id` is this store's peer, else
//!    `MismatchPeerId`;
//! 4. `Context.region_epoch.version` is current, else `EpochNotMatch` with
//!    the current Region and every Region split off it since (as TiKV does
//!    for reads and writes, `conf_ver` is not compared);
//! 5. every key lies in the Region, else `KeyNotInRegion` (scans: the start
//!    key, or a reverse scan's upper bound, either Region edge included as
//!    TiKV's seek check does; delete-range: both ends; results are clamped
//!    to the Region). Raw keys are compared in the form TiKV stores them
//!    in: as sent in API v1, memcomparable-encoded in API v2
//!    (`ApiV2::encode_raw_key`), where the error carries the encoded key
//!    and raw data moves with splits and merges by its encoding; Region
//!    boundaries are always as PD holds them ([`codec`] makes them for a
//!    keyspace);
//! 6. leadership: a witness answers `IsWitness`, a learner `NotLeader` with
//!    the leader; a voter that does not lead answers `NotLeader` with the
//!    leader it knows. In a **cold** Region (no leader), the old leader's
//!    peer answers `NotLeader` without a hint, and any other voter campaigns:
//!    [`ColdMode::AcceptAtOnce`] becomes leader and serves,
//!    [`ColdMode::NotLeaderFirst`] answers `NotLeader` without a hint, becomes
//!    leader, and serves the next request. PD is not told (its view stays
//!    stale until a fault changes it). During an **election**
//!    ([`SimCluster::start_election`]) every peer but the leader answers
//!    `NotLeader` without a hint and none campaigns, until
//!    [`SimCluster::transfer_leader`] names the winner.
//!
//! A read flagged `replica_read` or `stale_read` passes step 6 on a
//! follower or learner, which serves it (see
//! [Replica and stale reads](#replica-and-stale-reads)); writes ignore the
//! flags.
//!
//! **BatchCommands.** A store also serves the `tikvpb.Tikv/BatchCommands`
//! stream as TiKV does: each sub-request is served exactly as its unary
//! method (same checks, errors, faults and counters), and the answers carry
//! their request ids and go out as they finish, several per message when
//! ready together, so order and grouping differ from the requests' (those
//! of one message that no fault delays are answered together, in one
//! message; a delayed or hung one is served in a task of its own). A
//! sub-request that ends in a gRPC status (a malformed request
//! whose response has no error field) gets no answer, as in TiKV; the
//! client times out. A dropped response resets the store's connections,
//! so the whole stream fails. [`StoreCounters::batch_streams`],
//! [`StoreCounters::batch_messages`] and [`StoreCounters::batch_requests`]
//! count streams, messages and sub-requests.
//!
//! # Transactions
//!
//! Every transactional method of `tikvpb.Tikv` a client uses is served
//! after the same checks and faults (one code path; counted under the
//! labels of [`TXN_METHODS`]); keys are compared with the Region on their
//! memcomparable encoding ([`codec`]), since Region boundaries are encoded
//! keys for transactional clients. Each Region keeps Percolator's lock,
//! write and data column families
//! ([txn.md](https://github.com/tikv-plan/tikv-plan/blob/main/docs/txn.md#the-simulated-clusters-side)), shared by its
//! peers and apart from the raw data, and answers as TiKV does: snapshot reads
//! blocked by Put/Delete locks at or below their ts (`Context.resolved_locks`
//! and read committed bypass them), write conflicts (a later rollback record
//! conflicts too), `AlreadyExist` for Insert/CheckNotExists, idempotent resends
//! of prewrite and commit, `TxnLockNotFound` after a rollback,
//! `CommitTsExpired`, async commit whose `min_commit_ts` exceeds every read ts
//! the Region has seen (`max_ts`), 1PC (falling back to 2PC, both ts 0, above
//! `max_commit_ts`), `CheckTxnStatus` with every action (TTL measured on the
//! physical part of `current_ts`), `CheckSecondaryLocks` (a missing secondary
//! is rolled back and reported rolled back), `ResolveLock` (Region-wide, by
//! `txn_infos`, or by keys), pessimistic locks that wait for another
//! transaction's lock and detect deadlocks (see
//! [Lock waiting](#lock-waiting)), heart beats, paged `ScanLock`, `DeleteRange`, store-wide
//! `UnsafeDestroyRange` (no Region context) and `GC` at a safe point.
//! Assertions (`Mutation.assertion` with an assertion level) are not checked,
//! and a rollback at a ts another transaction committed at is not marked on
//! that record (TiKV's "overlapped rollback"): timestamps from the TSO never
//! collide.
//!
//! Data is one map per Region shared by all its peers (a replicated state
//! machine) behind the cluster lock, so it is linearizable and
//! compare-and-swap is atomic. Column families `default` (or empty),
//! `write` and `lock`; others get a key error. TTLs (seconds) are honoured
//! with tokio's clock, so a paused test clock controls expiry; a TTL beyond
//! a century is held at a century (TiKV saturates it). Only replica and
//! stale reads on a lagging store see an older copy (below).
//!
//! # Lock waiting
//!
//! As TiKV's lock manager does (its legacy wake-up mode), a pessimistic
//! lock request that meets another transaction's lock waits on that key up
//! to its `wait_timeout` (0: the server's `wait-for-lock-timeout`, 1 s by
//! default; negative: no wait). A release wakes the waiter with the
//! smallest start ts at once and the others after the wake-up delay
//! (20 ms), each with a `PessimisticRetry` write conflict; a wait that runs
//! out gets `KeyIsLocked`; a wait that would close a cycle in the
//! cluster-wide wait-for graph fails at once with `KeyError.deadlock`.
//! [`SimClusterBuilder::lock_wait`] and [`SimCluster::set_lock_wait_config`]
//! set the timeouts ([`LockWaitConfig`]); [`SimCluster::lock_wait_stats`]
//! counts waits, wake-ups, timeouts and deadlocks.
//!
//! # Faults
//!
//! All can be changed while running:
//! [`store_down`](SimCluster::store_down) /
//! [`store_up`](SimCluster::store_up) (listener closed and connections
//! reset; back on the same port; the Regions it led elect new leaders after
//! an election timeout, see Raft below),
//! [`store_down_cold`](SimCluster::store_down_cold) (the same, keeping its
//! leaders), [`store_hang`](SimCluster::store_hang)
//! with [`HangMode::Connect`] (new TCP connects hang because the kernel
//! drops SYNs, and open connections stop moving bytes) or [`HangMode::Respond`] (requests are received, never
//! answered until [`store_unhang`](SimCluster::store_unhang)),
//! [`store_slow`](SimCluster::store_slow),
//! [`store_busy`](SimCluster::store_busy),
//! [`transfer_leader`](SimCluster::transfer_leader) (PD updated or left
//! stale), [`set_pd_leader`](SimCluster::set_pd_leader),
//! [`make_cold`](SimCluster::make_cold),
//! [`split_region`](SimCluster::split_region),
//! [`merge_regions`](SimCluster::merge_regions) (the source's range, data
//! and locks join the adjacent target, whose version becomes one more than
//! the larger of the two after the source's PrepareMerge; the source's
//! stores answer `RegionNotFound`),
//! [`add_peer`](SimCluster::add_peer),
//! [`promote_learner`](SimCluster::promote_learner) and
//! [`remove_peer`](SimCluster::remove_peer) (conf_ver + 1 each; a removed
//! peer's store answers `RegionNotFound`; a removed leader hands
//! leadership to another voter first),
//! [`move_store`](SimCluster::move_store) (the store restarts at a new
//! address and PD names it; another store taking the old address answers
//! `StoreNotMatch` to requests meant for it when it holds their Region,
//! else `RegionNotFound`, the check before),
//! [`drop_next_response`](SimCluster::drop_next_response) (the next served
//! request of that method is applied, then the store resets all its
//! connections, so the client sees a transport error: an undetermined
//! outcome; a dropped `kv_commit` is committed),
//! [`advance_tso_clock`](SimCluster::advance_tso_clock),
//! [`pd_transfer_leader`](SimCluster::pd_transfer_leader),
//! [`pd_member_down`](SimCluster::pd_member_down),
//! [`pd_member_up`](SimCluster::pd_member_up),
//! [`pd_member_hang`](SimCluster::pd_member_hang) /
//! [`pd_member_unhang`](SimCluster::pd_member_unhang) (the member receives
//! requests, TSO included, and answers none),
//! [`set_store_cut_off_from_pd`](SimCluster::set_store_cut_off_from_pd) (PD
//! stops hearing the store: a leader moving to it is not reported),
//! [`store_lag`](SimCluster::store_lag) (below) and
//! [`cut_store_from_clients`](SimCluster::cut_store_from_clients) (below).
//!
//! PD reports the peers of a store that is down as `down_peers`.
//!
//! # Raft: elections, restarts and the errors around them
//!
//! A store that goes down or hangs loses its leaderships: each Region it
//! led elects a leader among its live voters when the first follower's
//! election timeout runs out, drawn as raft-rs draws it from
//! [`RaftTiming`] (TiKV's defaults: 10 to 20 s;
//! [`SimClusterBuilder::raft_timing`] scales them). Until then followers
//! name the dead leader; without a live quorum no one leads; PD hears of
//! the winner at once; the dead leader's in-memory pessimistic locks are
//! lost. [`keep_leaders`](SimCluster::keep_leaders) keeps a store's
//! leaders however long it is dead (the cold-Region case).
//! [`evict_leaders`](SimCluster::evict_leaders),
//! [`restart_store`](SimCluster::restart_store) and
//! [`rolling_restart`](SimCluster::rolling_restart) restart stores as
//! operators do, leaders evicted first. The Region errors TiKV gives in
//! these moments come where TiKV gives them: `MaxTimestampNotSynced` from a
//! new leader, `StaleCommand` for a proposal a leader change overtook
//! ([`store_propose_delay`](SimCluster::store_propose_delay)),
//! `ProposalInMergingMode` during a merge
//! ([`merge_regions_after`](SimCluster::merge_regions_after)),
//! `RegionNotInitialized` from a peer awaiting its snapshot
//! ([`add_peer_uninitialized`](SimCluster::add_peer_uninitialized)),
//! `DiskFull` ([`store_disk_full`](SimCluster::store_disk_full)).
//! [`raft_stats`](SimCluster::raft_stats) counts them. `raft.rs` names the
//! TiKV and raft-rs sources of each.
//!
//! # Forwarding and a store cut off from clients
//!
//! As TiKV's server does, a store receiving a call whose metadata carries
//! [`FORWARDED_HOST`] (`tikv-forwarded-host`) naming another address
//! proxies it there over gRPC — a unary call, or a whole `BatchCommands`
//! stream — without the header, and returns the target's answer; a target
//! it cannot reach is a gRPC `Unavailable` status, never a Region error.
//! [`StoreCounters::forwarded`] counts the calls a store proxied.
//! [`SimCluster::cut_store_from_clients`] cuts one store off from clients
//! ([`ClientCut::Refuse`]: their connections reset; [`ClientCut::Drop`]:
//! they stop moving bytes) while the other stores still reach it and it
//! keeps leading: the client-side half of "the leader is unreachable".
//! On a cluster hosted on a simulated network, partition that network
//! instead; its stores forward through the network's own dial, given with
//! [`SimClusterBuilder::forward_dial`].
//!
//! # Replica and stale reads
//!
//! As TiKV does, a follower or learner serves a read flagged
//! `Context.replica_read` through read index (it asks the leader for its
//! commit point and answers once it has applied it; `NotLeader` without a
//! leader) and one flagged `Context.stale_read` when its safe-ts has
//! reached the read's timestamp, else `DataIsNotReady`. The leader serves
//! both as ordinary reads; a witness answers `IsWitness`.
//! [`SimCluster::store_lag`] makes a store's non-leader peers apply late:
//! a replica read then waits for its read index (`ReadIndexNotReady` 100
//! writes behind) and a stale read is held to the lagging safe-ts.
//! [`SimCluster::set_resolved_ts_interval`] sets how often resolved ts, and
//! so safe-ts, advances (TiKV's 20 s); [`SimCluster::set_store_labels`] the
//! labels PD reports; [`SimCluster::naive_replica_reads`] serves replica
//! reads without read index, to show that a checker catches them.
//! [`StoreCounters::replica_reads`], [`StoreCounters::stale_reads`] and
//! [`StoreCounters::served_as_replica`] count the flagged reads and those a
//! non-leader peer served.
//!
//! # TiFlash stores
//!
//! Most TiDB clusters run TiFlash beside TiKV, and so can this one:
//! [`SimClusterBuilder::tiflash_stores`]`(t)` adds stores `n + 1 ..= n + t`
//! after the `n` TiKV stores. As TiFlash's proxy registers them, PD lists
//! them (`GetStore`, `GetAllStores`, the HTTP API) with the label
//! `engine=tiflash` first, TiFlash's version ([`SIM_TIFLASH_VERSION`]) and
//! a `peer_address` (the simulator serves each store on one address; a
//! TiFlash proxy listens on a port of its own). As PD's placement rules
//! place TiFlash replicas, every Region the builder lays out has a learner
//! on each TiFlash store, after its voters; an explicit
//! [`RegionLayout`] may put learners there too, never a voter or a
//! witness. A TiFlash learner never votes or leads: [`SimCluster::add_peer`]
//! as a voter there, [`SimCluster::promote_learner`] and
//! [`SimCluster::transfer_leader`] to it are refused; splits give the new
//! Region the same learner, and merges need it on both sides, as any peer.
//! The `engine` label is the store's: [`SimCluster::set_store_labels`]
//! refuses the key, as PD's API does.
//!
//! A TiFlash store's gRPC server answers as TiFlash's does: every
//! `tikvpb.Tikv` method of the wire protocol (raw, transactional,
//! `UnsafeDestroyRange`) and the `BatchCommands` stream with gRPC
//! `Unimplemented` and an empty message (TiFlash implements only its
//! coprocessor, MPP and storage methods; the rest are the generated base
//! class's), forwarded or not, counted under the method's label (or
//! `batch_commands`) as [`Outcome::Unimplemented`]. Going down, hangs and
//! client cuts apply to it as to a TiKV store; busy, slow and lag are
//! TiKV's and change nothing there. [`SimCluster::tikv_store_ids`],
//! [`SimCluster::tiflash_store_ids`] and [`SimCluster::store_engine`] tell
//! the stores apart ([`SimCluster::store_ids`] lists both).
//!
//! # Sizes
//!
//! As TiKV's, a store's gRPC server takes and sends messages of any size
//! ([`STORE_GRPC_MAX_MESSAGE_SIZE`]), unary or in a BatchCommands stream:
//! whether a large answer arrives is the client's own receive limit to
//! decide (tonic's default is 4 MiB). PD members take messages up to
//! [`PD_GRPC_MAX_RECV_MESSAGE_SIZE`] (150 MiB + 512 KiB) and send up to
//! [`PD_GRPC_MAX_SEND_MESSAGE_SIZE`], etcd's limits under PD's defaults; a
//! larger request fails with tonic's `OutOfRange` where PD's grpc-go
//! answers `ResourceExhausted`. A write whose Raft entry would be larger
//! than [`SimClusterBuilder::raft_entry_max_size`] (TiKV's 8 MiB,
//! [`DEFAULT_RAFT_ENTRY_MAX_SIZE`]) is answered, after the Region checks
//! and before anything is applied, with the Region error
//! `RaftEntryTooLarge { region_id, entry_size }` and counted as
//! [`Outcome::RaftEntryTooLarge`]. TiKV measures the serialized Raft
//! command; the simulator measures the encoded request, which carries
//! the same keys and values. A transactional write is refused on its
//! size even where TiKV would first find a conflict and propose nothing.
//!
//! # Counters
//!
//! [`SimCluster::counters`] returns a [`StoreCounters`] snapshot: requests
//! by method label (`raw_get`, `kv_commit`, …, see [`RAW_METHODS`] and
//! [`TXN_METHODS`]) and [`Outcome`]; a transactional response carrying a
//! key error (also a locked pair of a batch get or scan) counts as
//! [`Outcome::KeyError`].
//! Every request that reaches a store's service is counted once with its
//! outcome; one that waits in a [`HangMode::Respond`] hang is also counted
//! as [`Outcome::Hung`] when it starts waiting (and only so, if the store
//! goes down before it is answered). Requests stuck in a
//! [`HangMode::Connect`] hang or sent to a downed store never reach the
//! service and are not counted.
//!
//! [`SimCluster::pd_calls`] counts the calls PD's members receive, by gRPC
//! method (`GetRegion`, `ScanRegions`, `GetStore`, `Tso` once per request on
//! a stream, …), so a test can bound a client's load on PD;
//! [`SimCluster::reset_counters`] zeroes both.
//!
//! # The `tikv-sim` binary and its control interface
//!
//! `tikv-sim --stores 3 --regions 8 --pd 127.0.0.1:2379` starts a cluster
//! whose Regions split the printable key space evenly at memcomparable
//! encodings of evenly spread keys ([`control::even_split_keys`]), so
//! transactional clients decode every boundary and raw clients see plain
//! bytes, prints exactly one line
//! `pd=127.0.0.1:2379` (the real address) on stdout when ready, and runs
//! until killed. Its control port (`--control ADDR`, default
//! `127.0.0.1:0`, announced on stderr as `control=ADDR`) takes the text
//! commands documented in [`control`]; tikv-plan's docs/testing.md, "Driving faults from a
//! shell" shows a session.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod cluster;
pub mod codec;
pub mod control;
mod counters;
mod data;
mod error;
mod keyspace;
mod limits;
mod lock_wait;
mod mvcc;
mod net;
mod pd;
mod raft;
mod replica;
mod state;
mod store;

pub(crate) use cluster::Shared;
pub use cluster::{
    HostedServers, RegionLayout, Restart, SimCluster, SimClusterBuilder, SimPeer,
    DEFAULT_CLUSTER_ID, FIRST_REGION_ID, PD_MEMBER_ID_BASE, RAW_METHODS, RESTART_DRAIN,
    TXN_METHODS,
};
pub use codec::{keyspace_split_keys, KeyspaceMode};
pub use counters::{Outcome, RequestTag, StoreCounters};
pub use error::{Error, Result};
pub use keyspace::DEFAULT_KEYSPACE_NAME;
pub use limits::{
    DEFAULT_RAFT_ENTRY_MAX_SIZE, PD_GRPC_MAX_RECV_MESSAGE_SIZE, PD_GRPC_MAX_SEND_MESSAGE_SIZE,
    STORE_GRPC_MAX_MESSAGE_SIZE,
};
pub use lock_wait::{
    key_hash, LockWaitConfig, LockWaitStats, DEFAULT_WAIT_FOR_LOCK_TIMEOUT, DEFAULT_WAKE_UP_DELAY,
};
/// The wire types the simulator serves (re-exported, so a test needs no
/// second dependency to build requests).
pub use tikv_plan_proto as proto;

pub use mvcc::MvccVersion;
pub use net::ClientCut;
pub use raft::{RaftStats, RaftTiming};
pub use state::{ColdMode, HangMode};
pub use store::{ForwardDial, ForwardStream, FORWARDED_HOST};
pub use store::{COPROCESSOR_PLUGIN, COPROCESSOR_PLUGIN_VERSION};
pub use store::{DEFAULT_HEALTH_FEEDBACK_INTERVAL, DEFAULT_INSPECT_INTERVAL};
pub use tikv_plan_proto::meta::StoreEngine;

/// The version string the simulated stores report to PD clients.
pub const SIM_TIKV_VERSION: &str = "8.5.0";
/// The version string the simulated TiFlash stores report (TiFlash's proxy
/// registers the store with TiFlash's own release version).
pub const SIM_TIFLASH_VERSION: &str = "8.5.0";
