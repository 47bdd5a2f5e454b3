//! [`TimestampOracle`]: timestamps for many tasks from one `Tso` stream
//! ([txn.md, "The
//! model"](crate::spec::txn#the-model-percolator-as-tikv-runs-it): one
//! bidirectional stream per client, requests batched). Callers queue on a
//! channel; one task takes every caller waiting, asks PD for that many
//! timestamps in one request, and hands each caller its own (PD answers with
//! the last of the `count`; the others are the logical values just below it). A
//! broken stream fails the callers of its batch once, is reopened (following a
//! PD leader change) and the batch is retried on the new stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, OnceCell};

use super::cluster::{Cluster, Timestamp};
use crate::proto::pdpb;
use crate::Failure;
use crate::{Error, Result};

/// The most timestamps one TSO request asks for.
pub const MAX_TSO_BATCH: usize = 10_000;

/// What the oracle did. Counters only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TsoStats {
    /// TSO requests sent (one per batch).
    pub requests: u64,
    /// Timestamps handed out.
    pub timestamps: u64,
    /// Streams opened (1 unless a stream broke).
    pub streams_opened: u64,
}

#[derive(Debug, Default)]
struct TsoCounters {
    requests: AtomicU64,
    timestamps: AtomicU64,
    streams_opened: AtomicU64,
}

type Waiter = oneshot::Sender<Result<Timestamp>>;

/// Batches timestamp requests onto one `Tso` stream to the PD leader.
pub struct TimestampOracle {
    cluster: Arc<Cluster>,
    queue: OnceCell<mpsc::Sender<Waiter>>,
    counters: Arc<TsoCounters>,
}

impl std::fmt::Debug for TimestampOracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimestampOracle")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl TimestampOracle {
    /// An oracle over `cluster`. Its task starts with the first request
    /// (on the runtime of that caller) and ends when the oracle is dropped.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        TimestampOracle {
            cluster,
            queue: OnceCell::new(),
            counters: Arc::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> TsoStats {
        TsoStats {
            requests: self.counters.requests.load(Ordering::Relaxed),
            timestamps: self.counters.timestamps.load(Ordering::Relaxed),
            streams_opened: self.counters.streams_opened.load(Ordering::Relaxed),
        }
    }

    /// One fresh timestamp.
    pub async fn get_timestamp(&self) -> Result<Timestamp> {
        let queue = self
            .queue
            .get_or_init(|| async {
                let (tx, rx) = mpsc::channel(MAX_TSO_BATCH);
                let stream = TsoStream {
                    cluster: Arc::clone(&self.cluster),
                    counters: Arc::clone(&self.counters),
                    open: None,
                };
                tokio::spawn(stream.run(rx));
                tx
            })
            .await;
        let (tx, rx) = oneshot::channel();
        let ended = || Error::InternalError {
            message: "the TSO task ended; the PD client was shut down".to_owned(),
        };
        queue.send(tx).await.map_err(|_| ended())?;
        rx.await.map_err(|_| ended())?
    }
}

/// The open stream: where requests go, where answers come from, and the
/// leader connection it runs on.
struct OpenStream {
    requests: mpsc::Sender<pdpb::TsoRequest>,
    responses: tonic::Streaming<pdpb::TsoResponse>,
    generation: u64,
}

struct TsoStream {
    cluster: Arc<Cluster>,
    counters: Arc<TsoCounters>,
    open: Option<OpenStream>,
}

impl TsoStream {
    async fn run(mut self, mut queue: mpsc::Receiver<Waiter>) {
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_TSO_BATCH {
                match queue.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            // Callers that gave up need no timestamp.
            batch.retain(|w| !w.is_closed());
            if batch.is_empty() {
                continue;
            }
            let count = batch.len() as u32;
            let answer = self.round_with_retries(count).await;
            match answer {
                Ok(last) => {
                    self.counters
                        .timestamps
                        .fetch_add(u64::from(count), Ordering::Relaxed);
                    for (i, waiter) in batch.into_iter().enumerate() {
                        let _ = waiter.send(Ok(nth_of_batch(&last, count, i as u32)));
                    }
                }
                Err(e) => {
                    for waiter in batch {
                        let _ = waiter.send(Err(e.duplicate()));
                    }
                }
            }
        }
    }

    /// Asks for `count` timestamps, reopening the stream after a failure
    /// (a PD leader change, a reset) with the PD retry schedule, as every
    /// PD call does; after the retries the failure is
    /// [`Failure::PdUnavailable`](crate::Failure::PdUnavailable).
    async fn round_with_retries(&mut self, count: u32) -> Result<Timestamp> {
        let mut backoff = self.cluster.retry_backoff();
        loop {
            let failure = match self.round(count).await {
                Ok(ts) => return Ok(ts),
                Err(e)
                    if matches!(
                        e.failure(),
                        Some(Failure::ClusterIdMismatch { .. } | Failure::Pd { .. })
                    ) =>
                {
                    return Err(e)
                }
                Err(e) => e,
            };
            match backoff.next_delay_duration() {
                Some(delay) => {
                    tracing::warn!(
                        "TSO request failed ({failure}); reopening the stream in {delay:?}"
                    );
                    tokio::time::sleep(delay).await;
                }
                None => return Err(self.cluster.unavailable_after_retries(failure)),
            }
        }
    }

    /// Asks for `count` timestamps; returns the last. A failure closes the
    /// stream.
    async fn round(&mut self, count: u32) -> Result<Timestamp> {
        crate::telemetry::tso_batch(count);
        let result = crate::telemetry::pd_call("Tso", self.try_round(count)).await;
        if result.is_err() {
            if let Some(open) = self.open.take() {
                self.cluster.tso_stream_failed(open.generation);
            }
        }
        result
    }

    async fn try_round(&mut self, count: u32) -> Result<Timestamp> {
        let request = pdpb::TsoRequest {
            header: Some(self.cluster.pd_request_header()),
            count,
            dc_location: String::new(),
        };
        let closed = || Error::InternalError {
            message: "the TSO stream closed".to_owned(),
        };
        self.cluster.count_tso_request();
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        match self.open.as_mut() {
            Some(open) => open.requests.send(request).await.map_err(|_| closed())?,
            None => {
                // Queue the first request before opening: PD may answer the
                // call only once it has a request.
                let (tx, mut rx) = mpsc::channel(16);
                tx.send(request).await.map_err(|_| closed())?;
                let requests = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
                let (responses, generation) = self.cluster.open_tso_stream(requests).await?;
                self.counters.streams_opened.fetch_add(1, Ordering::Relaxed);
                self.open = Some(OpenStream {
                    requests: tx,
                    responses,
                    generation,
                });
            }
        }
        let timeout = self.cluster.timeout();
        let open = self.open.as_mut().ok_or_else(closed)?;
        let response = match tokio::time::timeout(timeout, open.responses.message()).await {
            Ok(Ok(Some(response))) => response,
            Ok(Ok(None)) => {
                return Err(Error::InternalError {
                    message: "PD closed the TSO stream without an answer".to_owned(),
                })
            }
            Ok(Err(status)) => return Err(status.into()),
            Err(_) => {
                return Err(Error::from(Failure::Timeout {
                    what: "a TSO request".to_owned(),
                    after: timeout,
                }))
            }
        };
        let response = self.cluster.check_tso_response(response)?;
        if response.count != count {
            return Err(Error::InternalError {
                message: format!(
                    "PD answered a request for {count} timestamps with {}",
                    response.count
                ),
            });
        }
        let last = response.timestamp.ok_or_else(|| Error::InternalError {
            message: "PD answered a TSO request without a timestamp".to_owned(),
        })?;
        if last.logical < i64::from(count) - 1 {
            return Err(Error::InternalError { message: format!(
                "PD answered a request for {count} timestamps with logical part {}, too small to hold them",
                last.logical
            ) });
        }
        Ok(last)
    }
}

/// The `i`-th of `count` timestamps whose last is `last`.
fn nth_of_batch(last: &Timestamp, count: u32, i: u32) -> Timestamp {
    let back = i64::from(count - 1 - i);
    Timestamp {
        physical: last.physical,
        logical: last.logical - back,
        ..*last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_hands_out_the_logical_values_below_the_last() {
        let last = Timestamp {
            physical: 7,
            logical: 10,
            ..Default::default()
        };
        let all: Vec<i64> = (0..3).map(|i| nth_of_batch(&last, 3, i).logical).collect();
        assert_eq!(all, vec![8, 9, 10]);
        assert_eq!(nth_of_batch(&last, 1, 0), last);
    }
}
