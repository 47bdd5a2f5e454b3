//! The wire protocol must match kvproto byte for byte: these tests compare
//! encodings with bytes computed by hand from the field numbers in
//! `shared/docs/wire.md`, so a wrong field number or type fails here.

use prost::Message;
use tikv_plan::proto::{errorpb, kvrpcpb, metapb, pdpb, tikvpb};

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
    let tikv = include_str!("../../tikv-plan-proto/src/generated/tikvpb.rs");
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
        "BatchCommands",
    ] {
        let path = format!("\"/tikvpb.Tikv/{method}\"");
        assert!(tikv.contains(&path), "missing {path}");
    }
    let pd = include_str!("../../tikv-plan-proto/src/generated/pdpb.rs");
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

#[test]
fn batch_commands_request_fields_and_cases() {
    use tikvpb::batch_commands_request::{request::Cmd, Request};
    // requests = 1 (repeated), request_ids = 2 (packed), client_send_time_ns
    // = 3; the RawGet case is 13, CheckSecondaryLocks 33 (kvproto).
    check(
        tikvpb::BatchCommandsRequest {
            requests: vec![
                Request {
                    cmd: Some(Cmd::RawGet(kvrpcpb::RawGetRequest {
                        key: b"k".to_vec(),
                        ..Default::default()
                    })),
                },
                Request {
                    cmd: Some(Cmd::CheckSecondaryLocks(
                        kvrpcpb::CheckSecondaryLocksRequest {
                            start_version: 1,
                            ..Default::default()
                        },
                    )),
                },
            ],
            request_ids: vec![7, 300],
            client_send_time_ns: 5,
        },
        &[
            0x0A, 5, // requests[0], 5 bytes
            0x6A, 3, 0x12, 1, b'k', // RawGet = 13 { key = 2 }
            0x0A, 5, // requests[1], 5 bytes
            0x8A, 0x02, 2, 0x18, 1, // CheckSecondaryLocks = 33 { start_version = 3 }
            0x12, 3, 7, 0xAC, 0x02, // request_ids = 2, packed [7, 300]
            0x18, 5, // client_send_time_ns = 3
        ],
    );
}

#[test]
fn batch_commands_response_fields_and_cases() {
    use tikvpb::batch_commands_response::{response::Cmd, Response};
    // responses = 1, request_ids = 2, transport_layer_load = 3,
    // health_feedback = 4, tikv_send_time_ns = 5; RawPut is case 15, Get case 1.
    check(
        tikvpb::BatchCommandsResponse {
            responses: vec![
                Response {
                    cmd: Some(Cmd::RawPut(kvrpcpb::RawPutResponse {
                        error: "e".to_owned(),
                        ..Default::default()
                    })),
                },
                Response {
                    cmd: Some(Cmd::Get(kvrpcpb::GetResponse::default())),
                },
            ],
            request_ids: vec![9, 1],
            transport_layer_load: 2,
            health_feedback: Some(kvrpcpb::HealthFeedback {
                store_id: 7,
                feedback_seq_no: 8,
                slow_score: 80,
            }),
            tikv_send_time_ns: 4,
        },
        &[
            0x0A, 5, // responses[0]
            0x7A, 3, 0x12, 1, b'e', // RawPut = 15 { error = 2 }
            0x0A, 2, 0x0A, 0, // responses[1]: Get = 1, empty
            0x12, 2, 9, 1, // request_ids = 2, packed
            0x18, 2, // transport_layer_load = 3
            // health_feedback = 4 { store_id = 1, feedback_seq_no = 2,
            // slow_score = 3 }
            0x22, 6, 0x08, 7, 0x10, 8, 0x18, 80, 0x28, 4, // tikv_send_time_ns = 5
        ],
    );
    // Other case numbers this crate sends, checked through their tags.
    let tag_of = |cmd: Cmd| Response { cmd: Some(cmd) }.encode_to_vec()[0..2].to_vec();
    assert_eq!(tag_of(Cmd::Prewrite(Default::default()))[0], 3 << 3 | 2);
    assert_eq!(tag_of(Cmd::Commit(Default::default()))[0], 4 << 3 | 2);
    assert_eq!(
        tag_of(Cmd::BatchRollback(Default::default()))[0],
        8 << 3 | 2
    );
    assert_eq!(
        tag_of(Cmd::RawBatchScan(Default::default()))[0],
        21 << 3 | 2
    );
    assert_eq!(
        tag_of(Cmd::PessimisticLock(Default::default())),
        vec![0xBA, 0x01] // 23 << 3 | 2 = 186
    );
    assert_eq!(
        tag_of(Cmd::TxnHeartBeat(Default::default())),
        vec![0xD2, 0x01] // 26 << 3 | 2 = 210
    );
}
