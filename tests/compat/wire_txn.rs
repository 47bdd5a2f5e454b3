//! The transactional messages and methods must match kvproto byte for
//! byte: encodings compared with bytes computed by hand from the field
//! numbers in `shared/docs/wire.md` ("Transactional kvrpcpb", "More PD").

use prost::Message;
use tikv_plan::proto::{kvrpcpb, pdpb};

fn check<M: Message + Default + PartialEq + std::fmt::Debug>(msg: M, expected: &[u8]) {
    assert_eq!(msg.encode_to_vec(), expected, "encoding of {msg:?}");
    assert_eq!(M::decode(expected).unwrap(), msg, "decoding back");
}

#[test]
fn prewrite_request_fields() {
    let req = kvrpcpb::PrewriteRequest {
        mutations: vec![kvrpcpb::Mutation {
            op: kvrpcpb::Op::Del as i32,
            key: b"k".to_vec(),
            value: Vec::new(),
            assertion: kvrpcpb::Assertion::NotExist as i32,
        }],
        primary_lock: b"k".to_vec(),
        start_version: 5,
        lock_ttl: 7,
        pessimistic_actions: vec![kvrpcpb::PessimisticAction::DoPessimisticCheck as i32],
        for_update_ts: 6,
        min_commit_ts: 8,
        use_async_commit: true,
        secondaries: vec![b"s".to_vec()],
        try_one_pc: true,
        max_commit_ts: 9,
        ..Default::default()
    };
    check(
        req,
        &[
            0x12, 7, 0x08, 1, 0x12, 1, b'k', 0x20, 2, // mutations=2: op=1, key=2, assertion=4
            0x1A, 1, b'k', // primary_lock=3
            0x20, 5, // start_version=4
            0x28, 7, // lock_ttl=5
            0x3A, 1, 1, // pessimistic_actions=7, packed
            0x48, 6, // for_update_ts=9
            0x50, 8, // min_commit_ts=10
            0x58, 1, // use_async_commit=11
            0x62, 1, b's', // secondaries=12
            0x68, 1, // try_one_pc=13
            0x70, 9, // max_commit_ts=14
        ],
    );
    let resp = kvrpcpb::PrewriteResponse {
        min_commit_ts: 3,
        one_pc_commit_ts: 4,
        ..Default::default()
    };
    check(resp, &[0x18, 3, 0x20, 4]);
}

#[test]
fn lock_info_and_key_errors() {
    let lock = kvrpcpb::LockInfo {
        primary_lock: b"p".to_vec(),
        lock_version: 3,
        key: b"k".to_vec(),
        lock_ttl: 4,
        txn_size: 5,
        lock_type: kvrpcpb::Op::PessimisticLock as i32,
        lock_for_update_ts: 6,
        use_async_commit: true,
        min_commit_ts: 7,
        secondaries: vec![b"s".to_vec()],
        duration_to_last_update_ms: 8,
        is_txn_file: true,
    };
    check(
        lock,
        &[
            0x0A, 1, b'p', 0x10, 3, 0x1A, 1, b'k', 0x20, 4, 0x28, 5, 0x30, 5, 0x38, 6, 0x40, 1,
            0x48, 7, 0x52, 1, b's', 0x58, 8, // ...
            0xA0, 0x06, 1, // is_txn_file=100
        ],
    );
    // kvproto's messages, not opaque bytes: a user reads their fields.
    let messages = kvrpcpb::KeyError {
        commit_ts_too_large: Some(kvrpcpb::CommitTsTooLarge { commit_ts: 9 }),
        assertion_failed: Some(kvrpcpb::AssertionFailed {
            start_ts: 1,
            key: b"k".to_vec(),
            assertion: kvrpcpb::Assertion::NotExist as i32,
            existing_start_ts: 4,
            existing_commit_ts: 5,
        }),
        primary_mismatch: Some(kvrpcpb::PrimaryMismatch {
            lock_info: Some(kvrpcpb::LockInfo {
                key: b"k".to_vec(),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    check(
        messages,
        &[
            0x4A, 2, 0x08, 9, // commit_ts_too_large=9 { commit_ts=1 }
            0x52, 11, 0x08, 1, 0x12, 1, b'k', 0x18, 2, 0x20, 4, 0x28,
            5, // assertion_failed=10
            0x5A, 5, 0x0A, 3, 0x1A, 1, b'k', // primary_mismatch=11 { lock_info=1 }
        ],
    );
    let conflict = kvrpcpb::KeyError {
        conflict: Some(kvrpcpb::WriteConflict {
            start_ts: 1,
            conflict_ts: 2,
            key: b"k".to_vec(),
            primary: b"p".to_vec(),
            conflict_commit_ts: 3,
            reason: 2,
        }),
        ..Default::default()
    };
    check(
        conflict,
        &[
            0x22, 14, 0x08, 1, 0x10, 2, 0x1A, 1, b'k', 0x22, 1, b'p', 0x28, 3, 0x30, 2,
        ],
    );
    let others = kvrpcpb::KeyError {
        already_exist: Some(kvrpcpb::AlreadyExist { key: b"k".to_vec() }),
        commit_ts_expired: Some(kvrpcpb::CommitTsExpired {
            start_ts: 1,
            attempted_commit_ts: 2,
            key: Vec::new(),
            min_commit_ts: 4,
        }),
        txn_not_found: Some(kvrpcpb::TxnNotFound {
            start_ts: 5,
            primary_key: Vec::new(),
        }),
        ..Default::default()
    };
    check(
        others,
        &[
            0x2A, 3, 0x0A, 1, b'k', // already_exist=5
            0x3A, 6, 0x08, 1, 0x10, 2, 0x20, 4, // commit_ts_expired=7
            0x42, 2, 0x08, 5, // txn_not_found=8
        ],
    );
    let batch = kvrpcpb::BatchGetResponse {
        error: Some(kvrpcpb::KeyError {
            abort: "x".to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    };
    check(batch, &[0x2A, 3, 0x1A, 1, b'x']);
}

#[test]
fn status_lock_and_resolve_fields() {
    let status = kvrpcpb::CheckTxnStatusResponse {
        lock_ttl: 3,
        commit_version: 4,
        action: kvrpcpb::Action::MinCommitTsPushed as i32,
        ..Default::default()
    };
    check(status, &[0x18, 3, 0x20, 4, 0x28, 3]);
    assert_eq!(kvrpcpb::Action::TtlExpireRollback as i32, 1);
    assert_eq!(kvrpcpb::Action::LockNotExistRollback as i32, 2);
    assert_eq!(kvrpcpb::Action::TtlExpirePessimisticRollback as i32, 4);
    assert_eq!(kvrpcpb::Action::LockNotExistDoNothing as i32, 5);
    assert_eq!(kvrpcpb::Op::Insert as i32, 4);
    assert_eq!(kvrpcpb::Op::CheckNotExists as i32, 6);
    let check_req = kvrpcpb::CheckTxnStatusRequest {
        primary_key: b"p".to_vec(),
        lock_ts: 1,
        caller_start_ts: 2,
        current_ts: 3,
        rollback_if_not_exist: true,
        force_sync_commit: true,
        resolving_pessimistic_lock: true,
        verify_is_primary: true,
        ..Default::default()
    };
    check(
        check_req,
        &[
            0x12, 1, b'p', 0x18, 1, 0x20, 2, 0x28, 3, 0x30, 1, 0x38, 1, 0x40, 1, 0x48, 1,
        ],
    );
    let lock = kvrpcpb::PessimisticLockResponse {
        values: vec![b"v".to_vec()],
        not_founds: vec![true],
        ..Default::default()
    };
    check(lock, &[0x2A, 1, b'v', 0x32, 1, 1]);
    let lock_req = kvrpcpb::PessimisticLockRequest {
        for_update_ts: 6,
        wait_timeout: -1,
        return_values: true,
        check_existence: true,
        lock_only_if_exists: true,
        ..Default::default()
    };
    let mut expected = vec![0x30, 6, 0x40];
    expected.extend([0xFF; 9]);
    expected.extend([0x01, 0x50, 1, 0x60, 1, 0x68, 1]);
    check(lock_req, &expected);
    let resolve = kvrpcpb::ResolveLockRequest {
        start_version: 1,
        commit_version: 2,
        txn_infos: vec![kvrpcpb::TxnInfo {
            txn: 3,
            status: 4,
            ..Default::default()
        }],
        keys: vec![b"k".to_vec()],
        ..Default::default()
    };
    check(
        resolve,
        &[0x10, 1, 0x18, 2, 0x22, 4, 0x08, 3, 0x10, 4, 0x2A, 1, b'k'],
    );
    let scan_lock = kvrpcpb::ScanLockRequest {
        max_version: 2,
        start_key: b"a".to_vec(),
        limit: 3,
        end_key: b"b".to_vec(),
        ..Default::default()
    };
    check(scan_lock, &[0x10, 2, 0x1A, 1, b'a', 0x20, 3, 0x2A, 1, b'b']);
    let secondary = kvrpcpb::CheckSecondaryLocksResponse {
        commit_ts: 7,
        ..Default::default()
    };
    check(secondary, &[0x20, 7]);
}

#[test]
fn gc_safe_point_fields() {
    check(
        pdpb::UpdateGcSafePointRequest {
            header: None,
            safe_point: 9,
        },
        &[0x10, 9],
    );
    check(
        pdpb::UpdateGcSafePointResponse {
            header: None,
            new_safe_point: 9,
        },
        &[0x10, 9],
    );
    check(
        pdpb::GetGcSafePointResponse {
            header: None,
            safe_point: 9,
        },
        &[0x10, 9],
    );
    check(
        kvrpcpb::GcRequest {
            context: None,
            safe_point: 9,
        },
        &[0x10, 9],
    );
}

#[test]
fn transactional_grpc_paths_match_tikv_and_pd() {
    let tikv = include_str!("../../tikv-plan-proto/src/generated/tikvpb.rs");
    for method in [
        "KvGet",
        "KvScan",
        "KvPrewrite",
        "KvPessimisticLock",
        "KVPessimisticRollback",
        "KvTxnHeartBeat",
        "KvCheckTxnStatus",
        "KvCheckSecondaryLocks",
        "KvCommit",
        "KvCleanup",
        "KvBatchGet",
        "KvBatchRollback",
        "KvScanLock",
        "KvResolveLock",
        "KvGC",
        "KvDeleteRange",
        "UnsafeDestroyRange",
    ] {
        let path = format!("\"/tikvpb.Tikv/{method}\"");
        assert!(tikv.contains(&path), "missing {path}");
    }
    let pd = include_str!("../../tikv-plan-proto/src/generated/pdpb.rs");
    for method in ["GetGCSafePoint", "UpdateGCSafePoint"] {
        let path = format!("\"/pdpb.PD/{method}\"");
        assert!(pd.contains(&path), "missing {path}");
    }
}
