//! **beyond** Request tagging: the resource group, request source,
//! transaction source and resource group tag TiKV reads from every
//! request's `Context`, and the server-visible deadline of a read.
//!
//! Nothing is sent unless the caller sets it (client-rust sends none of
//! these fields).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::proto::kvrpcpb;

/// Where a request comes from, in client-go's form: the wire string is
/// `{internal|external}_{type}`, with `_{explicit type}` appended when one
/// is set and differs from the type (`external_Select`, `internal_gc`,
/// `external_Insert_lightning`). TiKV keeps its per-source gRPC metrics
/// (`tikv_grpc_request_source_counter_vec`) by this whole string, and
/// resource control limits background tasks by its last `_`-separated part.
///
/// ```
/// use tikv_plan::RequestSource;
/// assert_eq!(RequestSource::external("Get").to_string(), "external_Get");
/// assert_eq!(
///     RequestSource::internal("stats").with_explicit_type("br").to_string(),
///     "internal_stats_br"
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RequestSource {
    /// `internal_` (the system's own work) rather than `external_` (a
    /// user's request).
    pub internal: bool,
    /// The type of work (`Get`, `Select`, `gc`, ...). Empty with no
    /// explicit type, the source is client-go's `unknown`.
    pub source_type: String,
    /// The explicit type (`br`, `lightning`, `ddl`, `background`, ...),
    /// appended when set and different from the type.
    pub explicit_type: Option<String>,
}

impl RequestSource {
    /// A user's request of type `source_type` (`external_{type}`).
    pub fn external(source_type: impl Into<String>) -> Self {
        RequestSource {
            internal: false,
            source_type: source_type.into(),
            explicit_type: None,
        }
    }

    /// The system's own work of type `source_type` (`internal_{type}`).
    pub fn internal(source_type: impl Into<String>) -> Self {
        RequestSource {
            internal: true,
            source_type: source_type.into(),
            explicit_type: None,
        }
    }

    /// Appends an explicit type (`br`, `lightning`, `background`, ...).
    #[must_use]
    pub fn with_explicit_type(mut self, explicit_type: impl Into<String>) -> Self {
        self.explicit_type = Some(explicit_type.into());
        self
    }
}

/// The wire form, as client-go's `RequestSource.GetRequestSource` builds
/// it: `unknown` when neither type is set.
impl fmt::Display for RequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let explicit = self.explicit_type.as_deref().unwrap_or("");
        if self.source_type.is_empty() && explicit.is_empty() {
            return f.write_str("unknown");
        }
        let origin = if self.internal {
            "internal"
        } else {
            "external"
        };
        let source = if self.source_type.is_empty() {
            "unknown"
        } else {
            &self.source_type
        };
        write!(f, "{origin}_{source}")?;
        if !explicit.is_empty() && explicit != self.source_type {
            write!(f, "_{explicit}")?;
        }
        Ok(())
    }
}

/// **beyond** The tags TiKV reads from a request's `Context`: its resource
/// group (`resource_control_context.resource_group_name`, which TiKV's
/// resource control charges and throttles), its source (`request_source`,
/// per-source metrics and background-task limits), the transaction's source
/// (`txn_source`, which TiCDC reads to tell replicated writes apart) and an
/// opaque tag (`resource_group_tag`, TopSQL's key). Unset fields are not
/// sent; a client sends none by default, as client-rust does.
///
/// Set client-wide on [`Config`](crate::Config)
/// ([`with_resource_group`](crate::Config::with_resource_group), ...), per
/// transaction on [`TransactionOptions`](crate::TransactionOptions) (its
/// fields win over the client's), or on one plan with
/// [`PlanBuilder::request_tags`](crate::request::PlanBuilder::request_tags).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RequestTags {
    /// The resource group the requests are charged to.
    pub resource_group: Option<String>,
    /// Where the requests come from.
    pub request_source: Option<RequestSource>,
    /// The transaction's source (`Context.txn_source`; 0, the default, is
    /// not sent). Ignored by raw requests' meaning in TiKV but sent as set.
    pub txn_source: u64,
    /// An opaque tag for the caller's own attribution (TopSQL).
    pub resource_group_tag: Option<Vec<u8>>,
}

impl RequestTags {
    /// No tags: nothing sent.
    pub fn new() -> Self {
        Self::default()
    }

    /// Charges requests to resource group `name`.
    #[must_use]
    pub fn with_resource_group(mut self, name: impl Into<String>) -> Self {
        self.resource_group = Some(name.into());
        self
    }

    /// Sets where requests come from.
    #[must_use]
    pub fn with_request_source(mut self, source: RequestSource) -> Self {
        self.request_source = Some(source);
        self
    }

    /// Sets the transaction source (0: not sent).
    #[must_use]
    pub fn with_txn_source(mut self, txn_source: u64) -> Self {
        self.txn_source = txn_source;
        self
    }

    /// Sets the opaque resource group tag.
    #[must_use]
    pub fn with_resource_group_tag(mut self, tag: impl Into<Vec<u8>>) -> Self {
        self.resource_group_tag = Some(tag.into());
        self
    }

    /// These tags, each unset one taken from `fallback`.
    pub(crate) fn or(&self, fallback: &RequestTags) -> RequestTags {
        RequestTags {
            resource_group: self
                .resource_group
                .clone()
                .or_else(|| fallback.resource_group.clone()),
            request_source: self
                .request_source
                .clone()
                .or_else(|| fallback.request_source.clone()),
            txn_source: if self.txn_source != 0 {
                self.txn_source
            } else {
                fallback.txn_source
            },
            resource_group_tag: self
                .resource_group_tag
                .clone()
                .or_else(|| fallback.resource_group_tag.clone()),
        }
    }

    /// The context fields to send, built once (the request source's
    /// string included) for every request that carries them.
    pub(crate) fn wire(&self) -> WireTags {
        WireTags {
            no_server_deadline: false,
            resource_control: self.resource_group.as_ref().map(|name| {
                kvrpcpb::ResourceControlContext {
                    resource_group_name: name.clone(),
                    ..Default::default()
                }
            }),
            request_source: self
                .request_source
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            txn_source: self.txn_source,
            resource_group_tag: self.resource_group_tag.clone().unwrap_or_default(),
        }
    }
}

/// [`RequestTags`] as the context fields they set, computed once per
/// client, transaction or plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WireTags {
    /// Reads leave `max_execution_duration_ms` out (`Config::server_deadlines`
    /// off); not a tag, carried here because every plan takes these.
    pub(crate) no_server_deadline: bool,
    resource_control: Option<kvrpcpb::ResourceControlContext>,
    request_source: String,
    txn_source: u64,
    resource_group_tag: Vec<u8>,
}

impl WireTags {
    /// Nothing to set (the default): the request is left as it is.
    pub(crate) fn is_empty(&self) -> bool {
        self.resource_control.is_none()
            && self.request_source.is_empty()
            && self.txn_source == 0
            && self.resource_group_tag.is_empty()
    }

    /// Sets the tags on `context`, leaving every unset one as it is.
    pub(crate) fn apply(&self, context: &mut kvrpcpb::Context) {
        if let Some(group) = &self.resource_control {
            context.resource_control_context = Some(group.clone());
        }
        if !self.request_source.is_empty() {
            context.request_source.clone_from(&self.request_source);
        }
        if self.txn_source != 0 {
            context.txn_source = self.txn_source;
        }
        if !self.resource_group_tag.is_empty() {
            context
                .resource_group_tag
                .clone_from(&self.resource_group_tag);
        }
    }
}

/// The `ServerIsBusy` reason TiKV gives for a request whose
/// `Context.max_execution_duration_ms` passed before it ran
/// (`tikv_util::deadline::set_deadline_exceeded_busy_error`).
pub(crate) const DEADLINE_EXCEEDED_REASON: &str = "deadline is exceeded";

/// The `Context.max_execution_duration_ms` of a read whose attempt may
/// take `left` more: whole milliseconds rounded up, so TiKV's deadline
/// (counted from when the request arrives) never ends before the client's
/// own and TiKV never answers a read the client still waits for with a
/// deadline error; at least 1 (0 means "no limit" to TiKV).
pub(crate) fn server_deadline_ms(left: Duration) -> u64 {
    let nanos = left.as_nanos();
    let ms = nanos.div_ceil(1_000_000).max(1);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_sources_are_written_as_client_go_writes_them() {
        assert_eq!(RequestSource::external("Get").to_string(), "external_Get");
        assert_eq!(RequestSource::internal("gc").to_string(), "internal_gc");
        assert_eq!(RequestSource::default().to_string(), "unknown");
        assert_eq!(
            RequestSource::external("")
                .with_explicit_type("br")
                .to_string(),
            "external_unknown_br"
        );
        // The explicit type is left out when it repeats the type.
        assert_eq!(
            RequestSource::internal("stats")
                .with_explicit_type("stats")
                .to_string(),
            "internal_stats"
        );
        assert_eq!(
            RequestSource::external("Insert")
                .with_explicit_type("lightning")
                .to_string(),
            "external_Insert_lightning"
        );
    }

    #[test]
    fn unset_tags_leave_the_context_alone() {
        let wire = RequestTags::default().wire();
        assert!(wire.is_empty());
        let mut context = kvrpcpb::Context {
            request_source: "kept".to_owned(),
            ..Default::default()
        };
        wire.apply(&mut context);
        assert_eq!(context.request_source, "kept");
        assert_eq!(context.resource_control_context, None);
    }

    #[test]
    fn set_tags_land_in_their_fields() {
        let wire = RequestTags::new()
            .with_resource_group("rg1")
            .with_request_source(RequestSource::external("Get"))
            .with_txn_source(7)
            .with_resource_group_tag(b"t".to_vec())
            .wire();
        let mut context = kvrpcpb::Context::default();
        wire.apply(&mut context);
        assert_eq!(
            context
                .resource_control_context
                .map(|r| r.resource_group_name),
            Some("rg1".to_owned())
        );
        assert_eq!(context.request_source, "external_Get");
        assert_eq!(context.txn_source, 7);
        assert_eq!(context.resource_group_tag, b"t");
    }

    #[test]
    fn a_transaction_overrides_the_client_field_by_field() {
        let client = RequestTags::new()
            .with_resource_group("client")
            .with_request_source(RequestSource::external("Txn"))
            .with_txn_source(1);
        let txn = RequestTags::new().with_resource_group("txn");
        let merged = txn.or(&client);
        assert_eq!(merged.resource_group.as_deref(), Some("txn"));
        assert_eq!(merged.request_source, client.request_source);
        assert_eq!(merged.txn_source, 1);
        assert_eq!(merged.resource_group_tag, None);
    }

    #[test]
    fn the_server_deadline_rounds_up_and_is_never_zero() {
        assert_eq!(server_deadline_ms(Duration::from_millis(250)), 250);
        assert_eq!(server_deadline_ms(Duration::from_micros(250_001)), 251);
        assert_eq!(server_deadline_ms(Duration::from_micros(1)), 1);
        assert_eq!(server_deadline_ms(Duration::ZERO), 1);
        assert_eq!(server_deadline_ms(Duration::MAX), u64::MAX);
    }
}
