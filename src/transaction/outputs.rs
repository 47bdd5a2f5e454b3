//! What the transactional requests of [`lowering`](super::lowering) yield
//! in a plan built by hand (the table is in that module's documentation).

use crate::proto::kvrpcpb;
use crate::request::{
    collect_in_order, no_key_errors, Collect, DefaultProcessor, HasKeyErrors, Merge, Process,
};
use crate::{KvPair, Result, Value};

/// Every shard's answer in shard order, each checked for key errors.
fn checked<R: HasKeyErrors + Send + 'static>(input: Vec<Result<R>>) -> Result<Vec<R>> {
    collect_in_order(input)?
        .into_iter()
        .map(no_key_errors)
        .collect()
}

fn pairs(pairs: Vec<kvrpcpb::KvPair>) -> impl Iterator<Item = KvPair> {
    pairs.into_iter().map(KvPair::from)
}

impl Process<kvrpcpb::GetResponse> for DefaultProcessor {
    type Out = Option<Value>;

    fn process(&self, input: Result<kvrpcpb::GetResponse>) -> Result<Self::Out> {
        let response = no_key_errors(input?)?;
        Ok((!response.not_found).then_some(response.value))
    }
}

impl Merge<kvrpcpb::BatchGetResponse> for Collect {
    type Out = Vec<KvPair>;

    fn merge(&self, input: Vec<Result<kvrpcpb::BatchGetResponse>>) -> Result<Self::Out> {
        Ok(checked(input)?
            .into_iter()
            .flat_map(|r| pairs(r.pairs))
            .collect())
    }
}

impl Merge<kvrpcpb::ScanResponse> for Collect {
    type Out = Vec<KvPair>;

    fn merge(&self, input: Vec<Result<kvrpcpb::ScanResponse>>) -> Result<Self::Out> {
        Ok(checked(input)?
            .into_iter()
            .flat_map(|r| pairs(r.pairs))
            .collect())
    }
}

impl Merge<kvrpcpb::ScanLockResponse> for Collect {
    type Out = Vec<kvrpcpb::LockInfo>;

    fn merge(&self, input: Vec<Result<kvrpcpb::ScanLockResponse>>) -> Result<Self::Out> {
        Ok(checked(input)?.into_iter().flat_map(|r| r.locks).collect())
    }
}

impl Process<kvrpcpb::TxnHeartBeatResponse> for DefaultProcessor {
    /// The primary lock's TTL after the heartbeat, in milliseconds.
    type Out = u64;

    fn process(&self, input: Result<kvrpcpb::TxnHeartBeatResponse>) -> Result<Self::Out> {
        Ok(no_key_errors(input?)?.lock_ttl)
    }
}

impl Merge<kvrpcpb::UnsafeDestroyRangeResponse> for Collect {
    type Out = ();

    fn merge(&self, input: Vec<Result<kvrpcpb::UnsafeDestroyRangeResponse>>) -> Result<()> {
        checked(input).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(key: &[u8]) -> kvrpcpb::KeyError {
        kvrpcpb::KeyError {
            locked: Some(kvrpcpb::LockInfo {
                key: key.to_vec(),
                lock_version: 7,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pair_with_a_key_error_fails_the_merge_instead_of_vanishing() {
        let found = kvrpcpb::BatchGetResponse {
            pairs: vec![kvrpcpb::KvPair {
                key: b"a".to_vec(),
                value: b"1".to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let merged = Collect.merge(vec![Ok(found.clone())]).unwrap();
        assert_eq!(merged, vec![KvPair::new(b"a".to_vec(), b"1".to_vec())]);
        let blocked = kvrpcpb::BatchGetResponse {
            pairs: vec![kvrpcpb::KvPair {
                key: b"b".to_vec(),
                error: Some(locked(b"b")),
                ..Default::default()
            }],
            ..Default::default()
        };
        let err = Collect.merge(vec![Ok(found), Ok(blocked)]).unwrap_err();
        assert!(
            matches!(&err, crate::Error::KeyError(e) if e.locked.is_some()),
            "{err:?}"
        );
    }

    #[test]
    fn get_and_heart_beat_are_processed_as_in_client_rust() {
        let hit = kvrpcpb::GetResponse {
            value: b"v".to_vec(),
            ..Default::default()
        };
        assert_eq!(
            DefaultProcessor.process(Ok(hit)).unwrap(),
            Some(b"v".to_vec())
        );
        let miss = kvrpcpb::GetResponse {
            not_found: true,
            ..Default::default()
        };
        assert_eq!(DefaultProcessor.process(Ok(miss)).unwrap(), None);
        let blocked = kvrpcpb::GetResponse {
            error: Some(locked(b"k")),
            ..Default::default()
        };
        assert!(DefaultProcessor.process(Ok(blocked)).is_err());
        let beat = kvrpcpb::TxnHeartBeatResponse {
            lock_ttl: 3_000,
            ..Default::default()
        };
        assert_eq!(DefaultProcessor.process(Ok(beat)).unwrap(), 3_000);
    }
}
