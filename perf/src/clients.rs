//! The clients compared, behind one enum, and the operations they run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tonic::transport::Channel;

use crate::sim::{Control, RegionLine};
use crate::workload::{Request, VALUE_LEN};

/// Which client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// tikv-plan's clients with their default transport, `RpcMode::Batched`.
    PlanBatched,
    /// tikv-plan's clients with `RpcMode::Unary`.
    PlanUnary,
    /// tikv-plan's clients with `RpcMode::Unary`, each call through tonic's
    /// generated client and codec instead of the hand-framed typed path.
    /// Not in the default set: `--clients unary,unary-tonic,bare`.
    PlanUnaryTonic,
    /// A tonic `TikvClient` straight at the Region leader, context by hand.
    Bare,
    /// The floor of the batched protocol: one bare `BatchCommands` stream
    /// per store, context by hand (see [`crate::floor`]).
    Floor,
    /// `tikv_client::RawClient` 0.4.0 from crates.io.
    Upstream,
}

impl Kind {
    /// The clients a run compares unless `--clients` names others, in
    /// table order (`unary-tonic` only when named).
    pub fn all() -> Vec<Kind> {
        vec![
            Kind::PlanBatched,
            Kind::PlanUnary,
            Kind::Floor,
            Kind::Bare,
            Kind::Upstream,
        ]
    }

    /// The client `--clients` names `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "plan" | "batched" => Some(Kind::PlanBatched),
            "unary" => Some(Kind::PlanUnary),
            "unary-tonic" => Some(Kind::PlanUnaryTonic),
            "bare" => Some(Kind::Bare),
            "floor" => Some(Kind::Floor),
            "upstream" => Some(Kind::Upstream),
            _ => None,
        }
    }

    /// True for the hand-routed clients (the bare call and the floor): no
    /// PD, no routing, no transactions.
    pub fn is_hand_routed(self) -> bool {
        matches!(self, Kind::Bare | Kind::Floor)
    }

    /// The name shown in tables.
    pub fn label(self) -> &'static str {
        match self {
            Kind::PlanBatched => "tikv-plan batched",
            Kind::PlanUnary => "tikv-plan unary",
            Kind::PlanUnaryTonic => "tikv-plan unary, tonic codec",
            Kind::Bare => "bare tonic",
            Kind::Floor => "BatchCommands floor",
            Kind::Upstream => "tikv-client 0.4.0",
        }
    }
}

/// A connected client.
#[derive(Clone)]
pub enum Client {
    /// tikv-plan, either RPC mode.
    Plan(Arc<Pair<tikv_plan::RawClient, tikv_plan::TransactionClient>>),
    /// The bare call: no PD, no cache, no retries.
    Bare(Arc<Bare>),
    /// The floor: bare BatchCommands streams.
    Floor(Arc<crate::floor::Floor>),
    /// tikv-client 0.4.0.
    Upstream(Arc<Pair<tikv_client::RawClient, tikv_client::TransactionClient>>),
}

/// A raw and a transactional client of one kind.
pub struct Pair<R, T> {
    raw: R,
    txn: T,
}

/// One leader route per Region of the benchmark's layout, filled by hand
/// from the sim's control port.
pub struct Bare {
    routes: Vec<(TikvClient<Channel>, kvrpcpb::Context)>,
}

impl Client {
    /// Connects a client of `kind` to the sim. The bare call needs the
    /// layout's Regions (by index) and the control port for the leaders.
    pub async fn connect(
        kind: Kind,
        pd: &str,
        control: &mut Control,
        layout_regions: &[RegionLine],
    ) -> Result<Client, String> {
        match kind {
            Kind::PlanBatched => plan(pd, tikv_plan::RpcMode::Batched).await,
            Kind::PlanUnary => plan(pd, tikv_plan::RpcMode::Unary).await,
            Kind::PlanUnaryTonic => {
                // Read when the clients build their connectors, here.
                tikv_plan::__internals::set_typed_path(false);
                let client = plan(pd, tikv_plan::RpcMode::Unary).await;
                tikv_plan::__internals::set_typed_path(true);
                client
            }
            Kind::Upstream => {
                let fail = |e: tikv_client::Error| format!("tikv-client cannot connect: {e}");
                let raw = tikv_client::RawClient::new(vec![pd.to_owned()])
                    .await
                    .map_err(fail)?;
                let txn = tikv_client::TransactionClient::new(vec![pd.to_owned()])
                    .await
                    .map_err(fail)?;
                Ok(Client::Upstream(Arc::new(Pair { raw, txn })))
            }
            Kind::Floor => Ok(Client::Floor(Arc::new(
                crate::floor::Floor::connect(control, layout_regions).await?,
            ))),
            Kind::Bare => {
                let stores: HashMap<u64, String> = control.stores().await?.into_iter().collect();
                let mut channels: HashMap<u64, TikvClient<Channel>> = HashMap::new();
                let mut routes = Vec::new();
                for region in layout_regions {
                    let (leader, context) = region.leader_context()?;
                    let client = match channels.get(&leader.store_id) {
                        Some(c) => c.clone(),
                        None => {
                            let addr = stores.get(&leader.store_id).ok_or_else(|| {
                                format!("store {} not in the sim's store list", leader.store_id)
                            })?;
                            let channel = Channel::from_shared(format!("http://{addr}"))
                                .map_err(|e| format!("bad store address {addr}: {e}"))?
                                .connect()
                                .await
                                .map_err(|e| format!("cannot connect to store {addr}: {e}"))?;
                            let c = TikvClient::new(channel);
                            channels.insert(leader.store_id, c.clone());
                            c
                        }
                    };
                    routes.push((client, context));
                }
                Ok(Client::Bare(Arc::new(Bare { routes })))
            }
        }
    }

    /// Runs one request and checks its answer.
    pub async fn run(&self, request: &Request<'_>) -> Result<(), String> {
        match self {
            Client::Plan(c) => match request {
                Request::Txn { .. } | Request::SnapshotGet { .. } => {
                    plan_txn_run(&c.txn, request).await
                }
                _ => plan_run(&c.raw, request).await,
            },
            Client::Upstream(c) => match request {
                Request::Txn { .. } | Request::SnapshotGet { .. } => {
                    upstream_txn_run(&c.txn, request).await
                }
                _ => upstream_run(&c.raw, request).await,
            },
            Client::Bare(b) => b.run(request).await,
            Client::Floor(f) => f.run(request).await,
        }
    }

    /// Reads one key (the failover and dead-store scenarios).
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self {
            Client::Plan(c) => c.raw.get(key.to_vec()).await.map_err(|e| e.to_string()),
            Client::Upstream(c) => c.raw.get(key.to_vec()).await.map_err(|e| e.to_string()),
            Client::Bare(_) | Client::Floor(_) => Err("the bare call has no routing".to_owned()),
        }
    }

    /// How many stores a tikv-plan client reaches only through a proxy
    /// now; `None` for the other clients.
    pub fn forwarded_stores(&self) -> Option<u64> {
        match self {
            Client::Plan(c) => Some(c.raw.routing_stats().forwarded_stores),
            _ => None,
        }
    }

    /// [`Client::get`] with a bound.
    pub async fn get_within(&self, key: &[u8], bound: Duration) -> Result<Option<Vec<u8>>, String> {
        match tokio::time::timeout(bound, self.get(key)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {bound:?}")),
        }
    }

    /// Writes many pairs (loading the data set).
    pub async fn batch_put(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        match self {
            Client::Plan(c) => c.raw.batch_put(pairs).await.map_err(|e| e.to_string()),
            Client::Upstream(c) => c.raw.batch_put(pairs).await.map_err(|e| e.to_string()),
            Client::Bare(_) | Client::Floor(_) => Err("the loader uses tikv-plan".to_owned()),
        }
    }

    /// Writes many pairs in one transaction (loading the transactional
    /// data set).
    pub async fn txn_put(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        let Client::Plan(c) = self else {
            return Err("the loader uses tikv-plan".to_owned());
        };
        let text = |e: tikv_plan::Error| e.to_string();
        let mut txn = c.txn.begin_optimistic().await.map_err(text)?;
        for (key, value) in pairs {
            if let Err(e) = txn.put(key, value).await {
                let _ = txn.rollback().await;
                return Err(text(e));
            }
        }
        txn.commit().await.map(|_| ()).map_err(text)
    }
}

async fn plan(pd: &str, mode: tikv_plan::RpcMode) -> Result<Client, String> {
    let config = tikv_plan::Config::default().with_rpc_mode(mode);
    let fail = |e: tikv_plan::Error| format!("tikv-plan ({mode:?}) cannot connect: {e}");
    let raw = tikv_plan::RawClient::new_with_config(vec![pd.to_owned()], config.clone())
        .await
        .map_err(fail)?;
    let txn = tikv_plan::TransactionClient::new_with_config(vec![pd.to_owned()], config)
        .await
        .map_err(fail)?;
    Ok(Client::Plan(Arc::new(Pair { raw, txn })))
}

pub(crate) fn check_value(value: Option<Vec<u8>>) -> Result<(), String> {
    match value {
        Some(v) if v.len() == VALUE_LEN => Ok(()),
        Some(v) => Err(format!("value of {} bytes, want {VALUE_LEN}", v.len())),
        None => Err("key not found".to_owned()),
    }
}

pub(crate) fn check_count(what: &str, got: usize, want: usize) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} returned {got} pairs, want {want}"))
    }
}

async fn plan_run(c: &tikv_plan::RawClient, request: &Request<'_>) -> Result<(), String> {
    match request {
        Request::Get { key, .. } => {
            check_value(c.get(key.to_vec()).await.map_err(|e| e.to_string())?)
        }
        Request::Put { key, value, .. } => c
            .put(key.to_vec(), value.to_vec())
            .await
            .map_err(|e| e.to_string()),
        Request::BatchGet { batch } => {
            let pairs = c
                .batch_get(batch.keys.iter().cloned())
                .await
                .map_err(|e| e.to_string())?;
            check_count("batch_get", pairs.len(), batch.keys.len())
        }
        Request::Scan {
            start, end, limit, ..
        } => {
            let pairs = c
                .scan(start.to_vec()..end.to_vec(), *limit)
                .await
                .map_err(|e| e.to_string())?;
            check_count("scan", pairs.len(), *limit as usize)
        }
        Request::Txn { .. } | Request::SnapshotGet { .. } => {
            Err("a transactional request on the raw client".to_owned())
        }
    }
}

async fn upstream_run(c: &tikv_client::RawClient, request: &Request<'_>) -> Result<(), String> {
    match request {
        Request::Get { key, .. } => {
            check_value(c.get(key.to_vec()).await.map_err(|e| e.to_string())?)
        }
        Request::Put { key, value, .. } => c
            .put(key.to_vec(), value.to_vec())
            .await
            .map_err(|e| e.to_string()),
        Request::BatchGet { batch } => {
            let pairs = c
                .batch_get(batch.keys.iter().cloned())
                .await
                .map_err(|e| e.to_string())?;
            check_count("batch_get", pairs.len(), batch.keys.len())
        }
        Request::Scan {
            start, end, limit, ..
        } => {
            let pairs = c
                .scan(start.to_vec()..end.to_vec(), *limit)
                .await
                .map_err(|e| e.to_string())?;
            check_count("scan", pairs.len(), *limit as usize)
        }
        Request::Txn { .. } | Request::SnapshotGet { .. } => {
            Err("a transactional request on the raw client".to_owned())
        }
    }
}

/// One transactional request: begin, read, write, commit (or a snapshot
/// read), written once for both crates, whose transactional APIs match. On
/// a failed step the transaction is rolled back, as client-rust requires
/// before a drop.
macro_rules! txn_runner {
    ($name:ident, $krate:ident) => {
        async fn $name(c: &$krate::TransactionClient, request: &Request<'_>) -> Result<(), String> {
            let text = |e: $krate::Error| e.to_string();
            match request {
                Request::Txn {
                    key,
                    value,
                    pessimistic,
                } => {
                    let mut txn = if *pessimistic {
                        c.begin_pessimistic().await
                    } else {
                        c.begin_optimistic().await
                    }
                    .map_err(text)?;
                    let read = if *pessimistic {
                        txn.get_for_update(key.to_vec()).await
                    } else {
                        txn.get(key.to_vec()).await
                    };
                    let step = match read {
                        Ok(found) => check_value(found),
                        Err(e) => Err(text(e)),
                    };
                    let step = match step {
                        Ok(()) => txn.put(key.to_vec(), value.to_vec()).await.map_err(text),
                        e => e,
                    };
                    if let Err(e) = step {
                        let _ = txn.rollback().await;
                        return Err(e);
                    }
                    txn.commit().await.map(|_| ()).map_err(text)
                }
                Request::SnapshotGet { key } => {
                    let ts = c.current_timestamp().await.map_err(text)?;
                    let mut snapshot = c.snapshot(ts, $krate::TransactionOptions::new_optimistic());
                    check_value(snapshot.get(key.to_vec()).await.map_err(text)?)
                }
                _ => Err("not a transactional request".to_owned()),
            }
        }
    };
}

txn_runner!(plan_txn_run, tikv_plan);
txn_runner!(upstream_txn_run, tikv_client);

impl Bare {
    fn route(&self, region: usize) -> Result<(TikvClient<Channel>, kvrpcpb::Context), String> {
        self.routes
            .get(region)
            .cloned()
            .ok_or_else(|| format!("no route for Region index {region}"))
    }

    async fn run(&self, request: &Request<'_>) -> Result<(), String> {
        let status = |e: tonic::Status| e.to_string();
        match request {
            Request::Txn { .. } | Request::SnapshotGet { .. } => {
                Err("the bare call has no transactions".to_owned())
            }
            Request::Get { region, key } => {
                let (mut client, context) = self.route(*region)?;
                let resp = client
                    .raw_get(kvrpcpb::RawGetRequest {
                        context: Some(context),
                        key: key.to_vec(),
                        ..Default::default()
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                if let Some(e) = resp.region_error {
                    return Err(format!("region error: {e:?}"));
                }
                if resp.not_found {
                    return check_value(None);
                }
                check_value(Some(resp.value))
            }
            Request::Put { region, key, value } => {
                let (mut client, context) = self.route(*region)?;
                let resp = client
                    .raw_put(kvrpcpb::RawPutRequest {
                        context: Some(context),
                        key: key.to_vec(),
                        value: value.to_vec(),
                        ..Default::default()
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                match resp.region_error {
                    Some(e) => Err(format!("region error: {e:?}")),
                    None if !resp.error.is_empty() => Err(resp.error),
                    None => Ok(()),
                }
            }
            Request::BatchGet { batch } => {
                // The keys were grouped by Region when the batch was made:
                // one RPC per Region, all at once.
                let calls = batch.by_region.iter().map(|(region, keys)| async move {
                    let (mut client, context) = self.route(*region)?;
                    let resp = client
                        .raw_batch_get(kvrpcpb::RawBatchGetRequest {
                            context: Some(context),
                            keys: keys.clone(),
                            ..Default::default()
                        })
                        .await
                        .map_err(status)?
                        .into_inner();
                    match resp.region_error {
                        Some(e) => Err(format!("region error: {e:?}")),
                        None => Ok(resp.pairs.len()),
                    }
                });
                let mut found = 0;
                for count in futures::future::join_all(calls).await {
                    found += count?;
                }
                check_count("batch_get", found, batch.keys.len())
            }
            Request::Scan {
                region,
                start,
                end,
                limit,
            } => {
                let (mut client, context) = self.route(*region)?;
                let resp = client
                    .raw_scan(kvrpcpb::RawScanRequest {
                        context: Some(context),
                        start_key: start.to_vec(),
                        end_key: end.to_vec(),
                        limit: *limit,
                        ..Default::default()
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                if let Some(e) = resp.region_error {
                    return Err(format!("region error: {e:?}"));
                }
                check_count("scan", resp.kvs.len(), *limit as usize)
            }
        }
    }
}

/// Builds the client used to load data (tikv-plan, batched).
pub async fn loader(pd: &str) -> Result<Client, String> {
    plan(pd, tikv_plan::RpcMode::Batched).await
}

/// Loads `pairs` transactionally, `chunk` pairs per transaction.
pub async fn load_txn(
    client: &Client,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    chunk: usize,
) -> Result<(), String> {
    for part in pairs.chunks(chunk.max(1)) {
        client.txn_put(part.to_vec()).await?;
    }
    Ok(())
}

/// Loads `pairs` in chunks, `chunk` pairs per `batch_put`.
pub async fn load(
    client: &Client,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    chunk: usize,
) -> Result<(), String> {
    for part in pairs.chunks(chunk.max(1)) {
        client.batch_put(part.to_vec()).await?;
    }
    Ok(())
}
