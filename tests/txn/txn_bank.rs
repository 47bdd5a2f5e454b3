//! A bank-transfer workload: concurrent transactions (optimistic,
//! pessimistic, async commit) move money between accounts spread over
//! several Regions while leaders are lost (a store goes down and its
//! Regions' leadership moves without PD knowing), responses are dropped
//! and stores answer busy. Every transfer is atomic, so whatever commits,
//! fails or ends undetermined, the total is preserved. Three seeds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tikv_plan::codec::encode_bytes;
use tikv_plan::{CheckLevel, Config, Error, Result, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

const ACCOUNTS: u64 = 12;
const INITIAL: u64 = 100;
const WORKERS: u64 = 4;
const TRANSFERS_PER_WORKER: u64 = 12;

fn account(i: u64) -> String {
    format!("acct{i:02}")
}

async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(
            ["acct03", "acct06", "acct09"]
                .iter()
                .map(|k| encode_bytes(k.as_bytes()))
                .collect(),
        )
        .start()
        .await
        .unwrap()
}

fn balance(value: Option<Vec<u8>>) -> Result<u64> {
    let bytes = value.ok_or_else(|| Error::InternalError {
        message: "an account vanished".to_owned(),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| Error::InternalError {
        message: e.to_string(),
    })?;
    text.parse().map_err(|e| Error::InternalError {
        message: format!("{e}"),
    })
}

/// One transfer of `amount` from `from` to `to` in its own transaction.
async fn transfer(
    client: &TransactionClient,
    options: TransactionOptions,
    from: u64,
    to: u64,
    amount: u64,
) -> Result<()> {
    let pessimistic = options.is_pessimistic();
    let mut txn = client.begin_with_options(options).await?;
    let result = async {
        let (a, b) = if pessimistic {
            (
                txn.get_for_update(account(from)).await?,
                txn.get_for_update(account(to)).await?,
            )
        } else {
            (txn.get(account(from)).await?, txn.get(account(to)).await?)
        };
        let (a, b) = (balance(a)?, balance(b)?);
        if a < amount {
            return Ok(());
        }
        txn.put(account(from), (a - amount).to_string()).await?;
        txn.put(account(to), (b + amount).to_string()).await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => txn.commit().await.map(|_| ()),
        Err(e) => {
            let _ = txn.rollback().await;
            Err(e)
        }
    }
}

async fn run_seed(seed: u64) {
    let cluster = Arc::new(cluster().await);
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(4));
    let client = TransactionClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    let mut setup = client.begin_optimistic().await.unwrap();
    for i in 0..ACCOUNTS {
        setup.put(account(i), INITIAL.to_string()).await.unwrap();
    }
    setup.commit().await.unwrap();

    let committed = Arc::new(AtomicU64::new(0));
    let undetermined = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let client = client.clone();
        let (committed, undetermined, failed) =
            (committed.clone(), undetermined.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed * 1000 + w);
            for _ in 0..TRANSFERS_PER_WORKER {
                let from = rng.u64(0..ACCOUNTS);
                let to = (from + rng.u64(1..ACCOUNTS)) % ACCOUNTS;
                let options = match rng.u8(0..3) {
                    0 => TransactionOptions::new_optimistic(),
                    1 => TransactionOptions::new_pessimistic(),
                    _ => TransactionOptions::new_optimistic().use_async_commit(),
                }
                .drop_check(CheckLevel::Warn);
                match transfer(&client, options, from, to, rng.u64(1..30)).await {
                    Ok(()) => committed.fetch_add(1, Ordering::Relaxed),
                    Err(e) if e.is_undetermined() => undetermined.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }

    // Chaos, driven by the seed, while the workers run.
    let chaos = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(rng.u64(10..40))).await;
                let store = rng.u64(1..=3);
                match rng.u8(0..3) {
                    0 => {
                        // Leader loss: the store goes down, its Regions'
                        // leadership moves on, PD is not told.
                        cluster.store_down(store).await;
                        for region in cluster.regions() {
                            let led_here = cluster
                                .leader_of(region.id)
                                .is_some_and(|l| l.store_id == store);
                            if led_here {
                                let to = store % 3 + 1;
                                cluster.transfer_leader(region.id, to, false).unwrap();
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(rng.u64(20..60))).await;
                        cluster.store_up(store).await.unwrap();
                    }
                    1 => {
                        for method in ["kv_commit", "kv_prewrite", "kv_pessimistic_lock"] {
                            cluster.drop_next_response(store, method).unwrap();
                        }
                    }
                    _ => {
                        cluster.store_busy(store, Some(0));
                        tokio::time::sleep(Duration::from_millis(rng.u64(10..30))).await;
                        cluster.store_busy(store, None);
                    }
                }
            }
        })
    };
    for w in workers {
        w.await.unwrap();
    }
    chaos.await.unwrap();

    // Everything healed: the total is what it was. The locks an
    // undetermined transaction left are resolved once they expire: move
    // the TSO past their TTL instead of waiting it out.
    for store in cluster.store_ids() {
        cluster.store_busy(store, None);
    }
    cluster.advance_tso_clock(Duration::from_millis(tikv_plan::transaction::MAX_TTL * 2));
    let mut sum = 0;
    let mut snapshot = client.snapshot(
        client.current_timestamp().await.unwrap(),
        TransactionOptions::new_optimistic(),
    );
    for i in 0..ACCOUNTS {
        sum += balance(snapshot.get(account(i)).await.unwrap()).unwrap();
    }
    let (c, u, f) = (
        committed.load(Ordering::Relaxed),
        undetermined.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    eprintln!("seed {seed}: {c} committed, {u} undetermined, {f} failed");
    assert_eq!(
        sum,
        ACCOUNTS * INITIAL,
        "seed {seed}: money was created or lost"
    );
    assert!(c > 0, "seed {seed}: nothing committed");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_transfers_preserve_the_total_under_leader_loss_and_faults() {
    for seed in [1, 2, 3] {
        run_seed(seed).await;
    }
}
