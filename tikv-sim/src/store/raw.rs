//! The raw methods of the simulated store: each checks its keys against
//! the Region and runs on the Region's raw data (`data.rs`). Keys are
//! checked in the form the store keeps them in ([`RawKeys`]), as TiKV
//! checks `F::encode_raw_key(key)`: as sent in API v1, memcomparable-encoded
//! in API v2, where a `KeyNotInRegion` carries the encoded key.

use tokio::time::Instant;

use super::{scan_bounds, scan_start_outside, StoreCommand};
use crate::data::{column_family, RawKeys};
use crate::proto::{kvrpcpb, metapb};
use crate::state::SimRegion;
use tikv_plan_proto::meta::key_in_region;

/// The first of `keys` whose stored form lies outside the Region, in that
/// form (what TiKV reports).
fn first_stored_outside<'a>(
    region: &metapb::Region,
    raw: RawKeys,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    keys.into_iter()
        .map(|k| raw.stored(k))
        .find(|k| !key_in_region(region, k))
        .map(|k| k.into_owned())
}

/// A scan's first bound, checked in its stored form (see
/// [`scan_start_outside`]).
fn stored_scan_start_outside(
    region: &metapb::Region,
    raw: RawKeys,
    start: &[u8],
    reverse: bool,
) -> Option<Vec<u8>> {
    scan_start_outside(region, &raw.stored_bound(start), reverse)
}

/// The stored range `[low, high)` of a scan of the Region's data, clamped
/// to the Region.
fn stored_scan_bounds(
    region: &SimRegion,
    start: &[u8],
    end: &[u8],
    reverse: bool,
) -> (Vec<u8>, Vec<u8>) {
    let keys = region.data.keys();
    let (start, end) = (keys.stored_bound(start), keys.stored_bound(end));
    scan_bounds(&region.meta, &start, &end, reverse)
}

fn pairs(kvs: Vec<(Vec<u8>, Vec<u8>)>, key_only: bool) -> Vec<kvrpcpb::KvPair> {
    kvs.into_iter()
        .map(|(key, value)| kvrpcpb::KvPair {
            error: None,
            key,
            value: if key_only { Vec::new() } else { value },
        })
        .collect()
}

impl StoreCommand for kvrpcpb::RawGetRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let value = data.get(column_family(&self.cf)?, &self.key, now);
        Ok(kvrpcpb::RawGetResponse {
            not_found: value.is_none(),
            value: value.unwrap_or_default(),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawBatchGetRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, self.keys.iter().map(Vec::as_slice))
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        let found = self
            .keys
            .iter()
            .filter_map(|k| data.get(cf, k, now).map(|v| (k.clone(), v)))
            .collect();
        Ok(kvrpcpb::RawBatchGetResponse {
            pairs: pairs(found, false),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawPutRequest {
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        api == kvrpcpb::ApiVersion::V2
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        data.put(
            column_family(&self.cf)?,
            self.key.clone(),
            self.value.clone(),
            self.ttl,
            now,
        );
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawBatchPutRequest {
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        api == kvrpcpb::ApiVersion::V2
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, self.pairs.iter().map(|p| p.key.as_slice()))
    }
    #[allow(deprecated)]
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        // kvproto: exactly one TTL applies to every pair; otherwise one per
        // pair, or none.
        let one_for_all = match self.ttls.as_slice() {
            [] => Some(self.ttl),
            [ttl] => Some(*ttl),
            ttls if ttls.len() == self.pairs.len() => None,
            ttls => {
                return Err(format!(
                    "{} ttls given for {} pairs: give one TTL per pair, one for all, or none",
                    ttls.len(),
                    self.pairs.len()
                ))
            }
        };
        for (i, pair) in self.pairs.iter().enumerate() {
            let ttl = one_for_all.unwrap_or_else(|| self.ttls[i]);
            data.put(cf, pair.key.clone(), pair.value.clone(), ttl, now);
        }
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawDeleteRequest {
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        api == kvrpcpb::ApiVersion::V2
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        data.delete(column_family(&self.cf)?, &self.key);
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawBatchDeleteRequest {
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        api == kvrpcpb::ApiVersion::V2
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, self.keys.iter().map(Vec::as_slice))
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        for key in &self.keys {
            data.delete(cf, key);
        }
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawScanRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        stored_scan_start_outside(region, raw, &self.start_key, self.reverse)
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let cf = column_family(&self.cf)?;
        let (low, high) = stored_scan_bounds(region, &self.start_key, &self.end_key, self.reverse);
        let kvs = region
            .data
            .scan(cf, &low, &high, self.limit as usize, self.reverse, now);
        Ok(kvrpcpb::RawScanResponse {
            kvs: pairs(kvs, self.key_only),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawBatchScanRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| stored_scan_start_outside(region, raw, &r.start_key, self.reverse))
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let cf = column_family(&self.cf)?;
        let mut kvs = Vec::new();
        for range in &self.ranges {
            let (low, high) =
                stored_scan_bounds(region, &range.start_key, &range.end_key, self.reverse);
            let data = &region.data;
            kvs.extend(pairs(
                data.scan(cf, &low, &high, self.each_limit as usize, self.reverse, now),
                self.key_only,
            ));
        }
        Ok(kvrpcpb::RawBatchScanResponse {
            kvs,
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawDeleteRangeRequest {
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        let (start, end) = (
            raw.stored_bound(&self.start_key),
            raw.stored_bound(&self.end_key),
        );
        if !key_in_region(region, &start) {
            return Some(start.into_owned());
        }
        // The end may equal the Region's end; an unbounded end only fits the
        // last Region.
        let end_fits = if region.end_key.is_empty() {
            true
        } else {
            !end.is_empty() && *end <= *region.end_key
        };
        (!end_fits).then(|| end.into_owned())
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        if !self.end_key.is_empty() && self.start_key > self.end_key {
            return Err("delete range start key is after its end key".to_owned());
        }
        data.delete_range(cf, &self.start_key, &self.end_key);
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawCasRequest {
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        api == kvrpcpb::ApiVersion::V2
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        let expected = (!self.previous_not_exist).then_some(self.previous_value.as_slice());
        let (succeed, previous) = data.compare_and_swap(
            cf,
            self.key.clone(),
            expected,
            self.value.clone(),
            self.ttl,
            now,
        );
        Ok(kvrpcpb::RawCasResponse {
            succeed,
            previous_not_exist: previous.is_none(),
            previous_value: previous.unwrap_or_default(),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawGetKeyTtlRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        first_stored_outside(region, raw, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let ttl = data.ttl(column_family(&self.cf)?, &self.key, now);
        Ok(kvrpcpb::RawGetKeyTtlResponse {
            not_found: ttl.is_none(),
            ttl: ttl.unwrap_or(0),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawChecksumRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| stored_scan_start_outside(region, raw, &r.start_key, false))
    }
    /// TiKV's `Crc64_Xor` over the default column family, on the user keys
    /// and values ([`tikv_plan_proto::checksum::RawChecksum`]).
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let cf = column_family("")?;
        let mut sum = tikv_plan_proto::checksum::RawChecksum::default();
        for range in &self.ranges {
            let (low, high) = stored_scan_bounds(region, &range.start_key, &range.end_key, false);
            for (key, value) in region.data.scan(cf, &low, &high, usize::MAX, false, now) {
                sum.add(&key, &value);
            }
        }
        Ok(kvrpcpb::RawChecksumResponse {
            checksum: sum.crc64_xor,
            total_kvs: sum.total_kvs,
            total_bytes: sum.total_bytes,
            ..Default::default()
        })
    }
}

/// The coprocessor plugin every simulated store carries (TiKV loads its
/// plugins from files; the simulator has this one built in).
pub const COPROCESSOR_PLUGIN: &str = "sim-count";
/// [`COPROCESSOR_PLUGIN`]'s version, matched against the request's semver
/// requirement.
pub const COPROCESSOR_PLUGIN_VERSION: &str = "1.2.0";

impl StoreCommand for kvrpcpb::RawCoprocessorRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(0)
    }
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| stored_scan_start_outside(region, raw, &r.start_key, false))
    }
    /// [`COPROCESSOR_PLUGIN`] answers `<data>:<count>`: the request's own
    /// data (built per Region by the client) and how many keys of the
    /// default column family its ranges hold in this Region. Another name,
    /// a version requirement the plugin does not meet, or one that does not
    /// parse is the response's `error`, as in TiKV.
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        if self.copr_name != COPROCESSOR_PLUGIN {
            return Err(format!(
                "no coprocessor plugin named {:?} is loaded",
                self.copr_name
            ));
        }
        let requirement = semver::VersionReq::parse(&self.copr_version_req).map_err(|e| {
            format!(
                "the version requirement {:?} does not parse: {e}",
                self.copr_version_req
            )
        })?;
        let version = semver::Version::parse(COPROCESSOR_PLUGIN_VERSION)
            .map_err(|e| format!("the plugin's own version does not parse: {e}"))?;
        if !requirement.matches(&version) {
            return Err(format!(
                "coprocessor plugin {COPROCESSOR_PLUGIN} {version} does not match {:?}",
                self.copr_version_req
            ));
        }
        let cf = column_family("")?;
        let mut count = 0usize;
        for range in &self.ranges {
            let (low, high) = stored_scan_bounds(region, &range.start_key, &range.end_key, false);
            count += region
                .data
                .scan(cf, &low, &high, usize::MAX, false, now)
                .len();
        }
        let mut data = self.data.clone();
        data.extend_from_slice(format!(":{count}").as_bytes());
        Ok(kvrpcpb::RawCoprocessorResponse {
            data,
            ..Default::default()
        })
    }
}
