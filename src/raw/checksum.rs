//! TiKV's raw range checksum (`RawChecksum`, algorithm `Crc64_Xor`): the XOR
//! over every pair of the CRC-64 of the key followed by the value, with the
//! pair count and the total key and value bytes.

use crate::proto::kvrpcpb;
use crate::request::{collect_in_order, HasKeyErrors, KvRequest, Merge};
use crate::Result;
pub use tikv_plan_proto::checksum::RawChecksum;

/// A `RawChecksum` request for the ranges `[start, end)` (empty end: the end
/// of the key space), with TiKV's only algorithm, `Crc64_Xor`.
pub fn new_raw_checksum_request(ranges: Vec<(Vec<u8>, Vec<u8>)>) -> kvrpcpb::RawChecksumRequest {
    kvrpcpb::RawChecksumRequest {
        context: None,
        algorithm: kvrpcpb::ChecksumAlgorithm::Crc64Xor as i32,
        ranges: ranges
            .into_iter()
            .map(|(start_key, end_key)| kvrpcpb::KeyRange { start_key, end_key })
            .collect(),
    }
}

impl KvRequest for kvrpcpb::RawChecksumRequest {
    type Response = kvrpcpb::RawChecksumResponse;
}

impl crate::request::TypedCall for kvrpcpb::RawChecksumRequest {
    fn dispatch_typed<'a>(
        &'a mut self,
        grpc: &'a crate::store::GrpcChannel,
        timeout: Option<std::time::Duration>,
    ) -> impl std::future::Future<Output = Option<crate::Result<Self::Response>>> + Send + 'a {
        crate::store::send_typed(self, grpc, timeout)
    }
}

/// One shard per Region: the pieces of the ranges inside it.
/// Merges the Regions' answers into the range's checksum.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeChecksum;

impl Merge<kvrpcpb::RawChecksumResponse> for MergeChecksum {
    type Out = RawChecksum;

    fn merge(&self, input: Vec<Result<kvrpcpb::RawChecksumResponse>>) -> Result<RawChecksum> {
        let mut sum = RawChecksum::default();
        for mut response in collect_in_order(input)? {
            if let Some(errors) = response.key_errors() {
                return Err(crate::request::strongest_shard_error(errors));
            }
            sum.merge(RawChecksum {
                crc64_xor: response.checksum,
                total_kvs: response.total_kvs,
                total_bytes: response.total_bytes,
            });
        }
        Ok(sum)
    }
}
