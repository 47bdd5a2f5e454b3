//! The wire protocol must match kvproto byte for byte: these tests compare
//! encodings with bytes computed by hand from the field numbers in
//! `shared/docs/wire.md`, so a wrong field number or type fails here.

use prost::Message;
use tikv_plan::proto::{errorpb, kvrpcpb, metapb, pdpb};

fn check<M: Message + Default + PartialEq + std::fmt::Debug>(msg: M, expected: &[u8]) {
    assert_eq!(msg.encode_to_vec(), expected, "encoding of {msg:?}");
    assert_eq!(M::decode(expected).unwrap(), msg, "decoding back");
}

#[test]
fn peer_fields_and_role_numbers() {
    // id=1, store_id=2, role=3 (Learner=1), is_witness=4.
    check(
        metapb::Peer {
            id: 5,
            store_id: 3,
            role: metapb::PeerRole::Learner as i32,
            is_witness: true,
        },
        &[0x08, 5, 0x10, 3, 0x18, 1, 0x20, 1],
    );
    assert_eq!(metapb::PeerRole::IncomingVoter as i32, 2);
    assert_eq!(metapb::PeerRole::DemotingVoter as i32, 3);
}

#[test]
fn context_high_field_numbers() {
    let ctx = kvrpcpb::Context {
        region_id: 2,
        peer: Some(metapb::Peer {
            id: 1,
            store_id: 1,
            ..Default::default()
        }),
        is_retry_request: true,
        api_version: kvrpcpb::ApiVersion::V2 as i32,
        busy_threshold_ms: 7,
        keyspace_id: 300,
        ..Default::default()
    };
    check(
        ctx,
        &[
            0x08, 2, // region_id = 1
            0x1A, 4, 0x08, 1, 0x10, 1, // peer = 3
            0xA0, 0x01, 1, // is_retry_request = 20
            0xA8, 0x01, 2, // api_version = 21 (V2)
            0xD8, 0x01, 7, // busy_threshold_ms = 27
            0x80, 0x02, 0xAC, 0x02, // keyspace_id = 32, value 300
        ],
    );
    // replica_read = 12 and stale_read = 17 (the fields fallback must never set).
    check(
        kvrpcpb::Context {
            replica_read: true,
            stale_read: true,
            ..Default::default()
        },
        &[0x60, 1, 0x88, 0x01, 1],
    );
}

#[test]
fn server_is_busy_inside_region_error() {
    let err = errorpb::Error {
        server_is_busy: Some(errorpb::ServerIsBusy {
            reason: "x".into(),
            estimated_wait_ms: 5,
            ..Default::default()
        }),
        ..Default::default()
    };
    // server_is_busy = 6 { reason = 1, estimated_wait_ms = 3 }.
    check(err, &[0x32, 5, 0x0A, 1, b'x', 0x18, 5]);
    let not_leader = errorpb::Error {
        not_leader: Some(errorpb::NotLeader {
            region_id: 4,
            leader: None,
        }),
        ..Default::default()
    };
    check(not_leader, &[0x12, 2, 0x08, 4]);
}

#[test]
fn raw_cas_request_fields() {
    let req = kvrpcpb::RawCasRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        previous_not_exist: true,
        ttl: 10,
        ..Default::default()
    };
    check(req, &[0x12, 1, b'k', 0x1A, 1, b'v', 0x20, 1, 0x38, 10]);
    let resp = kvrpcpb::RawCasResponse {
        succeed: true,
        previous_value: b"p".to_vec(),
        ..Default::default()
    };
    check(resp, &[0x18, 1, 0x2A, 1, b'p']);
}

#[test]
fn raw_scan_end_key_is_field_seven() {
    let req = kvrpcpb::RawScanRequest {
        start_key: b"a".to_vec(),
        limit: 3,
        reverse: true,
        end_key: b"b".to_vec(),
        ..Default::default()
    };
    check(req, &[0x12, 1, b'a', 0x18, 3, 0x30, 1, 0x3A, 1, b'b']);
}

#[test]
fn pd_region_response_and_tso() {
    let resp = pdpb::GetRegionResponse {
        header: Some(pdpb::ResponseHeader {
            cluster_id: 1,
            error: None,
        }),
        leader: Some(metapb::Peer {
            id: 9,
            store_id: 2,
            ..Default::default()
        }),
        ..Default::default()
    };
    check(resp, &[0x0A, 2, 0x08, 1, 0x1A, 4, 0x08, 9, 0x10, 2]);
    let tso = pdpb::TsoResponse {
        count: 1,
        timestamp: Some(pdpb::Timestamp {
            physical: 1000,
            logical: 3,
            suffix_bits: 0,
        }),
        ..Default::default()
    };
    check(tso, &[0x10, 1, 0x1A, 5, 0x08, 0xE8, 0x07, 0x10, 3]);
    assert_eq!(pdpb::ErrorType::RegionNotFound as i32, 6);
}

#[test]
fn grpc_paths_match_tikv_and_pd() {
    let tikv = include_str!(concat!(env!("OUT_DIR"), "/tikvpb.rs"));
    for method in [
        "RawGet",
        "RawBatchGet",
        "RawPut",
        "RawBatchPut",
        "RawDelete",
        "RawBatchDelete",
        "RawScan",
        "RawDeleteRange",
        "RawBatchScan",
        "RawGetKeyTTL",
        "RawCompareAndSwap",
    ] {
        let path = format!("\"/tikvpb.Tikv/{method}\"");
        assert!(tikv.contains(&path), "missing {path}");
    }
    let pd = include_str!(concat!(env!("OUT_DIR"), "/pdpb.rs"));
    for method in [
        "GetMembers",
        "Tso",
        "GetStore",
        "GetAllStores",
        "GetRegion",
        "GetRegionByID",
    ] {
        let path = format!("\"/pdpb.PD/{method}\"");
        assert!(pd.contains(&path), "missing {path}");
    }
}
