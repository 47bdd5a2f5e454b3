//! Writing a `BatchCommandsRequest` without detours: each sub-request is
//! encoded once, straight from its own request type, into the bytes of its
//! entry in the message; a message is then those entries and the ids.
//!
//! The generated types would have each request cloned into a
//! `request::Cmd`, an enum as large as the largest request (over half a
//! kilobyte), moved through the queue into the message and encoded there.
//! The wire format is protobuf's (see [`answers`](crate::answers)); prost's
//! own encoding of the same message has the same bytes, which the tests
//! check for every method with a batch case.

use prost::bytes::BufMut;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

use crate::methods::KvMethod;

/// `BatchCommandsRequest.requests` (kvproto `tikvpb.proto`).
const REQUESTS_FIELD: u32 = 1;
/// `BatchCommandsRequest.request_ids` (packed, as proto3 writes it).
const REQUEST_IDS_FIELD: u32 = 2;

/// The entry of `BatchCommandsRequest.requests` for one request: the
/// field's key and length, then the `Request` message whose case is the
/// request's method. `None` when the method has no batch case.
pub fn encode_batch_entry<R: KvMethod>(request: &R) -> Option<Vec<u8>> {
    let case = R::batch_request_case_number()?;
    let body = request.encoded_len();
    let message = key_len(case) + encoded_len_varint(body as u64) + body;
    let entry = key_len(REQUESTS_FIELD) + encoded_len_varint(message as u64) + message;
    let mut buf = Vec::with_capacity(entry);
    encode_key(REQUESTS_FIELD, WireType::LengthDelimited, &mut buf);
    encode_varint(message as u64, &mut buf);
    encode_key(case, WireType::LengthDelimited, &mut buf);
    encode_varint(body as u64, &mut buf);
    request.encode_raw(&mut buf);
    Some(buf)
}

/// How many bytes [`write_batch_request`] writes for these entries and ids.
pub fn batch_request_len<E: AsRef<[u8]>>(entries: &[E], request_ids: &[u64]) -> usize {
    let entries: usize = entries.iter().map(|e| e.as_ref().len()).sum();
    entries + ids_len(request_ids)
}

/// Writes a `BatchCommandsRequest` of these entries (from
/// [`encode_batch_entry`]) and their ids, in the same order.
pub fn write_batch_request<E: AsRef<[u8]>, B: BufMut>(
    entries: &[E],
    request_ids: &[u64],
    buf: &mut B,
) {
    for entry in entries {
        buf.put_slice(entry.as_ref());
    }
    if request_ids.is_empty() {
        return;
    }
    encode_key(REQUEST_IDS_FIELD, WireType::LengthDelimited, buf);
    encode_varint(packed_len(request_ids) as u64, buf);
    for id in request_ids {
        encode_varint(*id, buf);
    }
}

/// The packed ids' bytes, without their key and length.
fn packed_len(request_ids: &[u64]) -> usize {
    request_ids.iter().map(|id| encoded_len_varint(*id)).sum()
}

/// The ids' field, with its key and length (nothing when there are none).
fn ids_len(request_ids: &[u64]) -> usize {
    if request_ids.is_empty() {
        return 0;
    }
    let packed = packed_len(request_ids);
    key_len(REQUEST_IDS_FIELD) + encoded_len_varint(packed as u64) + packed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvrpcpb;
    use crate::tikvpb::{batch_commands_request, BatchCommandsRequest};
    use prost::Message;

    fn context() -> kvrpcpb::Context {
        kvrpcpb::Context {
            region_id: 7,
            region_epoch: Some(crate::metapb::RegionEpoch {
                conf_ver: 3,
                version: 300,
            }),
            peer: Some(crate::metapb::Peer {
                id: 70,
                store_id: 2,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// One request of each method with a batch case, with its context set
    /// and its other fields left as they are, encoded both ways: each
    /// alone, and all of them in one message with large and small ids.
    #[test]
    fn entries_encode_as_prost_encodes_the_same_message() {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let mut requests = Vec::new();
        let mut ids = Vec::new();
        macro_rules! each {
            ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
               [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
                let mut request = kvrpcpb::$req::default();
                *request.context_mut() = Some(context());
                match request.to_batch() {
                    None => assert!(encode_batch_entry(&request).is_none(), $grpc),
                    Some(cmd) => {
                        let entry = encode_batch_entry(&request).expect($grpc);
                        let id = (entries.len() as u64) << 40 | entries.len() as u64;
                        let alone = BatchCommandsRequest {
                            requests: vec![batch_commands_request::Request { cmd: Some(cmd.clone()) }],
                            request_ids: vec![id],
                            ..Default::default()
                        };
                        let mut written = Vec::new();
                        write_batch_request(&[&entry], &[id], &mut written);
                        assert_eq!(written, alone.encode_to_vec(), $grpc);
                        assert_eq!(batch_request_len(&[&entry], &[id]), written.len(), $grpc);
                        entries.push(entry);
                        requests.push(batch_commands_request::Request { cmd: Some(cmd) });
                        ids.push(id);
                    }
                }
            )*};
        }
        crate::kv_methods!(each);
        assert!(
            entries.len() > 20,
            "only {} methods have a batch case",
            entries.len()
        );

        let whole = BatchCommandsRequest {
            requests,
            request_ids: ids.clone(),
            ..Default::default()
        };
        let mut written = Vec::new();
        write_batch_request(&entries, &ids, &mut written);
        assert_eq!(written, whole.encode_to_vec());
        assert_eq!(batch_request_len(&entries, &ids), written.len());
        assert_eq!(BatchCommandsRequest::decode(&written[..]).unwrap(), whole);
    }

    #[test]
    fn a_message_without_entries_is_empty() {
        let mut written = Vec::new();
        write_batch_request::<Vec<u8>, _>(&[], &[], &mut written);
        assert!(written.is_empty());
        assert_eq!(batch_request_len::<Vec<u8>>(&[], &[]), 0);
    }
}
