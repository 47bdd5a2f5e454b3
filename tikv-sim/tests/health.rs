//! A store's health feedback over a real BatchCommands stream, as TiKV
//! sends it (`src/server/service/kv.rs`, `HealthFeedbackAttacher`): on a
//! stream's first message, then at most once per feedback interval; the
//! slow score it carries rises round by round while the store is slow
//! (`health_controller`'s `SlowScore`).

use std::time::Duration;

use tikv_sim::proto::kvrpcpb;
use tikv_sim::proto::tikvpb::{
    batch_commands_request, BatchCommandsRequest, BatchCommandsResponse,
};
use tikv_sim::SimCluster;
use tokio::sync::mpsc;

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(20);

fn get(ctx: &kvrpcpb::Context, id: u64) -> BatchCommandsRequest {
    BatchCommandsRequest {
        requests: vec![batch_commands_request::Request {
            cmd: Some(batch_commands_request::request::Cmd::RawGet(
                kvrpcpb::RawGetRequest {
                    context: Some(ctx.clone()),
                    key: b"k".to_vec(),
                    cf: String::new(),
                },
            )),
        }],
        request_ids: vec![id],
        ..Default::default()
    }
}

struct Stream {
    tx: mpsc::Sender<BatchCommandsRequest>,
    answers: tonic::Streaming<BatchCommandsResponse>,
    ctx: kvrpcpb::Context,
    next_id: u64,
}

impl Stream {
    async fn open(cluster: &SimCluster, store: u64) -> Stream {
        let region = cluster.regions()[0].id;
        let mut client = cluster.tikv_client(store).await.unwrap();
        let (tx, rx) = mpsc::channel(4);
        let answers = client
            .batch_commands(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let ctx = cluster.context(region, store).unwrap();
        Stream {
            tx,
            answers,
            ctx,
            next_id: 1,
        }
    }

    /// Sends one get and returns the feedback its answer carried.
    async fn round_trip(&mut self) -> Option<kvrpcpb::HealthFeedback> {
        self.tx.send(get(&self.ctx, self.next_id)).await.unwrap();
        self.next_id += 1;
        let msg = tokio::time::timeout(PATIENCE, self.answers.message())
            .await
            .expect("an answer in time")
            .unwrap()
            .unwrap();
        assert_eq!(msg.responses.len(), 1);
        msg.health_feedback
    }
}

#[tokio::test]
async fn a_stream_gets_feedback_on_its_first_message_then_once_an_interval() {
    let cluster = SimCluster::builder().stores(3).start().await.unwrap();
    let leader = cluster.leader_of(cluster.regions()[0].id).unwrap().store_id;
    let mut stream = Stream::open(&cluster, leader).await;
    let first = stream.round_trip().await.expect("the first message has it");
    assert_eq!((first.store_id, first.slow_score), (leader, 1));
    // TiKV's default interval is 1 s: the next answer, at once, has none.
    assert_eq!(stream.round_trip().await, None);
    // A second stream gets its own first feedback, numbered after.
    let mut other = Stream::open(&cluster, leader).await;
    let second = other.round_trip().await.expect("its first message has it");
    assert!(second.feedback_seq_no > first.feedback_seq_no);
    // Off: none at all, the first message included.
    cluster.store_health_timing(tikv_sim::DEFAULT_INSPECT_INTERVAL, None);
    let mut quiet = Stream::open(&cluster, leader).await;
    assert_eq!(quiet.round_trip().await, None);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_slowed_store_reports_a_score_that_doubles_each_round_up_to_100() {
    let cluster = SimCluster::builder().stores(3).start().await.unwrap();
    let leader = cluster.leader_of(cluster.regions()[0].id).unwrap().store_id;
    // Rounds of 30 × 2 ms; feedback on every message 1 ms apart.
    let inspect = Duration::from_millis(2);
    cluster.store_health_timing(inspect, Some(Duration::from_millis(1)));
    let mut stream = Stream::open(&cluster, leader).await;
    assert_eq!(stream.round_trip().await.map(|f| f.slow_score), Some(1));
    // Slower than the inspect interval: every inspection times out.
    cluster.store_slow(leader, Duration::from_millis(5));
    let mut seen = Vec::new();
    let mut last_seq = 0;
    tokio::time::timeout(PATIENCE, async {
        while seen.last().is_none_or(|s| *s < 100) {
            if let Some(f) = stream.round_trip().await {
                assert!(f.feedback_seq_no > last_seq, "numbers grow");
                last_seq = f.feedback_seq_no;
                if seen.last() != Some(&f.slow_score) {
                    seen.push(f.slow_score);
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the score never reached 100: {seen:?}"));
    // Each reported score is one of the doublings from 1, capped at 100,
    // and they only rise.
    let doublings = [1, 2, 4, 8, 16, 32, 64, 100];
    assert!(seen.iter().all(|s| doublings.contains(s)), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let score = cluster.store_slow_score(leader).unwrap();
    assert_eq!(score, 100.0);
    // Healthy again: it falls by 100 × 60 ms / 5 min a round, so it is
    // still slow for a long while (TiKV's slow recovery).
    cluster.store_slow(leader, Duration::ZERO);
    let after = stream.round_trip().await;
    assert!(after.is_none_or(|f| f.slow_score >= 99), "{after:?}");
    // Another store, never slowed, stays at 1.
    let other = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != leader)
        .unwrap();
    assert_eq!(cluster.store_slow_score(other), Some(1.0));
    cluster.shutdown().await;
}
