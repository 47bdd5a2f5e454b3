//! Reading answers without detours: a `BatchCommandsResponse` split into its
//! request ids and the encoded answer of each (no answer decoded yet), an
//! answer decoded straight into its method's response type, and any
//! response decoded with its pairs' vector sized before the pairs arrive.
//!
//! The generated types would decode a `BatchCommandsResponse` into one
//! `response::Cmd` per answer, an enum as large as the largest response
//! (well over a kilobyte), moved several times on its way to the request
//! that waits for it; and prost grows a repeated field one push at a time,
//! copying every pair decoded so far at each growth. The wire format is
//! protobuf's: a field's key is a varint `number << 3 | wire_type`;
//! wire type 2 (length-delimited) is followed by a varint length and that
//! many bytes.

use prost::bytes::{Buf, Bytes};
use prost::encoding::decode_varint;

use crate::methods::{KvMethod, KvResponse};

/// `BatchCommandsResponse.responses` (kvproto `tikvpb.proto`).
const RESPONSES_FIELD: u64 = 1;
/// `BatchCommandsResponse.request_ids`.
const REQUEST_IDS_FIELD: u64 = 2;
/// `BatchCommandsResponse.health_feedback`.
const HEALTH_FEEDBACK_FIELD: u64 = 4;
/// The returned pairs: kvproto numbers them 2 in every response that has
/// them (`pairs` or `kvs`; a test checks each).
const PAIRS_FIELD: u64 = 2;

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH_DELIMITED: u64 = 2;
const FIXED32: u64 = 5;

/// A `BatchCommandsResponse` as its request ids and, in the same order, the
/// encoded `Response` of each (the other fields are skipped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchAnswers {
    /// `request_ids`.
    pub request_ids: Vec<u64>,
    /// `responses`, each still encoded (a slice of the message's buffer).
    pub responses: Vec<Bytes>,
    /// `health_feedback`: the store's word on its own health, which TiKV
    /// attaches to some messages only.
    pub health_feedback: Option<crate::kvrpcpb::HealthFeedback>,
}

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The bytes are not a well-formed message.
    #[error("a malformed message: {0}")]
    Malformed(&'static str),
    /// prost refused the response.
    #[error("{0}")]
    Decode(#[from] prost::DecodeError),
    /// The answer carries no response at all.
    #[error("an empty response")]
    Empty,
    /// The answer is another method's (its case's field number).
    #[error("the response of case {0}, another method's")]
    OtherCase(u32),
    /// The method has no `BatchCommands` case.
    #[error("a method without a BatchCommands case")]
    NoBatchCase,
}

/// One field of a message: its number, and its bytes when length-delimited.
enum Field {
    Bytes(u64, Bytes),
    Varint(u64, u64),
    Fixed,
}

/// Reads the next field off `buf`.
fn next_field(buf: &mut Bytes) -> Result<Field, AnswerError> {
    let key = decode_varint(buf)?;
    let number = key >> 3;
    match key & 7 {
        VARINT => Ok(Field::Varint(number, decode_varint(buf)?)),
        FIXED64 => skip(buf, 8).map(|()| Field::Fixed),
        FIXED32 => skip(buf, 4).map(|()| Field::Fixed),
        LENGTH_DELIMITED => {
            let len = usize::try_from(decode_varint(buf)?)
                .map_err(|_| AnswerError::Malformed("a length beyond memory"))?;
            if len > buf.remaining() {
                return Err(AnswerError::Malformed("a field longer than its message"));
            }
            Ok(Field::Bytes(number, buf.split_to(len)))
        }
        _ => Err(AnswerError::Malformed("a wire type without a length")),
    }
}

fn skip(buf: &mut Bytes, n: usize) -> Result<(), AnswerError> {
    if buf.remaining() < n {
        return Err(AnswerError::Malformed("a field longer than its message"));
    }
    buf.advance(n);
    Ok(())
}

/// Splits an encoded `BatchCommandsResponse` into its ids and answers
/// (slices of `buf`, no copy). Ids come packed or one by one, as protobuf
/// allows. Fails on a malformed message or when the two lists differ in
/// length.
pub fn split_batch_response(mut buf: Bytes) -> Result<BatchAnswers, AnswerError> {
    let mut answers = BatchAnswers::default();
    while buf.has_remaining() {
        match next_field(&mut buf)? {
            Field::Bytes(RESPONSES_FIELD, answer) => answers.responses.push(answer),
            Field::Bytes(REQUEST_IDS_FIELD, mut packed) => {
                while packed.has_remaining() {
                    answers.request_ids.push(decode_varint(&mut packed)?);
                }
            }
            Field::Varint(REQUEST_IDS_FIELD, id) => answers.request_ids.push(id),
            Field::Bytes(HEALTH_FEEDBACK_FIELD, feedback) => {
                answers.health_feedback = Some(prost::Message::decode(feedback)?);
            }
            _ => {}
        }
    }
    if answers.request_ids.len() != answers.responses.len() {
        return Err(AnswerError::Malformed(
            "a different number of request ids and responses",
        ));
    }
    Ok(answers)
}

/// Decodes a response of type `R`, its pairs' vector (if it has one)
/// reserved first for as many pairs as `buf` holds.
pub fn decode_response<R: KvResponse, B: Buf>(buf: B) -> Result<R, prost::DecodeError> {
    let mut response = R::default();
    decode_into(&mut response, buf)?;
    Ok(response)
}

/// [`decode_response`] into `response`, a default one (a response in a box
/// is decoded where it lies, not made elsewhere and moved in).
fn decode_into<R: KvResponse, B: Buf>(response: &mut R, buf: B) -> Result<(), prost::DecodeError> {
    if let Some(pairs) = response.pairs_mut() {
        pairs.reserve_exact(count_field(buf.chunk(), PAIRS_FIELD));
    }
    response.merge(buf)
}

/// How many length-delimited fields numbered `number` the top level of the
/// message in `bytes` holds. Stops at the first field it cannot read (the
/// count only sizes a vector; the decoder reports the error).
fn count_field(mut bytes: &[u8], number: u64) -> usize {
    let mut count = 0;
    while !bytes.is_empty() {
        let Ok(key) = decode_varint(&mut bytes) else {
            break;
        };
        let skip = match key & 7 {
            VARINT => match decode_varint(&mut bytes) {
                Ok(_) => 0,
                Err(_) => break,
            },
            FIXED64 => 8,
            FIXED32 => 4,
            LENGTH_DELIMITED => match decode_varint(&mut bytes).map(usize::try_from) {
                Ok(Ok(len)) => {
                    if key >> 3 == number {
                        count += 1;
                    }
                    len
                }
                _ => break,
            },
            _ => break,
        };
        match bytes.get(skip..) {
            Some(rest) => bytes = rest,
            None => break,
        }
    }
    count
}

/// Decodes one encoded `BatchCommandsResponse.Response` as the answer to a
/// request of method `R`: its case must be `R`'s. The response is decoded
/// in a box, where it stays: a response is large (its Region error field
/// alone takes some 600 bytes), and a client hands it on through several
/// layers, each a move of a pointer rather than of the response.
pub fn decode_batch_answer<R: KvMethod>(
    mut answer: Bytes,
) -> Result<Box<R::Response>, AnswerError> {
    let expected = R::batch_case_number().ok_or(AnswerError::NoBatchCase)?;
    let mut found = None;
    while answer.has_remaining() {
        if let Field::Bytes(number, payload) = next_field(&mut answer)? {
            // A oneof's last case on the wire wins, as prost decodes it.
            found = Some((number, payload));
        }
    }
    match found {
        None => Err(AnswerError::Empty),
        Some((number, payload)) if number == u64::from(expected) => {
            // Allocated first, then made in place: `Box::new` would make
            // the default response on the stack and copy it over.
            let mut response = Box::write(Box::new_uninit(), R::Response::default());
            decode_into(&mut *response, payload)?;
            Ok(response)
        }
        Some((number, _)) => Err(AnswerError::OtherCase(
            u32::try_from(number).unwrap_or(u32::MAX),
        )),
    }
}

/// The field number of a `oneof` case, read off its encoding.
pub(crate) fn case_number(encoded: &[u8]) -> u32 {
    let mut bytes = encoded;
    decode_varint(&mut bytes)
        .ok()
        .and_then(|key| u32::try_from(key >> 3).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvrpcpb;
    use crate::tikvpb::batch_commands_response::{response::Cmd, Response};
    use crate::tikvpb::BatchCommandsResponse;
    use prost::Message;

    fn pair(key: &[u8]) -> kvrpcpb::KvPair {
        kvrpcpb::KvPair {
            key: key.to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_batch_splits_into_ids_and_answers_that_decode_as_their_method() {
        let scan = kvrpcpb::RawScanResponse {
            kvs: vec![pair(b"a"), pair(b"b"), pair(b"c")],
            ..Default::default()
        };
        let get = kvrpcpb::RawGetResponse {
            value: b"x".to_vec(),
            ..Default::default()
        };
        let message = BatchCommandsResponse {
            request_ids: vec![7, 300],
            responses: vec![
                Response {
                    cmd: Some(Cmd::RawScan(scan.clone())),
                },
                Response {
                    cmd: Some(Cmd::RawGet(get.clone())),
                },
            ],
            transport_layer_load: 5,
            tikv_send_time_ns: 9,
            health_feedback: None,
        };
        let answers = split_batch_response(Bytes::from(message.encode_to_vec())).unwrap();
        assert_eq!(answers.request_ids, vec![7, 300]);
        assert_eq!(answers.health_feedback, None);
        let feedback = kvrpcpb::HealthFeedback {
            store_id: 3,
            feedback_seq_no: 1_700_000_000_123,
            slow_score: 80,
        };
        let with_feedback = BatchCommandsResponse {
            health_feedback: Some(feedback),
            ..message.clone()
        };
        let read = split_batch_response(Bytes::from(with_feedback.encode_to_vec())).unwrap();
        assert_eq!(read.health_feedback, Some(feedback));
        assert_eq!(read.request_ids, vec![7, 300]);
        let mut answers = answers.responses.into_iter();
        let decoded =
            decode_batch_answer::<kvrpcpb::RawScanRequest>(answers.next().unwrap()).unwrap();
        assert_eq!(*decoded, scan);
        assert_eq!(decoded.kvs.capacity(), 3, "reserved once, exactly");
        let other = answers.next().unwrap();
        assert_eq!(
            *decode_batch_answer::<kvrpcpb::RawGetRequest>(other.clone()).unwrap(),
            get
        );
        let get_case = kvrpcpb::RawGetRequest::batch_case_number().unwrap();
        assert_eq!(
            decode_batch_answer::<kvrpcpb::RawScanRequest>(other),
            Err(AnswerError::OtherCase(get_case))
        );
        assert_eq!(
            decode_batch_answer::<kvrpcpb::RawGetRequest>(Bytes::new()),
            Err(AnswerError::Empty)
        );
        assert_eq!(
            decode_batch_answer::<kvrpcpb::RawCasRequest>(Bytes::new()),
            Err(AnswerError::NoBatchCase)
        );
    }

    #[test]
    fn ids_one_by_one_are_read_as_packed_ones_and_bad_messages_are_refused() {
        // Field 2, varint (key 0x10), twice; then two empty responses.
        let unpacked = Bytes::from_static(&[0x10, 1, 0x10, 2, 0x0a, 0, 0x0a, 0]);
        let answers = split_batch_response(unpacked).unwrap();
        assert_eq!(answers.request_ids, vec![1, 2]);
        assert_eq!(answers.responses.len(), 2);
        for bad in [
            &[0x10, 1][..],       // an id without an answer
            &[0x0a, 5, 1][..],    // a response longer than the message
            &[0x0b][..],          // a group (wire type 3)
            &[0x10][..],          // a key without its value
            &[0x11, 1, 2, 3][..], // a fixed64 cut short
        ] {
            assert!(
                split_batch_response(Bytes::copy_from_slice(bad)).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_pairs_field_is_numbered_two_and_only_it_is_counted() {
        fn first_field<R: KvResponse>() -> Option<u32> {
            let mut response = R::default();
            let pairs = response.pairs_mut()?;
            pairs.push(pair(b"k"));
            Some(case_number(&response.encode_to_vec()))
        }
        macro_rules! check {
            ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
               [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
                if let Some(number) = first_field::<kvrpcpb::$resp>() {
                    assert_eq!(u64::from(number), PAIRS_FIELD, stringify!($resp));
                }
            )*};
        }
        crate::kv_methods!(check);
        let response = kvrpcpb::ScanResponse {
            pairs: vec![pair(b"a"), pair(b"b")],
            error: Some(kvrpcpb::KeyError::default()),
            ..Default::default()
        };
        assert_eq!(count_field(&response.encode_to_vec(), PAIRS_FIELD), 2);
        assert_eq!(
            count_field(&[0x12, 9], PAIRS_FIELD),
            1,
            "counts, then stops"
        );
    }
}
