//! Bank transfers with `TransactionClient`, written the way a service should
//! write them: every transfer is applied exactly once, whatever the cluster
//! does.
//!
//! Each transfer has an id. Its transaction reads the two balances and a
//! transfer record (`transfer/<id>`), and writes the new balances and the
//! record together. So the record is in the database exactly when the
//! transfer is, and the transaction itself refuses to run a transfer twice:
//! it first looks for its record.
//!
//! How the retry loop ([`run_transfer`]) treats each error of a transaction
//! ([`classify`]):
//!
//! - **undetermined** (`Error::UndeterminedError` from `commit`, or any error
//!   for which `undetermined_anywhere()` holds): the commit may or may not
//!   have happened. Never commit again blindly: read the transfer record in
//!   a new snapshot. Present: it committed, done. Absent: it did not, and it
//!   cannot any more (the client never re-sends that commit, and a late copy
//!   of it is refused: the read rolled the transaction's lock back or pushed
//!   its `min_commit_ts` past the copy's commit ts), so a new transaction may
//!   run the transfer; it finds no record and writes one;
//! - **conflict** (a write conflict, a lock that could not be resolved in
//!   time, a deadlock, `TxnNotFound`, a commit ts that expired, TiKV's
//!   "retryable" errors; alone or among the errors of several keys or
//!   Regions, as `MultipleKeyErrors` or `ExtractedErrors`): nothing
//!   was committed and the locks were rolled back. Retry at once, with a new
//!   transaction (a new start timestamp) and a little jitter;
//! - **transient** (a Region error the client's own retries could not
//!   resolve, a store or PD that could not be reached, a deadline): nothing
//!   was committed either. Retry with a new transaction after a backoff;
//! - anything else (bad input, a bug): give up and report it.
//!
//! The program runs workers that make transfers concurrently between
//! accounts spread over four Regions of an in-process simulated cluster, in
//! three phases:
//!
//! 1. **leader loss**: the store that leads two of the Regions goes down and
//!    the Regions lose their leader while PD still names it; the client
//!    reaches their voters through fallback;
//! 2. **lost commit answers**: one store leads every Region and loses every
//!    `kv_commit` answer (after applying the commit), so every commit is
//!    undetermined and each worker finds out by reading;
//! 3. **recovered**: leadership moves off that store (PD not told), and the
//!    workers run on.
//!
//! Then it checks the invariant from a fresh snapshot: the total balance is
//! unchanged, every transfer has exactly one record that matches what its
//! worker reported, and replaying the applied records from the initial
//! balances gives exactly the final balances (so no transfer moved money
//! twice, or without a record). It exits non-zero when any of this fails.
//!
//! ```text
//! cargo run --example bank_transfer
//! ```
//!
//! Outside this repository, [`classify`] names gRPC status codes with
//! `tonic::Code`, so add `tonic` (the version tikv-plan uses) to your
//! dependencies; `fastrand` gives the retry jitter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::codec::encode_bytes;
use tikv_plan::{Backoff, CheckLevel, Config, Error, TransactionClient, TransactionOptions};
use tikv_sim::{ColdMode, SimCluster};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ACCOUNTS: u64 = 8;
const INITIAL_BALANCE: u64 = 1_000;
const WORKERS: u64 = 4;
/// Transfers per worker in phases 1 and 3.
const TRANSFERS_PER_WORKER: u64 = 8;
/// Transfers per worker in phase 2 (each commit takes the request deadline
/// to end undetermined).
const LOST_ANSWER_TRANSFERS_PER_WORKER: u64 = 1;
/// Attempts of one transfer (new transactions) before the worker gives up.
const MAX_ATTEMPTS: u32 = 30;

fn account_key(account: u64) -> String {
    format!("account/{account:02}")
}

fn record_key(id: &str) -> String {
    format!("transfer/{id}")
}

/// One transfer request, as the service receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Transfer {
    id: String,
    from: u64,
    to: u64,
    amount: u64,
}

/// What a transfer did. Stored in its record, so a reader learns it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The money moved.
    Applied,
    /// The source account had too little; nothing moved.
    Declined,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Declined => "declined",
        }
    }
}

/// The record's value: `applied 3 5 17` (outcome, from, to, amount).
fn encode_record(t: &Transfer, outcome: Outcome) -> String {
    format!("{} {} {} {}", outcome.name(), t.from, t.to, t.amount)
}

fn decode_record(id: &str, value: &[u8]) -> Result<(Transfer, Outcome), String> {
    let text = std::str::from_utf8(value).map_err(|e| format!("record {id}: {e}"))?;
    let fields: Vec<&str> = text.split(' ').collect();
    let &[outcome, from, to, amount] = fields.as_slice() else {
        return Err(format!("record {id}: malformed value {text:?}"));
    };
    let outcome = match outcome {
        "applied" => Outcome::Applied,
        "declined" => Outcome::Declined,
        other => return Err(format!("record {id}: unknown outcome {other:?}")),
    };
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|e| format!("record {id}: {s:?}: {e}"))
    };
    let transfer = Transfer {
        id: id.to_owned(),
        from: number(from)?,
        to: number(to)?,
        amount: number(amount)?,
    };
    Ok((transfer, outcome))
}

fn decode_balance(account: u64, value: Option<Vec<u8>>) -> Result<u64, String> {
    let value = value.ok_or_else(|| format!("account {account} does not exist"))?;
    std::str::from_utf8(&value)
        .map_err(|e| e.to_string())
        .and_then(|s| s.parse::<u64>().map_err(|e| e.to_string()))
        .map_err(|e| format!("account {account} holds a bad balance: {e}"))
}

/// Why one attempt of a transfer failed.
#[derive(Debug)]
enum AttemptError {
    /// The database said no; [`classify`] tells what to do.
    Db(Error),
    /// The data is not what this program wrote: stop.
    Corrupt(String),
}

impl From<Error> for AttemptError {
    fn from(e: Error) -> Self {
        AttemptError::Db(e)
    }
}

/// What an error means for the transfer that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The commit may have happened: read before doing anything else.
    Undetermined,
    /// Another transaction got in the way; nothing was committed.
    Conflict,
    /// The cluster could not be reached in time; nothing was committed.
    Transient,
    /// Retrying will not help.
    Fatal,
}

fn classify(e: &Error) -> Class {
    // First, always: an error that carries an undetermined piece anywhere
    // (a multi-Region failure, a deadline whose last error was one) must
    // not be read as "nothing happened".
    if e.undetermined_anywhere() {
        Class::Undetermined
    } else if is_conflict(e) {
        Class::Conflict
    } else if is_transient(e) {
        Class::Transient
    } else {
        Class::Fatal
    }
}

fn is_conflict(e: &Error) -> bool {
    match e {
        Error::KeyError(k) => {
            k.conflict.is_some()
                || k.locked.is_some()
                || k.deadlock.is_some()
                || k.commit_ts_expired.is_some()
                || k.txn_not_found.is_some()
                || !k.retryable.is_empty()
        }
        Error::TxnNotFound(_) | Error::ResolveLockError(_) => true,
        Error::PessimisticLockError { inner, .. } => is_conflict(inner),
        // Several Regions or keys failed: a conflict if one of them is, and
        // the others are worth retrying too.
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            errors.iter().any(is_conflict)
                && errors.iter().all(|e| is_conflict(e) || is_transient(e))
        }
        _ => false,
    }
}

fn is_transient(e: &Error) -> bool {
    match e {
        Error::RegionError(_) | Error::LeaderNotFound { .. } => true,
        Error::GrpcAPI(status) => matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::ResourceExhausted
                | tonic::Code::Aborted
        ),
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            !errors.is_empty() && errors.iter().all(is_transient)
        }
        _ => false,
    }
}

/// What the workers saw, for the summary.
#[derive(Debug, Default)]
struct Stats {
    attempts: AtomicU64,
    conflicts: AtomicU64,
    transient: AtomicU64,
    undetermined: AtomicU64,
    undetermined_committed: AtomicU64,
    undetermined_not_committed: AtomicU64,
    found_already_done: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn options() -> TransactionOptions {
    // Every path below commits or rolls back; `Warn` instead of the default
    // `Panic` keeps a future early return from turning into a panic.
    TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn)
}

/// One attempt: one transaction. Returns the outcome and whether this
/// attempt found the transfer already done.
async fn attempt_transfer(
    client: &TransactionClient,
    t: &Transfer,
) -> Result<(Outcome, bool), AttemptError> {
    let mut txn = client.begin_with_options(options()).await?;
    let planned = async {
        let record = record_key(&t.id);
        let (from, to) = (account_key(t.from), account_key(t.to));
        let mut found: BTreeMap<Vec<u8>, Vec<u8>> = txn
            .batch_get(vec![record.clone(), from.clone(), to.clone()])
            .await?
            .map(|pair| (Vec::from(pair.key().clone()), pair.into_value()))
            .collect();
        if let Some(value) = found.remove(record.as_bytes()) {
            let (stored, outcome) = decode_record(&t.id, &value).map_err(AttemptError::Corrupt)?;
            if stored != *t {
                return Err(AttemptError::Corrupt(format!(
                    "transfer id {} was used for {stored:?}",
                    t.id
                )));
            }
            return Ok((outcome, true));
        }
        let balance = |account, key: &String, found: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
            decode_balance(account, found.remove(key.as_bytes())).map_err(AttemptError::Corrupt)
        };
        let from_balance = balance(t.from, &from, &mut found)?;
        let to_balance = balance(t.to, &to, &mut found)?;
        let outcome = if from_balance < t.amount {
            Outcome::Declined
        } else {
            txn.put(from, (from_balance - t.amount).to_string()).await?;
            txn.put(to, (to_balance + t.amount).to_string()).await?;
            Outcome::Applied
        };
        txn.put(record, encode_record(t, outcome)).await?;
        Ok((outcome, false))
    }
    .await;
    match planned {
        Ok((outcome, true)) => {
            // Only read: nothing to commit.
            txn.rollback().await?;
            Ok((outcome, true))
        }
        Ok((outcome, false)) => {
            txn.commit().await?;
            Ok((outcome, false))
        }
        Err(e) => {
            if let Err(rollback) = txn.rollback().await {
                eprintln!("  transfer {}: rollback failed: {rollback}", t.id);
            }
            Err(e)
        }
    }
}

/// After an undetermined commit: the transfer's record, read in a new
/// snapshot at a fresh timestamp (later than any commit ts the transaction
/// used). A lock the transaction left on it is resolved by the read
/// (committed or rolled back), or pushed above the read's timestamp, so the
/// answer is final. The read itself is retried on transient errors.
async fn committed_outcome(
    client: &TransactionClient,
    t: &Transfer,
) -> Result<Option<Outcome>, BoxError> {
    let mut last = None;
    for attempt in 1..=5u32 {
        let read = async {
            let ts = client.current_timestamp().await?;
            client
                .snapshot(ts, options().read_only())
                .get(record_key(&t.id))
                .await
        }
        .await;
        match read {
            Ok(None) => return Ok(None),
            Ok(Some(value)) => {
                let (stored, outcome) = decode_record(&t.id, &value)?;
                if stored != *t {
                    return Err(format!("transfer id {} was used for {stored:?}", t.id).into());
                }
                return Ok(Some(outcome));
            }
            Err(e) if matches!(classify(&e), Class::Transient | Class::Conflict) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!(
        "transfer {}: its commit is undetermined and its record could not be read: {}; \
         a service would park it for reconciliation, never re-run it blindly",
        t.id,
        last.map(|e| e.to_string()).unwrap_or_default()
    )
    .into())
}

/// Runs one transfer to its end: applied or declined, exactly once.
async fn run_transfer(
    client: &TransactionClient,
    t: &Transfer,
    stats: &Stats,
) -> Result<Outcome, BoxError> {
    for attempt in 1..=MAX_ATTEMPTS {
        bump(&stats.attempts);
        let error = match attempt_transfer(client, t).await {
            Ok((outcome, already_done)) => {
                if already_done {
                    bump(&stats.found_already_done);
                }
                return Ok(outcome);
            }
            Err(AttemptError::Corrupt(message)) => return Err(message.into()),
            Err(AttemptError::Db(e)) => e,
        };
        match classify(&error) {
            Class::Undetermined => {
                bump(&stats.undetermined);
                match committed_outcome(client, t).await? {
                    Some(outcome) => {
                        bump(&stats.undetermined_committed);
                        println!(
                            "  transfer {}: commit undetermined; its record says it committed ({})",
                            t.id,
                            outcome.name()
                        );
                        return Ok(outcome);
                    }
                    None => {
                        bump(&stats.undetermined_not_committed);
                        println!(
                            "  transfer {}: commit undetermined; no record, so it did not commit: running it again",
                            t.id
                        );
                    }
                }
            }
            Class::Conflict => {
                bump(&stats.conflicts);
                let jitter = fastrand::u64(0..=5 * u64::from(attempt));
                tokio::time::sleep(Duration::from_millis(jitter)).await;
            }
            Class::Transient => {
                bump(&stats.transient);
                println!("  transfer {}: transient error, retrying: {error}", t.id);
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(10)))).await;
            }
            Class::Fatal => {
                return Err(format!("transfer {}: {error}", t.id).into());
            }
        }
    }
    Err(format!("transfer {}: gave up after {MAX_ATTEMPTS} attempts", t.id).into())
}

/// Runs `per_worker` transfers on each of the workers concurrently. The
/// transfers come from a seeded generator, so every run makes the same ones.
async fn run_phase(
    client: &TransactionClient,
    stats: &Arc<Stats>,
    phase: u32,
    per_worker: u64,
    done: &mut Vec<(Transfer, Outcome)>,
) -> Result<(), BoxError> {
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let client = client.clone();
        let stats = Arc::clone(stats);
        let mut rng = fastrand::Rng::with_seed(u64::from(phase) * 100 + worker);
        let transfers: Vec<Transfer> = (0..per_worker)
            .map(|n| {
                let from = rng.u64(0..ACCOUNTS);
                Transfer {
                    id: format!("p{phase}-w{worker}-{n:02}"),
                    from,
                    to: (from + rng.u64(1..ACCOUNTS)) % ACCOUNTS,
                    amount: rng.u64(1..=400),
                }
            })
            .collect();
        workers.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for t in transfers {
                let outcome = run_transfer(&client, &t, &stats).await?;
                results.push((t, outcome));
            }
            Ok::<_, BoxError>(results)
        }));
    }
    let mut count = 0;
    for worker in workers {
        let results = worker.await??;
        count += results.len();
        done.extend(results);
    }
    let routing = client.routing_stats();
    println!(
        "  {count} transfers done in {:?}; voter fallback so far: {} attempts, {} successes",
        started.elapsed(),
        routing.fallback_attempts,
        routing.fallback_successes
    );
    Ok(())
}

/// The invariant, from a fresh snapshot. Returns the problems found.
async fn check(
    client: &TransactionClient,
    done: &[(Transfer, Outcome)],
) -> Result<Vec<String>, BoxError> {
    let mut problems = Vec::new();
    let ts = client.current_timestamp().await?;
    let mut snapshot = client.snapshot(ts, options().read_only());

    let mut balances = BTreeMap::new();
    for account in 0..ACCOUNTS {
        let value = snapshot.get(account_key(account)).await?;
        balances.insert(account, decode_balance(account, value)?);
    }
    let total: u64 = balances.values().sum();
    println!(
        "  total balance: {total} (expected {})",
        ACCOUNTS * INITIAL_BALANCE
    );
    if total != ACCOUNTS * INITIAL_BALANCE {
        problems.push(format!(
            "the total balance is {total}, not {}",
            ACCOUNTS * INITIAL_BALANCE
        ));
    }

    let limit = u32::try_from(done.len() * 2 + 10)?;
    let mut records = BTreeMap::new();
    for pair in snapshot
        .scan("transfer/".to_owned().."transfer0".to_owned(), limit)
        .await?
    {
        let key = String::from_utf8(Vec::from(pair.key().clone()))?;
        let id = key.trim_start_matches("transfer/").to_owned();
        let (transfer, outcome) = decode_record(&id, pair.value())?;
        records.insert(id, (transfer, outcome));
    }
    println!(
        "  transfer records: {} (transfers made: {})",
        records.len(),
        done.len()
    );
    if records.len() != done.len() {
        problems.push(format!(
            "{} transfer records for {} transfers",
            records.len(),
            done.len()
        ));
    }
    for (t, outcome) in done {
        match records.get(&t.id) {
            None => problems.push(format!("transfer {} has no record", t.id)),
            Some((stored, stored_outcome)) if stored != t || stored_outcome != outcome => {
                problems.push(format!(
                    "transfer {}: the worker saw {t:?} {outcome:?}, the record says {stored:?} {stored_outcome:?}",
                    t.id
                ))
            }
            Some(_) => {}
        }
    }

    // Replaying the applied records must give the balances exactly: a
    // transfer applied twice, or money moved without a record, shows here.
    let mut replayed: BTreeMap<u64, i128> = (0..ACCOUNTS)
        .map(|a| (a, i128::from(INITIAL_BALANCE)))
        .collect();
    for (t, outcome) in records.values() {
        if *outcome == Outcome::Applied {
            *replayed.entry(t.from).or_default() -= i128::from(t.amount);
            *replayed.entry(t.to).or_default() += i128::from(t.amount);
        }
    }
    for (account, balance) in &balances {
        let expected = replayed.get(account).copied().unwrap_or_default();
        if i128::from(*balance) != expected {
            problems.push(format!(
                "account {account} holds {balance}, the applied records say {expected}"
            ));
        }
    }
    Ok(problems)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // Four Regions, split at encoded keys (transactional keys are stored
    // memcomparable-encoded): accounts 00-02, 03-05, 06-07, the records.
    let splits = ["account/03", "account/06", "transfer/"];
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(splits.iter().map(|k| encode_bytes(k.as_bytes())).collect())
        .start()
        .await?;
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(200))
        .with_region_backoff(Backoff::no_jitter_backoff(2, 50, 10))
        .with_request_deadline(Duration::from_secs(1));
    let client = TransactionClient::new_with_config(cluster.pd_endpoints(), config).await?;
    let stats = Arc::new(Stats::default());
    let mut done = Vec::new();

    let mut setup = client.begin_with_options(options()).await?;
    for account in 0..ACCOUNTS {
        setup
            .put(account_key(account), INITIAL_BALANCE.to_string())
            .await?;
    }
    setup.commit().await?;
    println!(
        "{ACCOUNTS} accounts of {INITIAL_BALANCE} over {} Regions; {WORKERS} workers",
        cluster.regions().len()
    );

    // Phase 1: the store leading the first and last Regions goes down, and
    // they lose their leader; PD still names the peers on that store.
    let regions = cluster.regions();
    let first = regions.first().ok_or("no Region")?.id;
    let victim = cluster.leader_of(first).ok_or("no leader")?.store_id;
    let mut cold = Vec::new();
    for region in &regions {
        if cluster.leader_of(region.id).map(|p| p.store_id) == Some(victim) {
            cluster.make_cold(region.id, ColdMode::AcceptAtOnce)?;
            cold.push(region.id);
        }
    }
    cluster.store_down_cold(victim).await?;
    println!("== 1. Store {victim} is down; Regions {cold:?} lost their leader (PD still names store {victim})");
    run_phase(&client, &stats, 1, TRANSFERS_PER_WORKER, &mut done).await?;
    let phase_one_fallbacks = client.routing_stats().fallback_successes;
    cluster.store_up(victim).await?;

    // Phase 2: one store leads every Region, and every commit answer it
    // would send is lost after the commit is applied. The dropped answers
    // are queued generously: they are spent only while it leads.
    let lossy = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != victim)
        .ok_or("no second store")?;
    for region in cluster.regions() {
        cluster.transfer_leader(region.id, lossy, true)?;
    }
    for _ in 0..10_000 {
        cluster.drop_next_response(lossy, "kv_commit")?;
    }
    println!("== 2. Store {lossy} leads every Region and loses every commit answer");
    run_phase(
        &client,
        &stats,
        2,
        LOST_ANSWER_TRANSFERS_PER_WORKER,
        &mut done,
    )
    .await?;

    // Phase 3: leadership moves to another store; PD is not told.
    let healthy = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != lossy)
        .ok_or("no third store")?;
    for region in cluster.regions() {
        cluster.transfer_leader(region.id, healthy, false)?;
    }
    println!("== 3. Store {healthy} leads every Region (PD still names store {lossy})");
    run_phase(&client, &stats, 3, TRANSFERS_PER_WORKER, &mut done).await?;

    println!("== Invariant");
    let problems = check(&client, &done).await?;
    let applied = done.iter().filter(|(_, o)| *o == Outcome::Applied).count();
    let routing = client.routing_stats();
    println!(
        "  {} transfers: {applied} applied, {} declined, in {} transactions",
        done.len(),
        done.len() - applied,
        read(&stats.attempts)
    );
    println!(
        "  retried after a conflict: {}; after a transient error: {}",
        read(&stats.conflicts),
        read(&stats.transient)
    );
    println!(
        "  undetermined commits: {} ({} had committed, {} had not); attempts that found their transfer already done: {}",
        read(&stats.undetermined),
        read(&stats.undetermined_committed),
        read(&stats.undetermined_not_committed),
        read(&stats.found_already_done)
    );
    println!(
        "  voter fallback: {} successes in phase 1 (leader loss), {} in all; {} attempts in all (phase 2's lost answers send each commit to the other voters too)",
        phase_one_fallbacks, routing.fallback_successes, routing.fallback_attempts
    );
    // `commit` returns at the commit point; the other keys are committed
    // in the background. A process that exits should let them finish (if
    // it does not, readers resolve them later, at some cost to them).
    let drained = Instant::now();
    while client.stats().secondary_commits_pending > 0 && drained.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let txn_stats = client.stats();
    println!(
        "  background secondary commits: {} done, {} failed, {} still pending at exit",
        txn_stats.secondary_commits,
        txn_stats.secondary_commit_failures,
        txn_stats.secondary_commits_pending
    );
    cluster.shutdown().await;

    if read(&stats.undetermined) == 0 {
        return Err("expected at least one undetermined commit in phase 2".into());
    }
    if phase_one_fallbacks == 0 {
        return Err("expected voter fallback in phase 1".into());
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("BROKEN: {p}");
        }
        return Err(format!("the invariant is broken ({} problems)", problems.len()).into());
    }
    println!("OK: the total is unchanged and every transfer was applied exactly once");
    Ok(())
}
