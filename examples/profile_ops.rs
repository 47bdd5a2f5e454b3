//! A fixed number of operations, one at a time, through `RawClient` or a
//! bare tonic client, against an in-process simulated cluster: a workload
//! for instruction-level profilers, whose counts (unlike wall time) repeat
//! from run to run. The per-operation cost is the difference between two
//! runs of different lengths, which cancels the setup:
//!
//! ```text
//! cargo build --release --example profile_ops
//! valgrind --tool=callgrind target/release/examples/profile_ops get 1000
//! valgrind --tool=callgrind target/release/examples/profile_ops get 3000
//! ```
//!
//! (instructions of the second run minus the first, over 2000). An
//! optional third argument, TASKS, splits the operations over that many
//! concurrent tasks on the one thread (`get 3000 64`), so the count covers
//! what concurrency adds: the batched stream's queue, wake-ups, futures
//! that wait side by side. Modes:
//! `get` and `put` through `RawClient`, `bare-get` through `TikvClient`
//! aimed at the Region's leader by hand, `batch-get` of 100 keys over 8
//! Regions through `RawClient`. Both the client and the simulated
//! stores run in this process, so the counts include the server's work,
//! which is the same for every mode.

use std::process::ExitCode;

use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tikv_plan::RawClient;
use tikv_sim::SimCluster;

const USAGE: &str = "usage: profile_ops get|put|bare-get|batch-get COUNT [TASKS]";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(count)) = (args.next(), args.next()) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let Ok(count) = count.parse::<usize>() else {
        eprintln!("COUNT must be a number\n{USAGE}");
        return ExitCode::from(2);
    };
    let tasks = match args.next().map(|t| t.parse::<usize>()) {
        None => 1,
        Some(Ok(tasks)) if tasks > 0 => tasks,
        Some(_) => {
            eprintln!("TASKS must be a positive number\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if !["get", "put", "bare-get", "batch-get"].contains(&mode.as_str()) {
        eprintln!("unknown mode {mode:?}\n{USAGE}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(mode, count, tasks)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("profile_ops: {e}");
            ExitCode::FAILURE
        }
    }
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

async fn run(mode: String, count: usize, tasks: usize) -> Result<(), Failure> {
    // For `batch-get`, eight Regions split at "k1".."k7", the batch's keys
    // spread over all; one Region otherwise.
    let splits = if mode == "batch-get" {
        (1..8).map(|i| format!("k{i}").into_bytes()).collect()
    } else {
        Vec::new()
    };
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(splits)
        .start()
        .await?;
    let key = b"profile-key".to_vec();
    let client = RawClient::new(cluster.pd_endpoints()).await?;
    client.put(key.clone(), b"value".to_vec()).await?;
    let batch: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("k{}-{i:03}", i % 8).into_bytes())
        .collect();
    if mode == "batch-get" {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            batch.iter().map(|k| (k.clone(), vec![7; 100])).collect();
        client.batch_put(pairs).await?;
    }
    let region = cluster
        .region_for_key(&key)
        .ok_or("no Region for the key")?;
    let leader = cluster
        .leader_of(region.id)
        .ok_or("the Region has no leader")?;
    let address = cluster
        .store_addr(leader.store_id)
        .ok_or("the leader's store has no address")?;
    let bare = TikvClient::connect(format!("http://{address}")).await?;
    let context = kvrpcpb::Context {
        region_id: region.id,
        region_epoch: region.region_epoch,
        peer: Some(leader),
        ..Default::default()
    };
    // Each task runs its share of the operations one after another; the
    // tasks run side by side on the runtime's one thread.
    let work = std::sync::Arc::new(Work {
        mode,
        client,
        bare,
        context,
        key,
        batch,
    });
    let mut running = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let share = count / tasks + usize::from(task < count % tasks);
        let work = std::sync::Arc::clone(&work);
        running.push(tokio::spawn(async move {
            for _ in 0..share {
                work.once().await?;
            }
            Ok::<(), Failure>(())
        }));
    }
    for task in running {
        task.await??;
    }
    Ok(())
}

/// What every task shares: the clients and the keys.
struct Work {
    mode: String,
    client: RawClient,
    bare: TikvClient<tonic::transport::Channel>,
    context: kvrpcpb::Context,
    key: Vec<u8>,
    batch: Vec<Vec<u8>>,
}

impl Work {
    /// One operation of the mode.
    async fn once(&self) -> Result<(), Failure> {
        let Work {
            mode,
            client,
            bare,
            context,
            key,
            batch,
        } = self;
        match mode.as_str() {
            "get" => {
                client.get(key.clone()).await?.ok_or("the key is gone")?;
            }
            "put" => client.put(key.clone(), b"value".to_vec()).await?,
            "batch-get" => {
                let pairs = client.batch_get(batch.clone()).await?;
                if pairs.len() != batch.len() {
                    return Err(format!("{} of {} keys read", pairs.len(), batch.len()).into());
                }
            }
            _ => {
                let response = bare
                    .clone()
                    .raw_get(kvrpcpb::RawGetRequest {
                        context: Some(context.clone()),
                        key: key.clone(),
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                if let Some(error) = response.region_error {
                    return Err(format!("region error: {error:?}").into());
                }
            }
        }
        Ok(())
    }
}
