//! The tracing spans of a request: a `request` span (method, Regions,
//! outcome) with one `attempt` span per candidate tried (method, Region,
//! store, peer, attempt number, role, outcome), seen by a small recording
//! subscriber while a request goes through voter fallback on the
//! simulated cluster.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// A span as recorded: name, parent, fields (as text).
#[derive(Debug, Clone)]
struct SpanRecord {
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields<'a>(Option<&'a mut BTreeMap<String, String>>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if let Some(map) = self.0.as_mut() {
            map.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(map) = self.0.as_mut() {
            map.insert(field.name().to_owned(), value.to_owned());
        }
    }
}

/// Records every span with its parent and fields, and every event's
/// message; tracks the entered spans per thread so `Span::current()` and
/// contextual parents work.
#[derive(Default, Clone)]
struct Recorder {
    spans: Arc<Mutex<BTreeMap<u64, (SpanRecord, &'static Metadata<'static>)>>>,
    events: Arc<Mutex<Vec<(tracing::Level, String)>>>,
    next: Arc<AtomicU64>,
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let parent = if attrs.is_contextual() {
            STACK.with(|s| s.borrow().last().copied())
        } else {
            attrs.parent().map(Id::into_u64)
        };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(Some(&mut fields)));
        let record = SpanRecord {
            name: attrs.metadata().name(),
            parent,
            fields,
        };
        self.spans
            .lock()
            .unwrap()
            .insert(id, (record, attrs.metadata()));
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some((record, _)) = self.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(Some(&mut record.fields)));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(Some(&mut fields)));
        let message = fields.remove("message").unwrap_or_default();
        self.events
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message));
    }

    fn enter(&self, span: &Id) {
        STACK.with(|s| s.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            if let Some(pos) = s.iter().rposition(|id| *id == span.into_u64()) {
                s.remove(pos);
            }
        });
    }

    fn current_span(&self) -> Current {
        let top = STACK.with(|s| s.borrow().last().copied());
        match top.and_then(|id| self.spans.lock().unwrap().get(&id).map(|(_, m)| (id, *m))) {
            Some((id, metadata)) => Current::new(Id::from_u64(id), metadata),
            None => Current::none(),
        }
    }
}

impl Recorder {
    fn spans(&self) -> Vec<(u64, SpanRecord)> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .map(|(id, (r, _))| (*id, r.clone()))
            .collect()
    }
}

#[tokio::test]
async fn a_request_span_holds_its_attempt_spans_through_fallback() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());

    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap();
    let config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300));
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    client.put("k", "v").await.unwrap();
    let region = cluster.regions()[0].id;
    let victim = cluster.leader_of(region).unwrap().store_id;
    cluster.make_cold(region, ColdMode::AcceptAtOnce).unwrap();
    cluster.store_down(victim).await;

    let first_new = recorder.next.load(Ordering::Relaxed);
    assert_eq!(client.get("k").await.unwrap(), Some(b"v".to_vec()));
    let spans: Vec<(u64, SpanRecord)> = recorder
        .spans()
        .into_iter()
        .filter(|(id, _)| *id > first_new)
        .collect();

    // One request span for the get, with its method, Region and outcome.
    let requests: Vec<&(u64, SpanRecord)> =
        spans.iter().filter(|(_, s)| s.name == "request").collect();
    assert_eq!(requests.len(), 1, "{spans:#?}");
    let (request_id, request) = requests[0];
    assert_eq!(request.fields["method"], "raw_get");
    assert_eq!(request.fields["regions"], format!("[{region}]"));
    if cfg!(feature = "prometheus") {
        // The request's outcome is tracked with the metrics feature only.
        assert_eq!(request.fields["outcome"], "ok");
    }

    // Its attempts: the dead leader's store first, then a fallback voter
    // that accepted. Each names the Region, store, peer and attempt.
    let attempts: Vec<&SpanRecord> = spans
        .iter()
        .filter(|(_, s)| s.name == "attempt")
        .map(|(_, s)| s)
        .collect();
    assert!(attempts.len() >= 2, "{attempts:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.parent, Some(*request_id), "{attempt:#?}");
        assert_eq!(attempt.fields["method"], "raw_get");
        assert_eq!(attempt.fields["region"], region.to_string());
        assert_eq!(attempt.fields["attempt"], "1");
        assert!(attempt.fields.contains_key("peer"));
        assert!(attempt.fields.contains_key("outcome"), "{attempt:#?}");
    }
    let first = attempts[0];
    assert_eq!(first.fields["store"], victim.to_string());
    assert_eq!(first.fields["role"], "leader");
    assert_ne!(first.fields["outcome"], "ok");
    let last = attempts[attempts.len() - 1];
    assert_ne!(last.fields["store"], victim.to_string());
    assert_eq!(last.fields["role"], "fallback");
    assert_eq!(last.fields["outcome"], "ok");

    // The fallback success is announced at info level.
    let events = recorder.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|(level, m)| *level == tracing::Level::INFO
                && m.contains("it is now the cached leader")),
        "{events:#?}"
    );

    cluster.shutdown().await;
}
