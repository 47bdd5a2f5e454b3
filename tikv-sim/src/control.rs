//! The control interface of `tikv-sim`: a line-based text protocol on a
//! TCP port, so faults can be driven from a shell (`nc`, or bash's
//! `/dev/tcp`).
//!
//! Send one command per line. The answer is zero or more data lines, then
//! one final line: `ok` (possibly followed by a value, e.g. `ok 1012`) or
//! `error: <what went wrong>`. A connection may send any number of
//! commands.
//!
//! | command | effect |
//! |---|---|
//! | `help` | lists the commands |
//! | `stores` | one line per store: id, address, faults, and `engine=tiflash` for a TiFlash store |
//! | `regions` | one line per Region in key order: id, range, epoch, true leader, PD's leader, peers |
//! | `region KEY` | the line of the Region holding `KEY` |
//! | `down STORE` / `up STORE` | store down as a crash (port closed, connections reset; its Regions elect new leaders after an election timeout) / back on the same port |
//! | `down-cold STORE` | store down keeping its leaders (no follower campaigns: the cold-Region case) until `up` |
//! | `evict-leaders STORE` | PD's evict-leader scheduler: every leader moves to a follower on a live store; answers `ok MOVED` |
//! | `restart STORE [DOWN_MS]` | graceful restart: leaders evicted, down `DOWN_MS` (default 1000), up, leaders back; answers `ok EVICTED RETURNED` |
//! | `rolling-restart [DOWN_MS] [BETWEEN_MS]` | `restart` every TiKV store in turn, `BETWEEN_MS` apart (defaults 1000 and 1000); one line `STORE EVICTED RETURNED` each |
//! | `raft-tick MS` | Raft's base tick from now on (elections 10 to 20 ticks after a death; TiKV's is 1000) |
//! | `electing` | one line per Region whose leader died and whose followers have not elected yet |
//! | `raft-stats` | one line each: elections, no_quorum, pessimistic_locks_lost, and the Region errors answered (max_ts_not_synced, stale_commands, proposals_in_merging_mode, region_not_initialized, disk_full) |
//! | `disk-full STORE on\|off` | the store's disk full: Regions it leads refuse writes with `DiskFull` |
//! | `propose-delay STORE MS` | writes its leaders propose wait `MS` before applying; a leader change meanwhile answers `StaleCommand` (0 ends it) |
//! | `hang STORE connect` | new TCP connects hang and open connections stop moving bytes (dropped packets) |
//! | `hang STORE respond` | receive requests but never answer |
//! | `unhang STORE` | end a hang |
//! | `slow STORE MS` | add `MS` milliseconds before each request (0 ends it); the store's slow score rises as TiKV's does |
//! | `health-timing INSPECT_MS FEEDBACK_MS` | every store's `raftstore.inspect-interval` (TiKV: 100; a latency at or above it times the slow score's inspections out) and `server.health-feedback-interval` (TiKV: 1000; 0: no feedback on BatchCommands streams) |
//! | `slow-score STORE` | answers `ok SCORE`, the store's slow score now (1 to 100) |
//! | `busy STORE MS` / `busy STORE off` | answer `ServerIsBusy` with `estimated_wait_ms = MS` / stop |
//! | `transfer REGION STORE` | move leadership to the peer on `STORE`, PD updated |
//! | `transfer REGION STORE stale` | the same, PD keeps the old leader |
//! | `pd-view REGION STORE` / `pd-view REGION none` | set the leader PD reports |
//! | `cold REGION [accept\|not-leader-first]` | lose the leader, PD keeps it; a voter campaigns on a leader request (default `accept`) |
//! | `election REGION` | the voters lose the leader: every peer but the leader answers `NotLeader` without a hint and none campaigns, until `transfer` names the winner |
//! | `split KEY` | split the Region holding `KEY`; answers `ok NEW_REGION_ID` |
//! | `merge SOURCE TARGET [WINDOW_MS]` | merge Region `SOURCE` into the adjacent Region `TARGET` (peers on the same stores, both led); with `WINDOW_MS`, the source refuses writes (`ProposalInMergingMode`) that long before the merge commits |
//! | `add-peer REGION STORE [learner]` | add a voter (or a learner) on `STORE`; answers `ok NEW_PEER_ID` |
//! | `promote REGION STORE` | make the learner on `STORE` a voter |
//! | `remove-peer REGION STORE` | remove the peer on `STORE` (a leader hands leadership to another voter first) |
//! | `move-store STORE [ADDR]` | restart `STORE` at `ADDR` (default: a free port); PD names the new address; answers `ok ADDRESS` |
//! | `cut-clients STORE [refuse\|drop]` / `uncut-clients STORE` | cut the store off from clients (their connections reset, or stop moving bytes) while other stores still reach it and it keeps leading; a call forwarded through another store (`tikv-forwarded-host`) gets through / end the cut |
//! | `drop STORE METHOD` | apply the next `METHOD` request (e.g. `raw_compare_and_swap`) then reset the connections |
//! | `counters STORE` | one line `METHOD OUTCOME COUNT` per counter (raw and transactional methods), then `replica_read N`, `stale_read N`, `served_as_replica N` (reads a non-leader peer of the store served), `forwarded N FAILED` (calls this store proxied, and those whose target it could not reach) |
//! | `lag STORE MS` / `unlag STORE` | the store's non-leader peers apply up to `MS` late (replica reads wait for read index; stale reads are held to the lagging safe-ts) / catch up |
//! | `labels STORE [KEY=VALUE ...]` | set the store's labels, which PD reports (none given: no labels; `engine` is refused, as PD refuses it) |
//! | `resolved-ts-interval MS` | how often Regions' resolved ts (and so safe-ts) advances (TiKV's default, 20000) |
//! | `naive-replica-reads on\|off` | serve replica reads from the peer's own state without read index (stale under lag; for checking checkers) |
//! | `locks [START [END]]` | one line per transactional lock with its key in `[START, END)` (unencoded keys; default: all): key, primary, start_ts, type, ttl, for_update_ts, min_commit_ts, async commit |
//! | `versions KEY` | the lock of a transactional key, if any, then one line per write record, newest first: commit_ts, start_ts, kind, value |
//! | `advance-clock MS` | move the TSO's physical clock forward by `MS` milliseconds (lock TTLs expire without waiting) |
//! | `gc-safe-point` | answers `ok SAFE_POINT`, PD's GC safe point |
//! | `request-tags` | one line `METHOD group=G source=S txn_source=N tag=HEX COUNT` per set of tags requests arrived with, summed over every store (`-` for an empty field: no resource group, source or tag), then `deadline_drops N` (reads dropped unread because their `max_execution_duration_ms` passed, answered `ServerIsBusy` "deadline is exceeded") |
//! | `reset-counters` | zero every counter (stores' and PD's) |
//! | `pd-calls` | one line per PD gRPC method called since the start or the last reset: method, count (each request on a `Tso` stream counts) |
//! | `pd-leader INDEX` / `pd-down INDEX` / `pd-up INDEX` | PD member leadership, down, up |
//! | `pd-hang INDEX` / `pd-unhang INDEX` | a PD member receives requests and answers none, until lifted |
//!
//! `KEY` is taken literally, or as hex bytes when written `0x...`. Keys in
//! answers are printed with non-printable bytes as `\xNN`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The longest control command line accepted, in bytes.
const MAX_COMMAND_LINE: u64 = 4096;
use tokio::net::TcpListener;

use super::{ClientCut, ColdMode, HangMode, SimCluster};
use crate::proto::kvrpcpb;
use crate::proto::metapb::{self, PeerRole};
use crate::{Error, Result};

/// The smallest and largest byte of the printable keys `tikv-sim` splits
/// the key space over (`!` to `~`).
const PRINTABLE: (u8, u8) = (0x21, 0x7e);

/// `regions - 1` split keys that cut the printable key space (`!` to `~`,
/// two characters deep) into `regions` Regions of even width, each the
/// memcomparable encoding ([`codec::encode_bytes`](super::codec::encode_bytes))
/// of its key. Transactional clients decode every Region boundary PD
/// returns ([txn.md, "Key encoding"](https://github.com/tikv-plan/tikv-plan/blob/main/docs/txn.md#key-encoding-api-v1)), so
/// these are valid encodings; to a raw client they are plain bytes. At most 94
/// × 94 Regions.
pub fn even_split_keys(regions: usize) -> Vec<Vec<u8>> {
    even_plain_split_keys(regions)
        .iter()
        .map(|k| super::codec::encode_bytes(k))
        .collect()
}

/// The unencoded keys [`even_split_keys`] encodes: `regions - 1` printable
/// keys of one or two characters, evenly spread.
pub fn even_plain_split_keys(regions: usize) -> Vec<Vec<u8>> {
    let base = usize::from(PRINTABLE.1 - PRINTABLE.0) + 1;
    let space = base * base;
    let regions = regions.clamp(1, space);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 1..regions {
        let point = i * space / regions;
        // Both digits are below `base` (94), so they fit in a byte.
        let high = PRINTABLE.0 + (point / base) as u8;
        let low = PRINTABLE.0 + (point % base) as u8;
        let key = if low == PRINTABLE.0 {
            vec![high]
        } else {
            vec![high, low]
        };
        if keys.last() != Some(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Key bytes for display: printable ASCII as is, other bytes as `\xNN`.
pub fn escape_key(key: &[u8]) -> String {
    let mut out = String::new();
    for b in key {
        if b.is_ascii_graphic() && *b != b'\\' {
            out.push(char::from(*b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn parse_key(text: &str) -> Result<Vec<u8>> {
    match text.strip_prefix("0x") {
        None => Ok(text.as_bytes().to_vec()),
        Some(hex) => {
            if !hex.is_ascii() || hex.len() % 2 != 0 {
                return Err(Error::InvalidArgument(format!(
                    "hex key {text} must be an even number of hex digits"
                )));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| {
                    u8::from_str_radix(&hex[i..i + 2], 16)
                        .map_err(|_| Error::InvalidArgument(format!("{text} is not a hex key")))
                })
                .collect()
        }
    }
}

fn parse_num<T: std::str::FromStr>(what: &str, text: Option<&str>) -> Result<T> {
    let text = text.ok_or_else(|| Error::InvalidArgument(format!("missing {what}")))?;
    text.parse()
        .map_err(|_| Error::InvalidArgument(format!("{what} must be a number, not {text:?}")))
}

fn peer_text(p: &metapb::Peer) -> String {
    let mut s = format!("{}@{}", p.id, p.store_id);
    if p.is_witness {
        s.push_str("(witness)");
    } else if p.role == PeerRole::Learner as i32 {
        s.push_str("(learner)");
    } else if p.role != PeerRole::Voter as i32 {
        s.push_str("(joint)");
    }
    s
}

fn region_line(cluster: &SimCluster, r: &metapb::Region) -> String {
    let epoch = r.region_epoch.unwrap_or_default();
    let leader = |p: Option<metapb::Peer>| {
        p.map(|p| peer_text(&p))
            .unwrap_or_else(|| "none".to_owned())
    };
    format!(
        "region {} start={} end={} version={} conf_ver={} leader={} pd_leader={} peers={}",
        r.id,
        escape_key(&r.start_key),
        escape_key(&r.end_key),
        epoch.version,
        epoch.conf_ver,
        leader(cluster.leader_of(r.id)),
        leader(cluster.pd_leader_of(r.id)),
        r.peers.iter().map(peer_text).collect::<Vec<_>>().join(",")
    )
}

fn lock_line(lock: &kvrpcpb::LockInfo) -> String {
    let kind = match kvrpcpb::Op::try_from(lock.lock_type) {
        Ok(kvrpcpb::Op::Put) => "put",
        Ok(kvrpcpb::Op::Del) => "delete",
        Ok(kvrpcpb::Op::Lock) => "lock",
        Ok(kvrpcpb::Op::PessimisticLock) => "pessimistic",
        _ => "unknown",
    };
    format!(
        "lock key={} primary={} start_ts={} type={kind} ttl={} for_update_ts={} min_commit_ts={} async_commit={}",
        escape_key(&lock.key),
        escape_key(&lock.primary_lock),
        lock.lock_version,
        lock.lock_ttl,
        lock.lock_for_update_ts,
        lock.min_commit_ts,
        lock.use_async_commit
    )
}

const HELP: &str = "commands: help | stores | regions | region KEY | down STORE | up STORE | \
down-cold STORE | evict-leaders STORE | restart STORE [DOWN_MS] | rolling-restart [DOWN_MS] [BETWEEN_MS] | \
raft-tick MS | electing | raft-stats | disk-full STORE on|off | propose-delay STORE MS | \
hang STORE connect|respond | unhang STORE | slow STORE MS | health-timing INSPECT_MS FEEDBACK_MS | \
slow-score STORE | busy STORE MS|off | \
transfer REGION STORE [stale] | pd-view REGION STORE|none | cold REGION [accept|not-leader-first] | \
election REGION | split KEY | merge SOURCE TARGET [WINDOW_MS] | add-peer REGION STORE [learner] | promote REGION STORE | \
remove-peer REGION STORE | move-store STORE [ADDR] | cut-clients STORE [refuse|drop] | uncut-clients STORE | \
drop STORE METHOD | counters STORE | request-tags | reset-counters | pd-calls | lag STORE MS | unlag STORE | \
labels STORE [KEY=VALUE ...] | resolved-ts-interval MS | naive-replica-reads on|off | pd-leader INDEX | pd-down INDEX | pd-up INDEX | \
pd-hang INDEX | pd-unhang INDEX | locks [START [END]] | versions KEY | advance-clock MS | gc-safe-point";

/// Runs one command line against `cluster` and returns the whole answer
/// (data lines, then `ok ...` or `error: ...`), newline-terminated.
pub async fn execute(cluster: &SimCluster, line: &str) -> String {
    match run(cluster, line).await {
        Ok(lines) => lines,
        Err(e) => format!("error: {e}\n"),
    }
}

async fn run(cluster: &SimCluster, line: &str) -> Result<String> {
    let mut words = line.split_whitespace();
    let Some(command) = words.next() else {
        return Err(Error::InvalidArgument("empty command; try help".to_owned()));
    };
    let mut out = String::new();
    let mut result = String::new();
    match command {
        "help" => {
            out.push_str(HELP);
            out.push('\n');
        }
        "stores" => {
            for id in cluster.store_ids() {
                let addr = cluster.store_addr(id).unwrap_or_default();
                let engine = match cluster.store_engine(id) {
                    Some(e) if !e.is_tikv() => format!(" engine={}", e.label_value()),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "store {id} {addr} {}{engine}",
                    cluster.store_fault_text(id)
                );
            }
        }
        "regions" => {
            for r in cluster.regions() {
                out.push_str(&region_line(cluster, &r));
                out.push('\n');
            }
        }
        "region" => {
            let key = parse_key(words.next().unwrap_or(""))?;
            let r = cluster
                .region_for_key(&key)
                .ok_or_else(|| Error::InvalidArgument("no region holds that key".to_owned()))?;
            out.push_str(&region_line(cluster, &r));
            out.push('\n');
        }
        "down" => {
            cluster
                .store_down(known_store(cluster, words.next())?)
                .await
        }
        "down-cold" => {
            cluster
                .store_down_cold(known_store(cluster, words.next())?)
                .await?
        }
        "evict-leaders" => {
            let moved = cluster.evict_leaders(known_store(cluster, words.next())?)?;
            result = moved.len().to_string();
        }
        "restart" => {
            let store = known_store(cluster, words.next())?;
            let down: u64 = match words.next() {
                None => 1000,
                ms => parse_num("milliseconds down", ms)?,
            };
            let r = cluster
                .restart_store(store, Duration::from_millis(down))
                .await?;
            result = format!("{} {}", r.evicted, r.returned);
        }
        "rolling-restart" => {
            let mut ms = |what: &str| -> Result<u64> {
                match words.next() {
                    None => Ok(1000),
                    ms => parse_num(what, ms),
                }
            };
            let (down, between) = (ms("milliseconds down")?, ms("milliseconds between")?);
            let restarts = cluster
                .rolling_restart(Duration::from_millis(down), Duration::from_millis(between))
                .await?;
            for r in restarts {
                let _ = writeln!(out, "{} {} {}", r.store_id, r.evicted, r.returned);
            }
        }
        "raft-tick" => {
            let ms: u64 = parse_num("milliseconds", words.next())?;
            let timing = cluster.raft_timing();
            cluster.set_raft_timing(crate::RaftTiming {
                base_tick: Duration::from_millis(ms.max(1)),
                ..timing
            });
        }
        "electing" => {
            for region in cluster.regions_electing() {
                let _ = writeln!(out, "{region}");
            }
        }
        "raft-stats" => {
            let s = cluster.raft_stats();
            for (name, n) in [
                ("elections", s.elections),
                ("no_quorum", s.no_quorum),
                ("pessimistic_locks_lost", s.pessimistic_locks_lost),
                ("max_ts_not_synced", s.max_ts_not_synced),
                ("stale_commands", s.stale_commands),
                ("proposals_in_merging_mode", s.proposals_in_merging_mode),
                ("region_not_initialized", s.region_not_initialized),
                ("disk_full", s.disk_full),
            ] {
                let _ = writeln!(out, "{name} {n}");
            }
        }
        "disk-full" => {
            let store = known_store(cluster, words.next())?;
            let full = match words.next() {
                Some("on") => true,
                Some("off") => false,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "disk-full takes on or off, not {other:?}"
                    )))
                }
            };
            cluster.store_disk_full(store, full)?;
        }
        "propose-delay" => {
            let store = known_store(cluster, words.next())?;
            let ms: u64 = parse_num("milliseconds", words.next())?;
            cluster.store_propose_delay(store, Duration::from_millis(ms))?;
        }
        "up" => {
            cluster
                .store_up(known_store(cluster, words.next())?)
                .await?
        }
        "hang" => {
            let store = known_store(cluster, words.next())?;
            let mode = match words.next() {
                Some("connect") => HangMode::Connect,
                Some("respond") => HangMode::Respond,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "hang mode must be connect or respond, not {other:?}"
                    )))
                }
            };
            cluster.store_hang(store, mode);
        }
        "unhang" => cluster.store_unhang(known_store(cluster, words.next())?),
        "slow" => {
            let store = known_store(cluster, words.next())?;
            let ms: u64 = parse_num("milliseconds", words.next())?;
            cluster.store_slow(store, Duration::from_millis(ms));
        }
        "health-timing" => {
            let inspect: u64 = parse_num("inspect interval in ms", words.next())?;
            let feedback: u64 = parse_num("feedback interval in ms", words.next())?;
            cluster.store_health_timing(
                Duration::from_millis(inspect.max(1)),
                (feedback > 0).then(|| Duration::from_millis(feedback)),
            );
        }
        "slow-score" => {
            let store = known_store(cluster, words.next())?;
            let score = cluster.store_slow_score(store).unwrap_or(1.0);
            result = format!("{score:.2}");
        }
        "busy" => {
            let store = known_store(cluster, words.next())?;
            let wait = match words.next() {
                Some("off") => None,
                other => Some(parse_num::<u32>("estimated wait in ms", other)?),
            };
            cluster.store_busy(store, wait);
        }
        "transfer" => {
            let region: u64 = parse_num("region id", words.next())?;
            let store: u64 = parse_num("store id", words.next())?;
            let update_pd = match words.next() {
                None | Some("pd") => true,
                Some("stale") => false,
                Some(other) => {
                    return Err(Error::InvalidArgument(format!(
                        "expected stale or nothing after the store, not {other:?}"
                    )))
                }
            };
            cluster.transfer_leader(region, store, update_pd)?;
        }
        "pd-view" => {
            let region: u64 = parse_num("region id", words.next())?;
            let store = match words.next() {
                Some("none") => None,
                other => Some(parse_num::<u64>("store id", other)?),
            };
            cluster.set_pd_leader(region, store)?;
        }
        "cold" => {
            let region: u64 = parse_num("region id", words.next())?;
            let mode = match words.next() {
                None | Some("accept") => ColdMode::AcceptAtOnce,
                Some("not-leader-first") => ColdMode::NotLeaderFirst,
                Some(other) => {
                    return Err(Error::InvalidArgument(format!(
                        "cold mode must be accept or not-leader-first, not {other:?}"
                    )))
                }
            };
            cluster.make_cold(region, mode)?;
        }
        "election" => {
            let region: u64 = parse_num("region id", words.next())?;
            cluster.start_election(region)?;
        }
        "split" => {
            let key = parse_key(words.next().unwrap_or(""))?;
            result = cluster.split_region(&key)?.to_string();
        }
        "merge" => {
            let source: u64 = parse_num("source region id", words.next())?;
            let target: u64 = parse_num("target region id", words.next())?;
            match words.next() {
                None => cluster.merge_regions(source, target)?,
                window => {
                    let ms: u64 = parse_num("merge window in ms", window)?;
                    cluster.merge_regions_after(source, target, Duration::from_millis(ms))?;
                }
            }
        }
        "add-peer" => {
            let region: u64 = parse_num("region id", words.next())?;
            let store = known_store(cluster, words.next())?;
            let role = match words.next() {
                None | Some("voter") => PeerRole::Voter,
                Some("learner") => PeerRole::Learner,
                Some(other) => {
                    return Err(Error::InvalidArgument(format!(
                        "expected voter, learner or nothing after the store, not {other:?}"
                    )))
                }
            };
            result = cluster.add_peer(region, store, role)?.to_string();
        }
        "promote" => {
            let region: u64 = parse_num("region id", words.next())?;
            cluster.promote_learner(region, known_store(cluster, words.next())?)?;
        }
        "remove-peer" => {
            let region: u64 = parse_num("region id", words.next())?;
            cluster.remove_peer(region, known_store(cluster, words.next())?)?;
        }
        "move-store" => {
            let store = known_store(cluster, words.next())?;
            let to = match words.next() {
                None => None,
                Some(addr) => Some(addr.parse().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "{addr:?} is not an address; write it as 127.0.0.1:PORT"
                    ))
                })?),
            };
            result = cluster.move_store(store, to).await?;
        }
        "cut-clients" => {
            let store = known_store(cluster, words.next())?;
            let cut = match words.next() {
                None | Some("refuse") => ClientCut::Refuse,
                Some("drop") => ClientCut::Drop,
                Some(other) => {
                    return Err(Error::InvalidArgument(format!(
                        "a cut refuses or drops, not {other:?}"
                    )))
                }
            };
            cluster.cut_store_from_clients(store, Some(cut))?;
        }
        "uncut-clients" => {
            cluster.cut_store_from_clients(known_store(cluster, words.next())?, None)?;
        }
        "drop" => {
            let store = known_store(cluster, words.next())?;
            let method = words
                .next()
                .ok_or_else(|| Error::InvalidArgument("missing method, e.g. raw_put".to_owned()))?;
            cluster.drop_next_response(store, method)?;
        }
        "counters" => {
            let store = known_store(cluster, words.next())?;
            let counters = cluster.counters(store);
            for (method, outcome, n) in counters.entries() {
                let _ = writeln!(out, "{method} {} {n}", outcome.name());
            }
            let _ = writeln!(out, "replica_read {}", counters.replica_reads());
            let _ = writeln!(out, "stale_read {}", counters.stale_reads());
            let _ = writeln!(out, "served_as_replica {}", counters.served_as_replica());
            let (forwarded, failed) = counters.forwarded();
            let _ = writeln!(out, "forwarded {forwarded} {failed}");
        }
        "request-tags" => {
            for (tag, n) in cluster.request_tags() {
                let _ = writeln!(out, "{tag} {n}");
            }
            let _ = writeln!(out, "deadline_drops {}", cluster.deadline_drops());
        }
        "reset-counters" => cluster.reset_counters(),
        "pd-calls" => {
            for (method, n) in cluster.pd_calls() {
                let _ = writeln!(out, "{method} {n}");
            }
        }
        "lag" => {
            let store = known_store(cluster, words.next())?;
            let ms: u64 = parse_num("milliseconds", words.next())?;
            cluster.store_lag(store, Some(Duration::from_millis(ms)))?;
        }
        "unlag" => cluster.store_lag(known_store(cluster, words.next())?, None)?,
        "labels" => {
            let store = known_store(cluster, words.next())?;
            let mut labels = Vec::new();
            for word in words.by_ref() {
                let Some((key, value)) = word.split_once('=') else {
                    return Err(Error::InvalidArgument(format!(
                        "a label is KEY=VALUE, such as zone=z1, not {word:?}"
                    )));
                };
                labels.push((key, value));
            }
            cluster.set_store_labels(store, &labels)?;
        }
        "resolved-ts-interval" => {
            let ms: u64 = parse_num("milliseconds", words.next())?;
            cluster.set_resolved_ts_interval(Duration::from_millis(ms))?;
        }
        "naive-replica-reads" => match words.next() {
            Some("on") => cluster.naive_replica_reads(true),
            Some("off") => cluster.naive_replica_reads(false),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "naive-replica-reads takes on or off, not {other:?}"
                )))
            }
        },
        "locks" => {
            let start = parse_key(words.next().unwrap_or(""))?;
            let end = parse_key(words.next().unwrap_or(""))?;
            for lock in cluster.locks(&start, &end) {
                out.push_str(&lock_line(&lock));
                out.push('\n');
            }
        }
        "versions" => {
            let key = parse_key(
                words
                    .next()
                    .ok_or_else(|| Error::InvalidArgument("missing key".to_owned()))?,
            )?;
            let mut end = key.clone();
            end.push(0);
            for lock in cluster.locks(&key, &end) {
                out.push_str(&lock_line(&lock));
                out.push('\n');
            }
            for v in cluster.versions(&key) {
                let _ = writeln!(
                    out,
                    "write commit_ts={} start_ts={} kind={}{}",
                    v.commit_ts,
                    v.start_ts,
                    v.kind,
                    v.value
                        .map(|value| format!(" value={}", escape_key(&value)))
                        .unwrap_or_default()
                );
            }
        }
        "advance-clock" => {
            let ms: u64 = parse_num("milliseconds", words.next())?;
            cluster.advance_tso_clock(Duration::from_millis(ms));
        }
        "gc-safe-point" => result = cluster.gc_safe_point().to_string(),
        "pd-leader" => cluster.pd_transfer_leader(parse_num("member index", words.next())?)?,
        "pd-down" => {
            cluster
                .pd_member_down(parse_num("member index", words.next())?)
                .await?
        }
        "pd-up" => {
            cluster
                .pd_member_up(parse_num("member index", words.next())?)
                .await?
        }
        "pd-hang" => cluster.pd_member_hang(parse_num("member index", words.next())?)?,
        "pd-unhang" => cluster.pd_member_unhang(parse_num("member index", words.next())?)?,
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown command {other:?}; try help"
            )))
        }
    }
    if result.is_empty() {
        out.push_str("ok\n");
    } else {
        let _ = writeln!(out, "ok {result}");
    }
    Ok(out)
}

fn known_store(cluster: &SimCluster, text: Option<&str>) -> Result<u64> {
    let store_id: u64 = parse_num("store id", text)?;
    if cluster.store_addr(store_id).is_none() {
        return Err(Error::StoreNotFound { store_id });
    }
    Ok(store_id)
}

/// Serves the control protocol on `listener` until the task is dropped:
/// each connection may send any number of command lines.
pub async fn serve(cluster: Arc<SimCluster>, listener: TcpListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // E.g. out of file descriptors: do not spin.
                tracing::warn!("tikv-sim control port: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut reader = BufReader::new(read);
            loop {
                // Bounded, so a peer that never sends a newline cannot make
                // the sim buffer without limit.
                let mut raw = Vec::new();
                let mut limited = (&mut reader).take(MAX_COMMAND_LINE + 1);
                match limited.read_until(b'\n', &mut raw).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if raw.last() != Some(&b'\n') && raw.len() as u64 > MAX_COMMAND_LINE {
                    let _ = write
                        .write_all(
                            format!(
                                "error: a command line is at most {MAX_COMMAND_LINE} bytes; closing the connection\n"
                            )
                            .as_bytes(),
                        )
                        .await;
                    return;
                }
                let line = String::from_utf8_lossy(&raw);
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let answer = execute(&cluster, line).await;
                if write.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keys_are_even_sorted_printable_and_encoded() {
        assert!(even_split_keys(1).is_empty());
        let plain = even_plain_split_keys(8);
        assert_eq!(plain.len(), 7);
        assert!(plain.windows(2).all(|w| w[0] < w[1]));
        assert!(plain.iter().flatten().all(|b| (0x21..=0x7e).contains(b)));
        assert_eq!(even_plain_split_keys(2), vec![b"P".to_vec()]);
        let encoded = even_split_keys(8);
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for (e, p) in encoded.iter().zip(&plain) {
            assert_eq!(&super::super::codec::decode_bytes(e).unwrap(), p);
        }
        assert_eq!(even_split_keys(2), vec![b"P\0\0\0\0\0\0\0\xf8".to_vec()]);
    }

    #[test]
    fn keys_parse_and_escape() {
        assert_eq!(parse_key("abc").unwrap(), b"abc".to_vec());
        assert_eq!(parse_key("0x00ff").unwrap(), vec![0, 255]);
        assert!(parse_key("0x0").is_err());
        assert!(parse_key("0xaé1").is_err());
        assert!(parse_key("0xzz").is_err());
        assert_eq!(escape_key(b"a\x00\\"), "a\\x00\\x5c");
    }
    #[tokio::test]
    async fn stores_name_a_tiflash_engine_and_labels_keep_it() {
        let cluster = SimCluster::builder()
            .stores(1)
            .tiflash_stores(1)
            .start()
            .await
            .unwrap();
        let stores = run(&cluster, "stores").await.unwrap();
        let lines: Vec<&str> = stores.lines().filter(|l| *l != "ok").collect();
        assert_eq!(lines.len(), 2, "{stores}");
        assert!(!lines[0].contains("engine="), "{stores}");
        assert!(lines[1].starts_with("store 2 "), "{stores}");
        assert!(lines[1].ends_with(" engine=tiflash"), "{stores}");
        assert!(run(&cluster, "labels 2 engine=tikv").await.is_err());
        assert!(run(&cluster, "promote 1000 2").await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn raft_commands_crash_restart_and_report() {
        let cluster = SimCluster::builder()
            .stores(3)
            .split_keys(vec![b"m".to_vec()])
            .start()
            .await
            .unwrap();
        assert_eq!(run(&cluster, "raft-tick 10").await.unwrap(), "ok\n");
        let region = cluster.regions()[0].id;
        let leader = cluster.leader_of(region).unwrap().store_id;
        run(&cluster, &format!("down {leader}")).await.unwrap();
        let electing = run(&cluster, "electing").await.unwrap();
        assert!(electing.contains(&region.to_string()), "{electing}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(run(&cluster, "electing").await.unwrap(), "ok\n");
        let stats = run(&cluster, "raft-stats").await.unwrap();
        assert!(
            stats
                .lines()
                .any(|l| l.starts_with("elections ") && l != "elections 0"),
            "{stats}"
        );
        run(&cluster, &format!("up {leader}")).await.unwrap();

        let store = cluster.leader_of(region).unwrap().store_id;
        let answer = run(&cluster, &format!("restart {store} 50")).await.unwrap();
        let counts: Vec<&str> = answer.trim_end().split(' ').skip(1).collect();
        assert!(
            counts.len() == 2 && counts[0] == counts[1] && counts[0] != "0",
            "{answer}"
        );
        let rolling = run(&cluster, "rolling-restart 10 10").await.unwrap();
        assert_eq!(rolling.lines().count(), 4, "{rolling}");
        assert!(run(&cluster, "disk-full 1 maybe").await.is_err());
        run(&cluster, "disk-full 1 on").await.unwrap();
        run(&cluster, "propose-delay 2 5").await.unwrap();
        let evicted = run(&cluster, "evict-leaders 3").await.unwrap();
        assert!(evicted.starts_with("ok "), "{evicted}");
        run(&cluster, &format!("down-cold {store}")).await.unwrap();
        assert!(cluster.regions_electing().is_empty());
    }
}
