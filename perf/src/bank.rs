//! Application processes killed mid-transaction (`--only killed-bank`):
//! a bank of 8 accounts, one per Region, with a known total. Three worker
//! processes move money between two accounts at a time in a mix of
//! optimistic, pessimistic, async-commit and 1PC transactions; every
//! 0.5–2 s (seeded) one of them, drawn at random, is killed with SIGKILL
//! mid-whatever and started again. A fourth process audits: it reads all 8
//! accounts in a snapshot at a fresh timestamp, over and over, and checks
//! the total. tikv-plan and tikv-client 0.4.0 run the same program against
//! a fresh sim each (same settings), one after the other.
//!
//! The workers are this program itself (`tikv-plan-perf bank-worker ...`):
//! each prints one line per finished transaction or audit on stdout, which
//! the parent reads and counts. A line a killed worker never printed is not
//! counted; the audits and the final check see every commit regardless.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::clients::Kind;
use crate::sim::{Control, Sim};

/// Accounts, one per Region of the sim.
pub const ACCOUNTS: usize = 8;
/// Each account's opening balance.
pub const OPENING: i64 = 1_000;
/// Transfer workers (the auditor is a fourth process).
pub const WORKERS: usize = 3;

/// The transaction kinds the workers mix, drawn per transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Optimistic,
    Pessimistic,
    AsyncCommit,
    OnePc,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::Optimistic,
        Mode::Pessimistic,
        Mode::AsyncCommit,
        Mode::OnePc,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Optimistic => "optimistic",
            Mode::Pessimistic => "pessimistic",
            Mode::AsyncCommit => "async-commit",
            Mode::OnePc => "1pc",
        }
    }

    fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

// ---------------------------------------------------------------------------
// The worker processes.

/// What a worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Transfer,
    Audit,
}

/// A worker's arguments: `bank-worker --client plan|upstream --pd ADDR
/// --role transfer|audit --seed N --accounts HEX,HEX,...`.
struct WorkerArgs {
    upstream: bool,
    pd: String,
    role: Role,
    seed: u64,
    accounts: Vec<Vec<u8>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse_worker_args(args: impl Iterator<Item = String>) -> Result<WorkerArgs, String> {
    let (mut upstream, mut pd, mut role, mut seed, mut accounts) = (None, None, None, 0, None);
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--client" => upstream = Some(value == "upstream"),
            "--pd" => pd = Some(value),
            "--role" => {
                role = Some(match value.as_str() {
                    "transfer" => Role::Transfer,
                    "audit" => Role::Audit,
                    _ => return Err(format!("unknown role {value}")),
                })
            }
            "--seed" => seed = value.parse().map_err(|_| "--seed takes a number")?,
            "--accounts" => {
                accounts = Some(
                    value
                        .split(',')
                        .map(|k| unhex(k).ok_or_else(|| format!("bad account key {k}")))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(WorkerArgs {
        upstream: upstream.ok_or("--client is required")?,
        pd: pd.ok_or("--pd is required")?,
        role: role.ok_or("--role is required")?,
        seed,
        accounts: accounts.ok_or("--accounts is required")?,
    })
}

/// One line to the parent, flushed at once (the process may die any time).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// An error as one line, without the parent's field separators.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

fn balance(value: Option<Vec<u8>>) -> i64 {
    value
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The transfer loop and the audit loop, written once for both crates,
/// whose transactional APIs match.
macro_rules! bank_worker {
    ($transfers:ident, $audits:ident, $krate:ident) => {
        async fn $transfers(client: $krate::TransactionClient, accounts: Vec<Vec<u8>>, seed: u64) {
            let mut rng = fastrand::Rng::with_seed(seed);
            loop {
                let mode = Mode::ALL[rng.usize(..Mode::ALL.len())];
                let from = rng.usize(..accounts.len());
                let mut to = rng.usize(..accounts.len() - 1);
                if to >= from {
                    to += 1;
                }
                let amount = rng.i64(1..=10);
                let options = match mode {
                    Mode::Optimistic => $krate::TransactionOptions::new_optimistic(),
                    Mode::Pessimistic => $krate::TransactionOptions::new_pessimistic(),
                    Mode::AsyncCommit => {
                        $krate::TransactionOptions::new_optimistic().use_async_commit()
                    }
                    Mode::OnePc => $krate::TransactionOptions::new_optimistic().try_one_pc(),
                }
                .drop_check($krate::CheckLevel::Warn);
                let begun = Instant::now();
                let mut txn = match client.begin_with_options(options).await {
                    Ok(txn) => txn,
                    Err(e) => {
                        let us = begun.elapsed().as_micros();
                        say(&format!(
                            "T {} fail {us} {}",
                            mode.name(),
                            one_line(&e.to_string())
                        ));
                        continue;
                    }
                };
                let (from_key, to_key) = (accounts[from].clone(), accounts[to].clone());
                let body = async {
                    let (a, b) = if mode == Mode::Pessimistic {
                        (
                            txn.get_for_update(from_key.clone()).await?,
                            txn.get_for_update(to_key.clone()).await?,
                        )
                    } else {
                        (
                            txn.get(from_key.clone()).await?,
                            txn.get(to_key.clone()).await?,
                        )
                    };
                    txn.put(from_key, (balance(a) - amount).to_string().into_bytes())
                        .await?;
                    txn.put(to_key, (balance(b) + amount).to_string().into_bytes())
                        .await?;
                    txn.commit().await?;
                    Ok::<_, $krate::Error>(())
                }
                .await;
                let us = begun.elapsed().as_micros();
                match body {
                    Ok(()) => say(&format!("T {} ok {us}", mode.name())),
                    Err(e) => {
                        let _ = txn.rollback().await;
                        say(&format!(
                            "T {} fail {us} {}",
                            mode.name(),
                            one_line(&e.to_string())
                        ));
                    }
                }
            }
        }

        async fn $audits(client: $krate::TransactionClient, accounts: Vec<Vec<u8>>) {
            loop {
                let begun = Instant::now();
                let read = async {
                    let ts = client.current_timestamp().await?;
                    let mut snapshot =
                        client.snapshot(ts, $krate::TransactionOptions::new_optimistic());
                    let pairs: Vec<_> = snapshot.batch_get(accounts.clone()).await?.collect();
                    let total: i64 = pairs.iter().map(|p| balance(Some(p.value().clone()))).sum();
                    Ok::<_, $krate::Error>((pairs.len(), total))
                }
                .await;
                let us = begun.elapsed().as_micros();
                match read {
                    Ok((found, total)) if found == accounts.len() && total == expected_total() => {
                        say(&format!("A ok {us} {total}"))
                    }
                    Ok((found, total)) => say(&format!("A bad {us} {total} ({found} accounts)")),
                    Err(e) => say(&format!("A fail {us} {}", one_line(&e.to_string()))),
                }
            }
        }
    };
}

bank_worker!(plan_transfers, plan_audits, tikv_plan);
bank_worker!(upstream_transfers, upstream_audits, tikv_client);

fn expected_total() -> i64 {
    OPENING * ACCOUNTS as i64
}

/// With `BANK_TRACE=DIR`, each tikv-plan worker writes the library's
/// debug events to `DIR/PID.log`, one line each, stamped with the Unix
/// time in ms (to line the processes up): where a transaction's time went.
struct Trace {
    out: std::sync::Mutex<std::fs::File>,
}

struct Fields(String);

impl tracing_core::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing_core::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing_core::Subscriber for Trace {
    fn enabled(&self, metadata: &tracing_core::Metadata<'_>) -> bool {
        *metadata.level() <= tracing_core::Level::DEBUG
            && metadata.target().starts_with("tikv_plan")
    }
    fn new_span(&self, _: &tracing_core::span::Attributes<'_>) -> tracing_core::span::Id {
        tracing_core::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing_core::span::Id, _: &tracing_core::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing_core::span::Id, _: &tracing_core::span::Id) {}
    fn event(&self, event: &tracing_core::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(
                out,
                "{:.3} {} {}{}",
                now.as_secs_f64() * 1e3,
                event.metadata().level(),
                event.metadata().target(),
                format_args!(" {}", fields.0)
            );
        }
    }
    fn enter(&self, _: &tracing_core::span::Id) {}
    fn exit(&self, _: &tracing_core::span::Id) {}
}

fn trace_to(dir: &str) {
    let path = Path::new(dir).join(format!("{}.log", std::process::id()));
    if let Ok(file) = std::fs::File::create(path) {
        let trace = Trace {
            out: std::sync::Mutex::new(file),
        };
        let _ = tracing_core::dispatcher::set_global_default(tracing_core::Dispatch::new(trace));
    }
}

/// `tikv-plan-perf bank-worker ...`: runs until killed.
pub fn worker_main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = match parse_worker_args(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("bank-worker: {e}");
            return ExitCode::from(2);
        }
    };
    if let Ok(dir) = std::env::var("BANK_TRACE") {
        trace_to(&dir);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bank-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), String> = runtime.block_on(async move {
        let pd = vec![args.pd.clone()];
        if args.upstream {
            let client = tikv_client::TransactionClient::new(pd)
                .await
                .map_err(|e| e.to_string())?;
            match args.role {
                Role::Transfer => upstream_transfers(client, args.accounts, args.seed).await,
                Role::Audit => upstream_audits(client, args.accounts).await,
            }
        } else {
            let client = tikv_plan::TransactionClient::new(pd)
                .await
                .map_err(|e| e.to_string())?;
            match args.role {
                Role::Transfer => plan_transfers(client, args.accounts, args.seed).await,
                Role::Audit => plan_audits(client, args.accounts).await,
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("bank-worker: {e}");
        say(&format!("X {}", one_line(&e)));
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------------------
// The parent: starts, kills and restarts the workers, counts their lines.

/// One finished thing, as the parent saw it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Since the run's start, when the line arrived.
    pub at: Duration,
    /// Worker 0..3, or 3 for the auditor.
    pub process: usize,
    pub what: What,
    /// How long the transaction or audit took.
    pub latency: Duration,
    /// Why it failed, or the wrong total.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    Committed(Mode),
    TransferFailed(Mode),
    Audited,
    AuditFailed,
    BadAudit,
    /// The parent killed this worker (no latency).
    Killed,
    /// A worker could not even start (connect).
    WorkerError,
}

fn parse_line(line: &str) -> Option<(What, Duration, String)> {
    let mut words = line.splitn(5, ' ');
    let us = |w: Option<&str>| {
        w.and_then(|w| w.parse::<u64>().ok())
            .map(Duration::from_micros)
    };
    match words.next()? {
        "T" => {
            let mode = Mode::parse(words.next()?)?;
            let outcome = words.next()?;
            let latency = us(words.next())?;
            let rest = words.next().unwrap_or("").to_owned();
            let what = match outcome {
                "ok" => What::Committed(mode),
                _ => What::TransferFailed(mode),
            };
            Some((what, latency, rest))
        }
        "A" => {
            let outcome = words.next()?;
            let latency = us(words.next())?;
            let rest: Vec<&str> = words.collect();
            let rest = rest.join(" ");
            let what = match outcome {
                "ok" => What::Audited,
                "bad" => What::BadAudit,
                _ => What::AuditFailed,
            };
            Some((what, latency, rest))
        }
        "X" => Some((
            What::WorkerError,
            Duration::ZERO,
            line.get(2..).unwrap_or("").to_owned(),
        )),
        _ => None,
    }
}

/// A run of one client.
#[derive(Debug, Clone)]
pub struct BankRun {
    pub kind: Kind,
    pub events: Vec<Event>,
    /// The total a snapshot read after the run (workers all killed) found,
    /// or why it could not be read.
    pub final_total: Result<i64, String>,
}

impl BankRun {
    fn count(&self, f: impl Fn(&What) -> bool) -> usize {
        self.events.iter().filter(|e| f(&e.what)).count()
    }

    pub fn committed(&self) -> usize {
        self.count(|w| matches!(w, What::Committed(_)))
    }

    pub fn audits(&self) -> usize {
        self.count(|w| *w == What::Audited || *w == What::BadAudit)
    }

    pub fn bad_audits(&self) -> usize {
        self.count(|w| *w == What::BadAudit)
    }

    /// The most frequent reasons for `what`, digits masked, with counts.
    fn reasons(&self, what: impl Fn(&What) -> bool, top: usize) -> Vec<(String, usize)> {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for e in self.events.iter().filter(|e| what(&e.what)) {
            let masked: String = e
                .detail
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect();
            let mut short: String = masked.chars().take(140).collect();
            // Runs of masked digits read as one.
            while short.contains("##") {
                short = short.replace("##", "#");
            }
            *by.entry(short).or_default() += 1;
        }
        let mut sorted: Vec<(String, usize)> = by.into_iter().collect();
        sorted.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        sorted.truncate(top);
        sorted
    }
}

/// What a run does and how long.
#[derive(Debug, Clone)]
pub struct BankPlan {
    pub duration: Duration,
    pub seed: u64,
}

/// The account keys: one per Region, each inside its Region.
async fn accounts(control: &mut Control) -> Result<Vec<Vec<u8>>, String> {
    let regions = control.regions().await?;
    let mut keys = Vec::new();
    for region in regions.iter().take(ACCOUNTS) {
        let mut key = region.key_prefix()?;
        key.extend_from_slice(b"account");
        if !region.contains(&key) {
            return Err(format!("account key falls outside Region {}", region.id));
        }
        keys.push(key);
    }
    if keys.len() < ACCOUNTS {
        return Err(format!(
            "the sim has {} Regions, not {ACCOUNTS}",
            keys.len()
        ));
    }
    Ok(keys)
}

struct Worker {
    child: Child,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts one worker process whose lines go to `events` tagged `process`.
fn spawn(
    kind: Kind,
    pd: &str,
    role: Role,
    seed: u64,
    accounts: &[Vec<u8>],
    process: usize,
    events: mpsc::Sender<(usize, Instant, String)>,
) -> Result<Worker, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let client = if kind == Kind::Upstream {
        "upstream"
    } else {
        "plan"
    };
    let keys: Vec<String> = accounts.iter().map(|k| hex(k)).collect();
    let mut command = Command::new(exe);
    command
        .arg("bank-worker")
        .args(["--client", client, "--pd", pd])
        .args([
            "--role",
            match role {
                Role::Transfer => "transfer",
                Role::Audit => "audit",
            },
        ])
        .args(["--seed", &seed.to_string(), "--accounts", &keys.join(",")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if kind == Kind::PlanUnary {
        command.env("TIKV_PLAN_RPC_MODE", "unary");
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start a bank worker: {e}"))?;
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if events.send((process, Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
    }
    Ok(Worker { child })
}

/// One client's run on a fresh sim.
async fn run_one(sim_binary: &Path, kind: Kind, plan: &BankPlan) -> Result<BankRun, String> {
    let sim = Sim::start(sim_binary, ACCOUNTS)?;
    let mut control = Control::connect(&sim.control).await?;
    let keys = accounts(&mut control).await?;
    let loader = tikv_plan::TransactionClient::new(vec![sim.pd.clone()])
        .await
        .map_err(|e| format!("cannot connect the loader: {e}"))?;
    let mut txn = loader.begin_optimistic().await.map_err(|e| e.to_string())?;
    for key in &keys {
        txn.put(key.clone(), OPENING.to_string().into_bytes())
            .await
            .map_err(|e| e.to_string())?;
    }
    txn.commit().await.map_err(|e| e.to_string())?;

    let (tx, rx) = mpsc::channel();
    let mut rng = fastrand::Rng::with_seed(plan.seed);
    let mut workers = Vec::new();
    for process in 0..WORKERS {
        let seed = plan.seed * 1_000_000 + process as u64 * 1000;
        workers.push(spawn(
            kind,
            &sim.pd,
            Role::Transfer,
            seed,
            &keys,
            process,
            tx.clone(),
        )?);
    }
    let auditor = spawn(kind, &sim.pd, Role::Audit, 0, &keys, WORKERS, tx.clone())?;
    let started = Instant::now();
    let stop_at = started + plan.duration;
    let mut kills = Vec::new();
    let mut restarts = [0u64; WORKERS];
    loop {
        let pause = Duration::from_millis(rng.u64(500..=2000));
        let next = Instant::now() + pause;
        if next >= stop_at {
            tokio::time::sleep(stop_at.saturating_duration_since(Instant::now())).await;
            break;
        }
        tokio::time::sleep(pause).await;
        let victim = rng.usize(..WORKERS);
        let killed_at = Instant::now();
        // SIGKILL: no rollback, no heartbeat stop, no goodbye.
        let _ = workers[victim].child.kill();
        let _ = workers[victim].child.wait();
        restarts[victim] += 1;
        let seed = plan.seed * 1_000_000 + victim as u64 * 1000 + restarts[victim];
        workers[victim] = spawn(
            kind,
            &sim.pd,
            Role::Transfer,
            seed,
            &keys,
            victim,
            tx.clone(),
        )?;
        kills.push((victim, killed_at));
    }
    drop(workers);
    drop(auditor);
    drop(tx);
    let mut events = Vec::new();
    for (process, at, line) in rx.try_iter() {
        if at > stop_at {
            continue;
        }
        if let Some((what, latency, detail)) = parse_line(&line) {
            events.push(Event {
                at: at.saturating_duration_since(started),
                process,
                what,
                latency,
                detail,
            });
        }
    }
    for (process, at) in kills {
        events.push(Event {
            at: at.saturating_duration_since(started),
            process,
            what: What::Killed,
            latency: Duration::ZERO,
            detail: String::new(),
        });
    }
    events.sort_by_key(|e| e.at);
    // The books after the run, read by tikv-plan for both (it waits out the
    // dead processes' locks by their TTL).
    let final_total = async {
        let ts = loader.current_timestamp().await?;
        let mut snapshot = loader.snapshot(ts, tikv_plan::TransactionOptions::new_optimistic());
        let pairs: Vec<_> = snapshot.batch_get(keys.clone()).await?.collect();
        Ok::<_, tikv_plan::Error>(pairs.iter().map(|p| balance(Some(p.value().clone()))).sum())
    }
    .await
    .map_err(|e| e.to_string());
    Ok(BankRun {
        kind,
        events,
        final_total,
    })
}

/// Runs the bank for each client and prints the table; with a CSV
/// directory, writes `killed-bank.csv` (every event).
pub async fn run(
    sim_binary: &Path,
    kinds: &[Kind],
    plan: &BankPlan,
    csv_dir: Option<&Path>,
    info: &str,
) -> Result<(), String> {
    let routed: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(k, Kind::PlanBatched | Kind::PlanUnary | Kind::Upstream))
        .collect();
    let mut runs = Vec::new();
    for &kind in &routed {
        eprintln!(
            "killed bank: {} for {:.0} s",
            kind.label(),
            plan.duration.as_secs_f64()
        );
        let run = run_one(sim_binary, kind, plan).await?;
        eprintln!(
            "  {} transfers, {} audits, {} bad",
            run.committed(),
            run.audits(),
            run.bad_audits()
        );
        runs.push(run);
    }
    println!("{}", table(&runs, plan));
    if let Some(dir) = csv_dir {
        crate::csv::write_family(dir, "killed-bank", &csv(&runs), info)?;
    }
    Ok(())
}

fn table(runs: &[BankRun], plan: &BankPlan) -> String {
    let mut out = format!(
        "### Killed mid-transaction: {WORKERS} workers, one SIGKILLed every 0.5–2 s (seed {}), an auditor, {:.0} s\n\n\
| client | transfers committed | committed: optimistic · pessimistic · async commit · 1PC | transfers failed | audits completed | audits failed | bad audits | kills | total after the run |\n\
|---|---|---|---|---|---|---|---|---|\n",
        plan.seed,
        plan.duration.as_secs_f64()
    );
    for run in runs {
        let by_mode: Vec<String> = Mode::ALL
            .iter()
            .map(|m| run.count(|w| *w == What::Committed(*m)).to_string())
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            run.kind.label(),
            run.committed(),
            by_mode.join(" · "),
            run.count(|w| matches!(w, What::TransferFailed(_))),
            run.audits(),
            run.count(|w| *w == What::AuditFailed),
            run.bad_audits(),
            run.count(|w| *w == What::Killed),
            match &run.final_total {
                Ok(t) if *t == expected_total() => format!("{t} (right)"),
                Ok(t) => format!("**{t} (wrong: {} expected)**", expected_total()),
                Err(e) => format!("unread: {}", e.replace('|', "/")),
            }
        ));
    }
    out.push('\n');
    for run in runs {
        for (label, what) in [
            (
                "transfers failed",
                (|w: &What| matches!(w, What::TransferFailed(_))) as fn(&What) -> bool,
            ),
            ("audits failed", |w: &What| *w == What::AuditFailed),
            ("bad audits", |w: &What| *w == What::BadAudit),
            ("workers that could not start", |w: &What| {
                *w == What::WorkerError
            }),
        ] {
            let reasons = run.reasons(what, 4);
            if reasons.is_empty() {
                continue;
            }
            out.push_str(&format!("{} — {label}:\n", run.kind.label()));
            for (reason, n) in reasons {
                out.push_str(&format!("- {n} × {reason}\n"));
            }
        }
    }
    out
}

/// The CSV text: one line per transfer and kill; audits, many thousands
/// when they fail fast, one line per client, second and outcome (`count`
/// of them, `latency_ms` the longest, `detail` the first).
fn csv(runs: &[BankRun]) -> String {
    let mut out = String::from("client,process,at_ms,event,mode,latency_ms,count,detail\n");
    let mut line = |client: &str,
                    process: usize,
                    at_ms: f64,
                    event: &str,
                    mode: &str,
                    latency_ms: f64,
                    count: usize,
                    detail: &str| {
        let detail: String = detail.chars().take(DETAIL_CHARS).collect();
        out.push_str(&format!(
            "{},{process},{at_ms:.3},{event},{mode},{latency_ms:.3},{count},{}\n",
            crate::csv::field(client),
            crate::csv::field(&detail),
        ));
    };
    for run in runs {
        let client = run.kind.label();
        // (second, event) -> (count, longest ms, first detail)
        let mut audits: BTreeMap<(u64, &str), (usize, f64, String)> = BTreeMap::new();
        for e in &run.events {
            let ms = e.latency.as_secs_f64() * 1e3;
            let (event, mode) = match &e.what {
                What::Committed(m) => ("committed", m.name()),
                What::TransferFailed(m) => ("transfer_failed", m.name()),
                What::Killed => ("killed", ""),
                What::WorkerError => ("worker_error", ""),
                audit => {
                    let event = match audit {
                        What::Audited => "audited",
                        What::BadAudit => "bad_audit",
                        _ => "audit_failed",
                    };
                    let slot =
                        audits
                            .entry((e.at.as_secs(), event))
                            .or_insert((0, 0.0, e.detail.clone()));
                    slot.0 += 1;
                    slot.1 = slot.1.max(ms);
                    continue;
                }
            };
            line(
                client,
                e.process,
                e.at.as_secs_f64() * 1e3,
                event,
                mode,
                ms,
                1,
                &e.detail,
            );
        }
        for ((second, event), (count, longest, detail)) in audits {
            line(
                client,
                WORKERS,
                second as f64 * 1e3,
                event,
                "",
                longest,
                count,
                &detail,
            );
        }
    }
    out
}

/// How much of an error the CSV keeps.
const DETAIL_CHARS: usize = 240;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_lines_parse() {
        let (what, latency, _) = parse_line("T 1pc ok 1500").unwrap();
        assert_eq!(what, What::Committed(Mode::OnePc));
        assert_eq!(latency, Duration::from_micros(1500));
        let (what, _, detail) = parse_line("T pessimistic fail 20 key is locked here").unwrap();
        assert_eq!(what, What::TransferFailed(Mode::Pessimistic));
        assert_eq!(detail, "key is locked here");
        let (what, _, detail) = parse_line("A bad 7 7990 (8 accounts)").unwrap();
        assert_eq!(what, What::BadAudit);
        assert_eq!(detail, "7990 (8 accounts)");
        assert!(parse_line("garbage").is_none());
        assert_eq!(unhex(&hex(b"a\x00\xff")), Some(b"a\x00\xff".to_vec()));
    }
}
