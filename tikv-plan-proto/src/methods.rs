//! Every unary method of `tikvpb.Tikv`, declared once: its request and
//! response types, its gRPC name, the client stub's function, its case in
//! `BatchCommands` (if it has one) and where its response carries key
//! errors. The client (unary, typed and batched paths, mocks, response
//! checks) and the simulator (its service and its batch dispatch) read this
//! one table: through the traits [`KvMethod`] and [`KvResponse`] it
//! implements, and, for code that needs one item per method, through
//! [`kv_methods!`](crate::kv_methods), which hands the table to a macro.

use crate::tikvpb::batch_commands_request::request::Cmd as RequestCmd;
use crate::tikvpb::batch_commands_response::response::Cmd as ResponseCmd;
use crate::{errorpb, kvrpcpb};

/// Hands the method table to `$then!`, one row a method:
///
/// ```text
/// Name: Request => Response, "GrpcName", stub_function, [BatchCase], errors_shape;
/// ```
///
/// `[BatchCase]` is empty for a method without a `BatchCommands` case;
/// `errors_shape` is one of `text`, `one`, `many`, `one_and_pairs`,
/// `pairs(field)` (see [`KeyErrorField`](crate::methods::KeyErrorField)).
/// Request and response are names in [`kvrpcpb`](crate::kvrpcpb).
///
/// ```
/// macro_rules! names {
///     ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
///        [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {
///         [$($grpc),*]
///     };
/// }
/// let names = tikv_plan_proto::kv_methods!(names);
/// assert!(names.contains(&"RawCompareAndSwap"));
/// ```
#[macro_export]
macro_rules! kv_methods {
    ($then:ident) => {
        $then! {
            RawGet: RawGetRequest => RawGetResponse, "RawGet", raw_get, [RawGet], text;
            RawBatchGet: RawBatchGetRequest => RawBatchGetResponse, "RawBatchGet", raw_batch_get,
                [RawBatchGet], pairs(pairs);
            RawPut: RawPutRequest => RawPutResponse, "RawPut", raw_put, [RawPut], text;
            RawBatchPut: RawBatchPutRequest => RawBatchPutResponse, "RawBatchPut", raw_batch_put,
                [RawBatchPut], text;
            RawDelete: RawDeleteRequest => RawDeleteResponse, "RawDelete", raw_delete,
                [RawDelete], text;
            RawBatchDelete: RawBatchDeleteRequest => RawBatchDeleteResponse, "RawBatchDelete",
                raw_batch_delete, [RawBatchDelete], text;
            RawScan: RawScanRequest => RawScanResponse, "RawScan", raw_scan, [RawScan], pairs(kvs);
            RawDeleteRange: RawDeleteRangeRequest => RawDeleteRangeResponse, "RawDeleteRange",
                raw_delete_range, [RawDeleteRange], text;
            RawBatchScan: RawBatchScanRequest => RawBatchScanResponse, "RawBatchScan",
                raw_batch_scan, [RawBatchScan], pairs(kvs);
            RawGetKeyTtl: RawGetKeyTtlRequest => RawGetKeyTtlResponse, "RawGetKeyTTL",
                raw_get_key_ttl, [], text;
            RawCompareAndSwap: RawCasRequest => RawCasResponse, "RawCompareAndSwap",
                raw_compare_and_swap, [], text;
            RawChecksum: RawChecksumRequest => RawChecksumResponse, "RawChecksum", raw_checksum,
                [], text;
            RawCoprocessor: RawCoprocessorRequest => RawCoprocessorResponse, "RawCoprocessor",
                raw_coprocessor, [RawCoprocessor], text;
            Get: GetRequest => GetResponse, "KvGet", kv_get, [Get], one;
            Scan: ScanRequest => ScanResponse, "KvScan", kv_scan, [Scan], one_and_pairs;
            Prewrite: PrewriteRequest => PrewriteResponse, "KvPrewrite", kv_prewrite, [Prewrite],
                many;
            PessimisticLock: PessimisticLockRequest => PessimisticLockResponse,
                "KvPessimisticLock", kv_pessimistic_lock, [PessimisticLock], many;
            PessimisticRollback: PessimisticRollbackRequest => PessimisticRollbackResponse,
                "KVPessimisticRollback", kv_pessimistic_rollback, [PessimisticRollback], many;
            TxnHeartBeat: TxnHeartBeatRequest => TxnHeartBeatResponse, "KvTxnHeartBeat",
                kv_txn_heart_beat, [TxnHeartBeat], one;
            CheckTxnStatus: CheckTxnStatusRequest => CheckTxnStatusResponse, "KvCheckTxnStatus",
                kv_check_txn_status, [CheckTxnStatus], one;
            CheckSecondaryLocks: CheckSecondaryLocksRequest => CheckSecondaryLocksResponse,
                "KvCheckSecondaryLocks", kv_check_secondary_locks, [CheckSecondaryLocks], one;
            Commit: CommitRequest => CommitResponse, "KvCommit", kv_commit, [Commit], one;
            Cleanup: CleanupRequest => CleanupResponse, "KvCleanup", kv_cleanup, [Cleanup], one;
            BatchGet: BatchGetRequest => BatchGetResponse, "KvBatchGet", kv_batch_get, [BatchGet],
                one_and_pairs;
            BatchRollback: BatchRollbackRequest => BatchRollbackResponse, "KvBatchRollback",
                kv_batch_rollback, [BatchRollback], one;
            ScanLock: ScanLockRequest => ScanLockResponse, "KvScanLock", kv_scan_lock, [ScanLock],
                one;
            ResolveLock: ResolveLockRequest => ResolveLockResponse, "KvResolveLock",
                kv_resolve_lock, [ResolveLock], one;
            Gc: GcRequest => GcResponse, "KvGC", kv_gc, [Gc], one;
            DeleteRange: DeleteRangeRequest => DeleteRangeResponse, "KvDeleteRange",
                kv_delete_range, [DeleteRange], text;
            UnsafeDestroyRange: UnsafeDestroyRangeRequest => UnsafeDestroyRangeResponse,
                "UnsafeDestroyRange", unsafe_destroy_range, [], text;
        }
    };
}

/// Where a response carries its key errors (kvproto's fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyErrorField {
    /// `error: string` (raw writes and lookups, `KvDeleteRange`,
    /// `UnsafeDestroyRange`).
    Text,
    /// `error: KeyError`.
    One,
    /// `errors: repeated KeyError`.
    Many,
    /// `error: KeyError`, and an `error` on each returned pair.
    OneAndPairs,
    /// Only an `error` on each returned pair (raw batch get and scans).
    Pairs,
}

/// A response of a [`KvMethod`]: its Region error and key errors, wherever
/// the method keeps them.
pub trait KvResponse: prost::Message + Default + Clone + Send + Sync + 'static {
    /// Where the key errors are.
    const KEY_ERRORS: KeyErrorField;

    /// The Region error, to read, set or take.
    fn region_error_mut(&mut self) -> &mut Option<errorpb::Error>;

    /// `error: string`, for [`KeyErrorField::Text`].
    fn text_error_mut(&mut self) -> Option<&mut String> {
        None
    }

    /// `error: KeyError`, for [`KeyErrorField::One`] and
    /// [`KeyErrorField::OneAndPairs`].
    fn key_error_mut(&mut self) -> Option<&mut Option<kvrpcpb::KeyError>> {
        None
    }

    /// `errors`, for [`KeyErrorField::Many`].
    fn key_errors_mut(&mut self) -> Option<&mut Vec<kvrpcpb::KeyError>> {
        None
    }

    /// The returned pairs, for [`KeyErrorField::OneAndPairs`] and
    /// [`KeyErrorField::Pairs`].
    fn pairs_mut(&mut self) -> Option<&mut Vec<kvrpcpb::KvPair>> {
        None
    }

    /// A response carrying only `error` as its Region error.
    fn with_region_error(error: errorpb::Error) -> Self {
        let mut response = Self::default();
        *response.region_error_mut() = Some(error);
        response
    }

    /// A response whose key error aborts with `message`; `None` when the
    /// response has no top-level place for one ([`KeyErrorField::Pairs`]).
    fn with_abort(message: String) -> Option<Self> {
        let mut response = Self::default();
        let abort = || kvrpcpb::KeyError {
            abort: message.clone(),
            ..Default::default()
        };
        if let Some(text) = response.text_error_mut() {
            *text = message.clone();
        } else if let Some(one) = response.key_error_mut() {
            *one = Some(abort());
        } else if let Some(many) = response.key_errors_mut() {
            *many = vec![abort()];
        } else {
            return None;
        }
        Some(response)
    }

    /// True when the response carries a key error anywhere.
    fn has_key_error(&mut self) -> bool {
        self.text_error_mut().is_some_and(|e| !e.is_empty())
            || self.key_error_mut().is_some_and(|e| e.is_some())
            || self.key_errors_mut().is_some_and(|e| !e.is_empty())
            || self
                .pairs_mut()
                .is_some_and(|pairs| pairs.iter().any(|p| p.error.is_some()))
    }
}

/// The gRPC path of `tikvpb.Tikv`'s BatchCommands stream, which carries
/// the unary methods' requests in batches.
pub const BATCH_COMMANDS_PATH: &str = "/tikvpb.Tikv/BatchCommands";

/// A unary method of `tikvpb.Tikv`, named by its request type.
pub trait KvMethod: prost::Message + Default + Clone + Send + Sync + 'static {
    /// What the store answers.
    type Response: KvResponse;

    /// The method's name in `tikvpb.Tikv` (`RawGet`).
    const NAME: &'static str;

    /// The method's gRPC path (`/tikvpb.Tikv/RawGet`).
    const PATH: &'static str;

    /// The client stub's function name (`raw_get`): the label of metrics,
    /// spans and counters.
    const LABEL: &'static str;

    /// The request's context.
    fn context_mut(&mut self) -> &mut Option<kvrpcpb::Context>;

    /// The request's context, to read.
    fn context(&self) -> Option<&kvrpcpb::Context>;

    /// The request as a `BatchCommands` sub-request, or `None` when the
    /// batch protocol has no case for the method.
    fn to_batch(&self) -> Option<RequestCmd>;

    /// The field number of the method's case in
    /// `BatchCommandsResponse.Response`, or `None` when the batch protocol
    /// has no case for it (the default). Read off the generated type's own
    /// encoding, once.
    fn batch_case_number() -> Option<u32> {
        None
    }

    /// The field number of the method's case in
    /// `BatchCommandsRequest.Request`, or `None` when the batch protocol has
    /// no case for it (the default). Read off the generated type's own
    /// encoding, once.
    fn batch_request_case_number() -> Option<u32> {
        None
    }
}

macro_rules! key_error_accessors {
    (text) => {
        fn text_error_mut(&mut self) -> Option<&mut String> {
            Some(&mut self.error)
        }
    };
    (one) => {
        fn key_error_mut(&mut self) -> Option<&mut Option<kvrpcpb::KeyError>> {
            Some(&mut self.error)
        }
    };
    (many) => {
        fn key_errors_mut(&mut self) -> Option<&mut Vec<kvrpcpb::KeyError>> {
            Some(&mut self.errors)
        }
    };
    (one_and_pairs) => {
        fn key_error_mut(&mut self) -> Option<&mut Option<kvrpcpb::KeyError>> {
            Some(&mut self.error)
        }
        fn pairs_mut(&mut self) -> Option<&mut Vec<kvrpcpb::KvPair>> {
            Some(&mut self.pairs)
        }
    };
    (pairs($field:ident)) => {
        fn pairs_mut(&mut self) -> Option<&mut Vec<kvrpcpb::KvPair>> {
            Some(&mut self.$field)
        }
    };
}

macro_rules! key_error_field {
    (text) => {
        KeyErrorField::Text
    };
    (one) => {
        KeyErrorField::One
    };
    (many) => {
        KeyErrorField::Many
    };
    (one_and_pairs) => {
        KeyErrorField::OneAndPairs
    };
    (pairs($field:ident)) => {
        KeyErrorField::Pairs
    };
}

macro_rules! implement {
    ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
       [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
        impl KvMethod for kvrpcpb::$req {
            type Response = kvrpcpb::$resp;
            const NAME: &'static str = $grpc;
            const PATH: &'static str = concat!("/tikvpb.Tikv/", $grpc);
            const LABEL: &'static str = stringify!($stub);

            fn context_mut(&mut self) -> &mut Option<kvrpcpb::Context> {
                &mut self.context
            }

            fn context(&self) -> Option<&kvrpcpb::Context> {
                self.context.as_ref()
            }

            fn to_batch(&self) -> Option<RequestCmd> {
                None$(.or(Some(RequestCmd::$case(self.clone()))))?
            }

            $(fn batch_case_number() -> Option<u32> {
                static NUMBER: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
                Some(*NUMBER.get_or_init(|| {
                    let mut encoded = Vec::new();
                    ResponseCmd::$case(Default::default()).encode(&mut encoded);
                    crate::answers::case_number(&encoded)
                }))
            }

            fn batch_request_case_number() -> Option<u32> {
                static NUMBER: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
                Some(*NUMBER.get_or_init(|| {
                    let mut encoded = Vec::new();
                    RequestCmd::$case(Default::default()).encode(&mut encoded);
                    crate::answers::case_number(&encoded)
                }))
            })?
        }

        impl KvResponse for kvrpcpb::$resp {
            const KEY_ERRORS: KeyErrorField = key_error_field!($shape $(($field))?);

            fn region_error_mut(&mut self) -> &mut Option<errorpb::Error> {
                &mut self.region_error
            }

            key_error_accessors!($shape $(($field))?);
        }
    )*};
}

crate::kv_methods!(implement);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's path is the one the generated client stub calls, and
    /// its label is the stub's name.
    #[test]
    fn paths_and_labels_are_the_generated_stubs() {
        let stubs = include_str!("generated/tikvpb.rs");
        macro_rules! check {
            ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
               [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
                let path = <kvrpcpb::$req as KvMethod>::PATH;
                assert!(stubs.contains(&format!("\"{path}\"")), "{path}");
                let stub = format!("pub async fn {}(", <kvrpcpb::$req as KvMethod>::LABEL);
                assert!(stubs.contains(&stub), "{stub}");
            )*};
        }
        crate::kv_methods!(check);
        assert!(stubs.contains(&format!("\"{BATCH_COMMANDS_PATH}\"")));
    }

    #[test]
    fn batch_cases_round_trip_and_shapes_hold_their_errors() {
        let cmd = kvrpcpb::PrewriteRequest::default().to_batch();
        assert!(matches!(cmd, Some(RequestCmd::Prewrite(_))));
        assert!(kvrpcpb::RawCasRequest::default().to_batch().is_none());

        let mut text = kvrpcpb::RawPutResponse::with_abort("no".into()).unwrap();
        assert_eq!(text.error, "no");
        assert!(text.has_key_error());
        let mut many = kvrpcpb::PrewriteResponse::with_abort("no".into()).unwrap();
        assert_eq!(many.errors[0].abort, "no");
        assert!(many.has_key_error());
        let mut pairs = kvrpcpb::RawScanResponse::default();
        assert!(kvrpcpb::RawScanResponse::with_abort("no".into()).is_none());
        assert!(!pairs.has_key_error());
        pairs.kvs.push(kvrpcpb::KvPair {
            error: Some(Default::default()),
            ..Default::default()
        });
        assert!(pairs.has_key_error());
        assert_eq!(
            kvrpcpb::BatchGetResponse::KEY_ERRORS,
            KeyErrorField::OneAndPairs
        );
        let busy = kvrpcpb::GetResponse::with_region_error(errorpb::Error {
            message: "busy".into(),
            ..Default::default()
        });
        assert_eq!(
            busy.region_error.map(|e| e.message),
            Some("busy".to_owned())
        );
    }
}
