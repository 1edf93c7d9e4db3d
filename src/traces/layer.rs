//! The `tracing` layer that turns hookd's spans into OTLP span records: ids
//! given at creation (the parent's trace, or a new one), fields as attributes,
//! and the finished span handed to the exporter's queue — never waiting for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::otlp::{AttrValue, Kind, SpanRecord, Status};

/// Fields that set the span's OTLP kind and status rather than attributes.
const KIND_FIELD: &str = "otel.kind";
const STATUS_FIELD: &str = "otel.status_message";

pub struct SpanLayer {
    pub queue: SyncSender<SpanRecord>,
    /// Spans dropped because the queue was full.
    pub dropped: Arc<AtomicU64>,
}

/// hookd's own spans only: a dependency's would be noise to its operators.
fn ours(metadata: &Metadata<'_>) -> bool {
    metadata.is_span() && metadata.target().starts_with("hookd")
}

pub fn new_trace_id() -> u128 {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

pub fn new_span_id() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if ours(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        ours(metadata)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().and_then(|parent| {
            let extensions = parent.extensions();
            extensions
                .get::<SpanRecord>()
                .map(|p| (p.trace_id, p.span_id))
        });
        let mut record = SpanRecord {
            trace_id: parent.map_or_else(new_trace_id, |(trace, _)| trace),
            span_id: new_span_id(),
            parent_span_id: parent.map(|(_, span)| span),
            name: attrs.metadata().name(),
            kind: Kind::Internal,
            start_unix_nanos: unix_nanos(),
            end_unix_nanos: 0,
            attributes: Vec::new(),
            links: Vec::new(),
            status: Status::Unset,
        };
        attrs.record(&mut Fields(&mut record));
        span.extensions_mut().insert(record);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(record) = span.extensions_mut().get_mut::<SpanRecord>()
        {
            values.record(&mut Fields(record));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        let Some(other) = ctx.span(follows) else {
            return;
        };
        let link = other
            .extensions()
            .get::<SpanRecord>()
            .map(|r| (r.trace_id, r.span_id));
        if let (Some(link), Some(span)) = (link, ctx.span(id))
            && let Some(record) = span.extensions_mut().get_mut::<SpanRecord>()
        {
            record.links.push(link);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(mut record) = span.extensions_mut().remove::<SpanRecord>() else {
            return;
        };
        record.end_unix_nanos = unix_nanos();
        if let Err(TrySendError::Full(_)) = self.queue.try_send(record) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A span's fields into its record: `otel.kind` (`server`, `client`) sets its
/// kind, `otel.status_message` marks it failed, the rest are attributes (a
/// field recorded again replaces its value).
struct Fields<'a>(&'a mut SpanRecord);

impl Fields<'_> {
    fn set(&mut self, field: &Field, value: AttrValue) {
        let key = field.name();
        match (key, &value) {
            (KIND_FIELD, AttrValue::Str(kind)) => {
                self.0.kind = match kind.as_str() {
                    "server" => Kind::Server,
                    "client" => Kind::Client,
                    _ => Kind::Internal,
                };
            }
            (STATUS_FIELD, AttrValue::Str(why)) => self.0.status = Status::Error(why.clone()),
            _ => match self.0.attributes.iter_mut().find(|(k, _)| *k == key) {
                Some((_, old)) => *old = value,
                None => self.0.attributes.push((key, value)),
            },
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, AttrValue::Str(value.to_string()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, AttrValue::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, AttrValue::Int(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.set(field, AttrValue::Int(value)),
            Err(_) => self.set(field, AttrValue::Str(value.to_string())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, AttrValue::Double(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, AttrValue::Str(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn layer(capacity: usize) -> (SpanLayer, std::sync::mpsc::Receiver<SpanRecord>) {
        let (queue, finished) = std::sync::mpsc::sync_channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        (SpanLayer { queue, dropped }, finished)
    }

    #[test]
    fn a_full_queue_drops_and_counts_spans_and_never_waits() {
        let (layer, finished) = layer(2);
        let dropped = layer.dropped.clone();
        let subscriber = tracing_subscriber::Registry::default().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::trace_span!("delivery", otel.kind = "server");
            root.in_scope(|| {
                for n in 0..4 {
                    drop(tracing::trace_span!("handler", n = n).entered());
                }
            });
        });
        // The first two handlers were queued; the other two and the root dropped.
        let kept: Vec<SpanRecord> = finished.try_iter().collect();
        assert_eq!(kept.len(), 2);
        assert_eq!(dropped.load(Ordering::Relaxed), 3);
        let root_trace = kept[0].trace_id;
        for (n, span) in (0i64..).zip(&kept) {
            assert_eq!(span.name, "handler");
            assert_eq!(span.trace_id, root_trace, "one trace");
            assert!(span.parent_span_id.is_some(), "under the delivery");
            assert_eq!(span.attributes, [("n", AttrValue::Int(n))]);
            assert!(span.start_unix_nanos <= span.end_unix_nanos);
        }
    }

    #[test]
    fn a_dependencys_spans_are_not_recorded() {
        let (layer, finished) = layer(8);
        let subscriber = tracing_subscriber::Registry::default().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            drop(tracing::trace_span!(target: "hyper::client", "connect").entered());
            drop(tracing::trace_span!("batch").entered());
        });
        let names: Vec<&str> = finished.try_iter().map(|s| s.name).collect();
        assert_eq!(names, ["batch"]);
    }
}
