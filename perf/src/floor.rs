//! The floor of the batched protocol: what a `BatchCommands` stream per
//! store costs with nothing else around it.
//!
//! Per store, one `BatchCommands` stream, opened once. Callers hand
//! `(request, reply sender)` pairs to that store's sender task over an
//! unbounded channel; the sender takes one pair, then whatever else is
//! already queued (up to [`MAX_BATCH`]), gives each an id and writes one
//! `BatchCommandsRequest`. A receiver task reads each
//! `BatchCommandsResponse` and completes each caller by id. The request's
//! `Context` (Region id, epoch, leader peer) is filled once per Region
//! beforehand. No deadline, no retry, no routing, no metrics: a broken
//! stream fails every request after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc as stream_channel;
use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::batch_commands_request::{request::Cmd as Ask, Request as Sub};
use tikv_plan::proto::tikvpb::batch_commands_response::{response::Cmd as Got, Response as Answer};
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tikv_plan::proto::tikvpb::BatchCommandsRequest;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::sim::{Control, RegionLine};
use crate::workload::Request;

/// The most sub-requests in one `BatchCommandsRequest` (TiKV's clients'
/// usual batch limit).
pub const MAX_BATCH: usize = 128;

/// A caller's request and where its answer goes.
type Call = (Sub, oneshot::Sender<Answer>);

/// Callers waiting for an answer, by request id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Answer>>>>;

/// One stream per store and a filled `Context` per Region of the layout.
pub struct Floor {
    /// Per Region index: the sender task of its leader's store, and the
    /// Region's `Context`.
    routes: Vec<(mpsc::UnboundedSender<Call>, kvrpcpb::Context)>,
}

impl Floor {
    /// Opens one stream to each store leading a Region of the layout.
    pub async fn connect(control: &mut Control, regions: &[RegionLine]) -> Result<Floor, String> {
        let stores: HashMap<u64, String> = control.stores().await?.into_iter().collect();
        let mut senders: HashMap<u64, mpsc::UnboundedSender<Call>> = HashMap::new();
        let mut routes = Vec::new();
        for region in regions {
            let (leader, context) = region.leader_context()?;
            let sender = match senders.get(&leader.store_id) {
                Some(s) => s.clone(),
                None => {
                    let addr = stores.get(&leader.store_id).ok_or_else(|| {
                        format!("store {} not in the sim's store list", leader.store_id)
                    })?;
                    let s = open(addr).await?;
                    senders.insert(leader.store_id, s.clone());
                    s
                }
            };
            routes.push((sender, context));
        }
        Ok(Floor { routes })
    }

    /// Sends one sub-request for Region index `region` and waits for its
    /// answer.
    async fn call(
        &self,
        region: usize,
        make: impl FnOnce(kvrpcpb::Context) -> Ask,
    ) -> Result<Got, String> {
        let (sender, context) = self
            .routes
            .get(region)
            .ok_or_else(|| format!("no route for Region index {region}"))?;
        let (tx, rx) = oneshot::channel();
        let sub = Sub {
            cmd: Some(make(context.clone())),
        };
        sender
            .send((sub, tx))
            .map_err(|_| "the floor's sender task has stopped".to_owned())?;
        let answer = rx
            .await
            .map_err(|_| "the floor's stream ended without an answer".to_owned())?;
        answer
            .cmd
            .ok_or_else(|| "an empty BatchCommands answer".to_owned())
    }

    /// Runs one request and checks its answer.
    pub async fn run(&self, request: &Request<'_>) -> Result<(), String> {
        let region_error = |e| format!("region error: {e:?}");
        match request {
            Request::Txn { .. } | Request::SnapshotGet { .. } => {
                Err("the floor has no transactions".to_owned())
            }
            Request::Get { region, key } => {
                let got = self
                    .call(*region, |context| {
                        Ask::RawGet(kvrpcpb::RawGetRequest {
                            context: Some(context),
                            key: key.to_vec(),
                            ..Default::default()
                        })
                    })
                    .await?;
                let Got::RawGet(resp) = got else {
                    return Err(format!("not a RawGet answer: {got:?}"));
                };
                if let Some(e) = resp.region_error {
                    return Err(region_error(e));
                }
                crate::clients::check_value((!resp.not_found).then_some(resp.value))
            }
            Request::Put { region, key, value } => {
                let got = self
                    .call(*region, |context| {
                        Ask::RawPut(kvrpcpb::RawPutRequest {
                            context: Some(context),
                            key: key.to_vec(),
                            value: value.to_vec(),
                            ..Default::default()
                        })
                    })
                    .await?;
                let Got::RawPut(resp) = got else {
                    return Err(format!("not a RawPut answer: {got:?}"));
                };
                match resp.region_error {
                    Some(e) => Err(region_error(e)),
                    None if !resp.error.is_empty() => Err(resp.error),
                    None => Ok(()),
                }
            }
            Request::BatchGet { batch } => {
                let calls = batch.by_region.iter().map(|(region, keys)| async move {
                    let got = self
                        .call(*region, |context| {
                            Ask::RawBatchGet(kvrpcpb::RawBatchGetRequest {
                                context: Some(context),
                                keys: keys.clone(),
                                ..Default::default()
                            })
                        })
                        .await?;
                    let Got::RawBatchGet(resp) = got else {
                        return Err(format!("not a RawBatchGet answer: {got:?}"));
                    };
                    match resp.region_error {
                        Some(e) => Err(region_error(e)),
                        None => Ok(resp.pairs.len()),
                    }
                });
                let mut found = 0;
                for count in futures::future::join_all(calls).await {
                    found += count?;
                }
                crate::clients::check_count("batch_get", found, batch.keys.len())
            }
            Request::Scan {
                region,
                start,
                end,
                limit,
            } => {
                let got = self
                    .call(*region, |context| {
                        Ask::RawScan(kvrpcpb::RawScanRequest {
                            context: Some(context),
                            start_key: start.to_vec(),
                            end_key: end.to_vec(),
                            limit: *limit,
                            ..Default::default()
                        })
                    })
                    .await?;
                let Got::RawScan(resp) = got else {
                    return Err(format!("not a RawScan answer: {got:?}"));
                };
                if let Some(e) = resp.region_error {
                    return Err(region_error(e));
                }
                crate::clients::check_count("scan", resp.kvs.len(), *limit as usize)
            }
        }
    }
}

/// Opens the stream to the store at `addr` and starts its sender and
/// receiver tasks; returns the sender task's queue.
async fn open(addr: &str) -> Result<mpsc::UnboundedSender<Call>, String> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("bad store address {addr}: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("cannot connect to store {addr}: {e}"))?;
    let mut client = TikvClient::new(channel);
    let (body, outgoing) = stream_channel::unbounded::<BatchCommandsRequest>();
    let mut incoming = client
        .batch_commands(outgoing)
        .await
        .map_err(|e| format!("cannot open a BatchCommands stream to {addr}: {e}"))?
        .into_inner();
    let waiting: Waiting = Arc::default();
    let (calls, queue) = mpsc::unbounded_channel();
    tokio::spawn(send_batches(queue, body, waiting.clone()));
    tokio::spawn(async move {
        while let Ok(Some(message)) = incoming.message().await {
            let mut waiting = waiting.lock().unwrap_or_else(|e| e.into_inner());
            for (id, answer) in message.request_ids.into_iter().zip(message.responses) {
                if let Some(caller) = waiting.remove(&id) {
                    let _ = caller.send(answer);
                }
            }
        }
        // The stream ended: dropping the waiting senders fails every
        // caller still waiting.
        waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
    });
    Ok(calls)
}

/// The sender task: one pair, then whatever else is queued (up to
/// [`MAX_BATCH`]), written as one `BatchCommandsRequest`.
async fn send_batches(
    mut queue: mpsc::UnboundedReceiver<Call>,
    body: stream_channel::UnboundedSender<BatchCommandsRequest>,
    waiting: Waiting,
) {
    let mut next_id = 0u64;
    while let Some(first) = queue.recv().await {
        let mut calls = vec![first];
        while calls.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(call) => calls.push(call),
                Err(_) => break,
            }
        }
        let mut batch = BatchCommandsRequest {
            requests: Vec::with_capacity(calls.len()),
            request_ids: Vec::with_capacity(calls.len()),
            ..Default::default()
        };
        {
            let mut waiting = waiting.lock().unwrap_or_else(|e| e.into_inner());
            for (sub, caller) in calls {
                next_id += 1;
                waiting.insert(next_id, caller);
                batch.requests.push(sub);
                batch.request_ids.push(next_id);
            }
        }
        if body.unbounded_send(batch).is_err() {
            return;
        }
    }
}
