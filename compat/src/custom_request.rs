//! A request of the application's own, written the client-rust way: a type
//! with its own `Request`, `KvRequest` and `Shardable` impls and its own
//! `Merge`, run through `PlanBuilder::new(pd, keyspace, request)` in a
//! keyspace, with keys encoded by `EncodeKeyspace` and decoded by
//! `TruncateKeyspace`. In API v2 TiKV keeps raw keys memcomparable-encoded,
//! so the PD client is seen through `CodecPdClient`, which finds each key's
//! Region by its encoding (client-rust's PD client does so inside when it
//! is connected with a keyspace).
//!
//! The request, `ExistingKeys`, asks which of a set of keys exist, without
//! moving their values back to the client (`key_only`-like use of a batch
//! get whose values are dropped by the merge).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use tikv_client::pd::{PdClient, PdRpcClient};
use tikv_client::proto::kvrpcpb;
use tikv_client::proto::tikvpb::tikv_client::TikvClient;
use tikv_client::region::RegionWithLeader;
use tikv_client::request::{
    set_context_for_store, CodecPdClient, EncodeKeyspace, KeyMode, Keyspace, KvRequest, Merge,
    Plan, PlanBuilder, Shardable, TruncateKeyspace,
};
use tikv_client::store::{RegionStore, Request};
use tikv_client::{Backoff, Config, Key, Result};

/// Which of `keys` exist.
#[derive(Debug, Clone)]
pub struct ExistingKeys {
    inner: kvrpcpb::RawBatchGetRequest,
}

impl ExistingKeys {
    /// The request for `keys`, already encoded for the keyspace.
    pub fn new(keys: Vec<Vec<u8>>) -> Self {
        ExistingKeys {
            inner: kvrpcpb::RawBatchGetRequest {
                keys,
                ..Default::default()
            },
        }
    }
}

#[async_trait]
impl Request for ExistingKeys {
    async fn dispatch(
        &self,
        client: &TikvClient<Channel>,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>> {
        self.inner.dispatch(client, timeout).await
    }

    fn label(&self) -> &'static str {
        "existing_keys"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn context(&self) -> Option<&kvrpcpb::Context> {
        self.inner.context.as_ref()
    }

    fn set_context(&mut self, context: kvrpcpb::Context) {
        self.inner.context = Some(context);
    }
}

impl KvRequest for ExistingKeys {
    type Response = kvrpcpb::RawBatchGetResponse;
}

/// One shard per Region: the keys it holds.
#[async_trait]
impl Shardable for ExistingKeys {
    type Shard = Vec<Vec<u8>>;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        let mut keys = self.inner.keys.clone();
        keys.sort();
        keys.dedup();
        let groups = pd_client.group_keys_by_region(keys).await?;
        Ok(groups
            .into_iter()
            .map(|(region, keys)| (keys, region))
            .collect())
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.inner.keys = shard;
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

/// Keeps the keys of the pairs found, without the keyspace prefix, in key
/// order.
#[derive(Debug, Clone, Copy)]
pub struct FoundKeys {
    keyspace: Keyspace,
}

impl Merge<kvrpcpb::RawBatchGetResponse> for FoundKeys {
    type Out = Vec<Key>;

    fn merge(&self, input: Vec<Result<kvrpcpb::RawBatchGetResponse>>) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        for response in input {
            for pair in response?.pairs {
                keys.push(Key::from(pair.key).truncate_keyspace(self.keyspace));
            }
        }
        keys.sort();
        Ok(keys)
    }
}

/// Which of `keys` exist in the keyspace named `keyspace_name`.
pub async fn existing_keys(
    pd_endpoints: Vec<String>,
    keyspace_name: &str,
    keys: Vec<String>,
) -> Result<Vec<Key>> {
    let config = Config::default().with_keyspace(keyspace_name);
    let pd = Arc::new(PdRpcClient::connect(&pd_endpoints, &config).await?);
    let meta = pd.load_keyspace(keyspace_name).await?;
    let keyspace = Keyspace::Enable {
        keyspace_id: meta.id,
    };
    let keys = keys
        .into_iter()
        .map(|k| Key::from(k).encode_keyspace(keyspace, KeyMode::Raw).into())
        .collect();
    let pd = Arc::new(CodecPdClient::new(pd, keyspace, KeyMode::Raw));
    let plan = PlanBuilder::new(pd, keyspace, ExistingKeys::new(keys))
        .retry_multi_region(Backoff::no_jitter_backoff(2, 100, 10))
        .merge(FoundKeys { keyspace })
        .plan();
    plan.execute().await
}
