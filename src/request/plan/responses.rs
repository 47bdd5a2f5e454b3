//! The checks the plan makes on a response — its Region error, its key
//! errors and the locks among them — for every response of the wire
//! protocol, from where the method's row in the table
//! ([`kv_methods!`](tikv_plan_proto::kv_methods)) says it keeps them.

use tikv_plan_proto::methods::KvResponse;

use super::resolve_lock::HasLocks;
use super::traits::{pair_key_errors, string_key_error, HasKeyErrors, HasRegionError};
use crate::proto::{errorpb, kvrpcpb};
use crate::Error;

fn key_error(e: kvrpcpb::KeyError) -> Error {
    Error::KeyError(Box::new(e))
}

/// Takes every key error out of `response`.
fn take_key_errors<R: KvResponse>(response: &mut R) -> Option<Vec<Error>> {
    if let Some(text) = response.text_error_mut() {
        return string_key_error(text);
    }
    let mut errors = Vec::new();
    if let Some(one) = response.key_error_mut().and_then(Option::take) {
        errors.push(key_error(one));
    }
    if let Some(many) = response.key_errors_mut() {
        errors.extend(many.drain(..).map(key_error));
    }
    if let Some(pairs) = response.pairs_mut() {
        errors.extend(pair_key_errors(pairs).unwrap_or_default());
    }
    (!errors.is_empty()).then_some(errors)
}

/// The lock of a key error that reports one, taken out (the error goes with
/// it); other errors stay.
fn take_lock(error: &mut Option<kvrpcpb::KeyError>) -> Option<kvrpcpb::LockInfo> {
    if error.as_ref().is_some_and(|e| e.locked.is_some()) {
        return error.take().and_then(|e| e.locked);
    }
    None
}

/// Takes the locks out of `response`'s key errors.
fn take_locks<R: KvResponse>(response: &mut R) -> Vec<kvrpcpb::LockInfo> {
    let mut locks = Vec::new();
    if let Some(one) = response.key_error_mut() {
        locks.extend(take_lock(one));
    }
    if let Some(many) = response.key_errors_mut() {
        many.retain_mut(|e| match e.locked.take() {
            Some(lock) => {
                locks.push(lock);
                false
            }
            None => true,
        });
    }
    if let Some(pairs) = response.pairs_mut() {
        locks.extend(pairs.iter_mut().filter_map(|p| take_lock(&mut p.error)));
    }
    locks
}

macro_rules! response_checks {
    ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
       [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
        impl HasRegionError for kvrpcpb::$resp {
            fn region_error(&mut self) -> Option<errorpb::Error> {
                self.region_error_mut().take()
            }
        }

        impl HasKeyErrors for kvrpcpb::$resp {
            fn key_errors(&mut self) -> Option<Vec<Error>> {
                take_key_errors(self)
            }
        }

        has_locks!($resp);
    )*};
}

/// `HasLocks` for one response: the locks in its key errors; a `ScanLock`
/// answer gives the locks it lists as well (what it reports, as in
/// client-rust).
macro_rules! has_locks {
    (ScanLockResponse) => {
        impl HasLocks for kvrpcpb::ScanLockResponse {
            fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo> {
                let mut locks = std::mem::take(&mut self.locks);
                locks.extend(take_locks(self));
                locks
            }
        }
    };
    ($resp:ident) => {
        impl HasLocks for kvrpcpb::$resp {
            fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo> {
                take_locks(self)
            }
        }
    };
}

tikv_plan_proto::kv_methods!(response_checks);

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(key: &[u8]) -> kvrpcpb::KeyError {
        kvrpcpb::KeyError {
            locked: Some(kvrpcpb::LockInfo {
                key: key.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_shape_gives_up_its_errors_and_locks() {
        // `error: string`.
        let mut put = kvrpcpb::RawPutResponse {
            error: "disk full".into(),
            ..Default::default()
        };
        let errors = put.key_errors().unwrap();
        assert!(matches!(&errors[..], [Error::KvError { message }] if message == "disk full"));
        assert!(put.key_errors().is_none());
        // `error: KeyError`: a lock is taken with its error.
        let mut commit = kvrpcpb::CommitResponse {
            error: Some(locked(b"a")),
            ..Default::default()
        };
        assert_eq!(commit.take_locks()[0].key, b"a");
        assert!(commit.key_errors().is_none());
        // `errors`: locks out, the rest stays.
        let mut prewrite = kvrpcpb::PrewriteResponse {
            errors: vec![locked(b"a"), kvrpcpb::KeyError::default(), locked(b"b")],
            ..Default::default()
        };
        let keys: Vec<_> = prewrite.take_locks().into_iter().map(|l| l.key).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(prewrite.key_errors().map(|e| e.len()), Some(1));
        // `error` and the pairs' errors.
        let mut batch_get = kvrpcpb::BatchGetResponse {
            error: Some(kvrpcpb::KeyError::default()),
            pairs: vec![kvrpcpb::KvPair {
                error: Some(locked(b"p")),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(batch_get.take_locks()[0].key, b"p");
        assert_eq!(batch_get.key_errors().map(|e| e.len()), Some(1));
        // The pairs' errors only.
        let mut scan = kvrpcpb::RawScanResponse {
            kvs: vec![kvrpcpb::KvPair {
                error: Some(kvrpcpb::KeyError::default()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(scan.key_errors().map(|e| e.len()), Some(1));
        // Every response gives up its Region error once.
        let mut get = kvrpcpb::GetResponse {
            region_error: Some(errorpb::Error::default()),
            ..Default::default()
        };
        assert!(get.region_error().is_some() && get.region_error().is_none());
    }
}
