//! Traces from the real binary: an OTLP collector inside the test receives what
//! `hookd serve` exports and decodes it on its own (prost messages transcribed
//! from OpenTelemetry's `trace.proto`, or the JSON mapping read as plain JSON),
//! never with hookd's encoder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::observability::{Served, signed_stripe_payment};
use crate::support::{FORWARD_SECRET, Receiver, wait_for};

/// OTLP's messages, as far as the test reads them.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, repeated, tag = "13")]
        pub links: Vec<Link>,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(int32, tag = "3")]
        pub code: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
        pub value: Option<Value>,
    }
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        Str(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(int64, tag = "3")]
        Int(i64),
        #[prost(double, tag = "4")]
        Double(f64),
    }
}

/// A span as the collector read it: ids in hex, attributes as text.
#[derive(Debug, Clone)]
struct Got {
    trace: String,
    span: String,
    /// Empty for a root.
    parent: String,
    name: String,
    kind: i64,
    start: u64,
    end: u64,
    attributes: HashMap<String, String>,
    links: Vec<(String, String)>,
    status_code: i64,
}

/// What the collector was sent, request by request.
#[derive(Default)]
struct Collected {
    content_types: Vec<String>,
    service_names: Vec<String>,
    spans: Vec<Got>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_text(value: Option<&proto::Value>) -> String {
    match value {
        Some(proto::Value::Str(s)) => s.clone(),
        Some(proto::Value::Bool(b)) => b.to_string(),
        Some(proto::Value::Int(i)) => i.to_string(),
        Some(proto::Value::Double(d)) => d.to_string(),
        None => String::new(),
    }
}

fn decode_protobuf(body: &[u8], into: &mut Collected) {
    let request = <proto::ExportTraceServiceRequest as prost::Message>::decode(body)
        .expect("an ExportTraceServiceRequest");
    for resource_spans in request.resource_spans {
        for kv in resource_spans.resource.unwrap_or_default().attributes {
            if kv.key == "service.name" {
                let value = kv.value.unwrap_or_default().value;
                into.service_names.push(any_text(value.as_ref()));
            }
        }
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            into.spans.push(Got {
                trace: hex(&span.trace_id),
                span: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                name: span.name,
                kind: i64::from(span.kind),
                start: span.start_time_unix_nano,
                end: span.end_time_unix_nano,
                attributes: span
                    .attributes
                    .into_iter()
                    .map(|kv| (kv.key, any_text(kv.value.and_then(|v| v.value).as_ref())))
                    .collect(),
                links: span
                    .links
                    .into_iter()
                    .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                    .collect(),
                status_code: span.status.map_or(0, |s| i64::from(s.code)),
            });
        }
    }
}

/// An attribute value of the JSON mapping, as text.
fn json_any_text(value: &Value) -> String {
    for key in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        match &value[key] {
            Value::Null => {}
            Value::String(s) => return s.clone(),
            other => return other.to_string(),
        }
    }
    String::new()
}

fn json_attributes(list: &Value) -> HashMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let key = kv["key"].as_str().unwrap_or_default().to_string();
            (key, json_any_text(&kv["value"]))
        })
        .collect()
}

fn decode_json(body: &[u8], into: &mut Collected) {
    let request: Value = serde_json::from_slice(body).expect("OTLP JSON");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    // Nanoseconds are strings in the JSON mapping.
    let nanos = |v: &Value| {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .expect("nanos as a string")
    };
    for resource_spans in request["resourceSpans"].as_array().expect("resourceSpans") {
        let resource = json_attributes(&resource_spans["resource"]["attributes"]);
        into.service_names
            .extend(resource.get("service.name").cloned());
        let scopes = resource_spans["scopeSpans"].as_array().expect("scopeSpans");
        for span in scopes
            .iter()
            .flat_map(|s| s["spans"].as_array().expect("spans"))
        {
            into.spans.push(Got {
                trace: text(&span["traceId"]),
                span: text(&span["spanId"]),
                parent: text(&span["parentSpanId"]),
                name: text(&span["name"]),
                kind: span["kind"].as_i64().expect("kind as a number"),
                start: nanos(&span["startTimeUnixNano"]),
                end: nanos(&span["endTimeUnixNano"]),
                attributes: json_attributes(&span["attributes"]),
                links: span["links"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| (text(&l["traceId"]), text(&l["spanId"])))
                    .collect(),
                status_code: span["status"]["code"].as_i64().unwrap_or(0),
            });
        }
    }
}

/// An OTLP/HTTP collector on 127.0.0.1: `POST /v1/traces`, decoded by content type.
struct Collector {
    endpoint: String,
    got: Arc<Mutex<Collected>>,
    handle: actix_web::dev::ServerHandle,
}

impl Collector {
    fn start() -> Collector {
        use actix_web::{HttpRequest, HttpResponse, web};
        let got = Arc::new(Mutex::new(Collected::default()));
        let shared = got.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let server = actix_web::HttpServer::new(move || {
            let got = shared.clone();
            actix_web::App::new().route(
                "/v1/traces",
                web::post().to(move |request: HttpRequest, body: web::Bytes| {
                    let got = got.clone();
                    async move {
                        let content_type = request
                            .headers()
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        let mut got = got.lock().expect("lock");
                        match content_type.as_str() {
                            "application/x-protobuf" => decode_protobuf(&body, &mut got),
                            "application/json" => decode_json(&body, &mut got),
                            _ => {}
                        }
                        got.content_types.push(content_type);
                        HttpResponse::Ok().finish()
                    }
                }),
            )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Collector {
            endpoint,
            got,
            handle,
        }
    }
}

impl Collector {
    /// Waits (20 s at most) until a span named `name` has come; `what` names it
    /// for the failure.
    async fn wait_for_span(&self, name: &str, what: &str) {
        wait_for(what, Duration::from_secs(20), || {
            let spans = &self.got.lock().expect("lock").spans;
            std::future::ready(spans.iter().any(|s| s.name == name).then_some(()))
        })
        .await;
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

/// The provider's own trace context, which hookd links rather than continues.
const PROVIDER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PROVIDER_SPAN: &str = "00f067aa0ba902b7";

/// Delivers a signed Stripe payment `event_id` with the provider's `traceparent`;
/// returns the answer's status.
async fn deliver(base: &str, event_id: &str) -> u16 {
    let (body, headers) = signed_stripe_payment(event_id, &format!("pi_{event_id}"), 700);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let mut request = http
        .post(format!("{base}/webhooks/stripe"))
        .header(
            "traceparent",
            format!("00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"),
        )
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.expect("answer").status().as_u16()
}

/// One Stripe delivery through `hookd serve` exporting with `protocol` (unset:
/// the default), with a
/// forward to a receiver: the spans the collector got, its content types and
/// service names, what the receiver got, and hookd's JSON log.
async fn one_delivery_and_its_forward(
    protocol: Option<&str>,
    event_id: &str,
) -> (Collected, Vec<crate::support::Received>, Vec<Value>) {
    let collector = Collector::start();
    let receiver = Receiver::start(&[]).await;
    // The shipped configuration and a forward, its relative paths made absolute.
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml")).expect("read");
    let shipped = shipped.replace(
        "\"fixtures/",
        concat!("\"", env!("CARGO_MANIFEST_DIR"), "/fixtures/"),
    );
    let config = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("traces-{}-{event_id}.toml", std::process::id()));
    let forward = format!(
        "\n[[forwards]]\nname = \"billing\"\nurl = \"{}\"\nsecret = \"{FORWARD_SECRET}\"\n\
         kinds = [\"payment_succeeded\"]\n",
        receiver.url
    );
    std::fs::write(&config, shipped + &forward).expect("write config");
    let mut env = vec![
        ("HOOKD_LOG_FORMAT", "json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "payments-hookd"),
    ];
    env.extend(protocol.map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)));
    let served = Served::start_configured(config.to_str().expect("path"), &env).await;

    assert_eq!(deliver(&served.base, event_id).await, 200);
    let forwarded = receiver.wait_for(1).await;
    // The forward's answer is recorded before its span ends: wait for the span.
    collector
        .wait_for_span("forward", "the forward's span")
        .await;
    let log = served.stop().await;
    let _ = std::fs::remove_file(&config);
    let lines = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let collected = std::mem::take(&mut *collector.got.lock().expect("lock"));
    (collected, forwarded, lines)
}

/// The one span named `name` whose parent is `parent`.
fn child<'a>(spans: &'a [Got], parent: &Got, name: &str) -> &'a Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|s| s.name == name && s.parent == parent.span)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} under {}: {spans:#?}",
        parent.name
    );
    assert_eq!(
        found[0].trace, parent.trace,
        "{name} is in its parent's trace"
    );
    assert!(
        parent.start <= found[0].start
            && found[0].start <= found[0].end
            && found[0].end <= parent.end,
        "{name} lies within {}: {:?} {:?}",
        parent.name,
        found[0],
        parent
    );
    found[0]
}

fn check_traces(
    protocol: &str,
    content_type: &str,
    collected: &Collected,
    forwarded: &[crate::support::Received],
    lines: &[Value],
    event_id: &str,
) {
    assert!(
        !collected.content_types.is_empty(),
        "{protocol}: nothing exported"
    );
    assert!(
        collected.content_types.iter().all(|c| c == content_type),
        "{:?}",
        collected.content_types
    );
    assert!(
        collected
            .service_names
            .iter()
            .all(|n| n == "payments-hookd")
            && !collected.service_names.is_empty(),
        "{:?}",
        collected.service_names
    );
    let spans = &collected.spans;
    let deliveries: Vec<&Got> = spans.iter().filter(|s| s.name == "delivery").collect();
    assert_eq!(deliveries.len(), 1, "{spans:#?}");
    let delivery = deliveries[0];
    assert_eq!(delivery.parent, "", "a delivery starts its own trace");
    assert_eq!(delivery.kind, 2, "server");
    assert_eq!(delivery.trace.len(), 32);
    assert_ne!(
        delivery.trace, PROVIDER_TRACE,
        "the provider's trace is not continued"
    );
    assert_eq!(
        delivery.links,
        [(PROVIDER_TRACE.to_string(), PROVIDER_SPAN.to_string())],
        "but linked"
    );
    let attribute = |span: &Got, key: &str| span.attributes.get(key).cloned().unwrap_or_default();
    assert_eq!(attribute(delivery, "hookd.source"), "stripe");
    assert_eq!(attribute(delivery, "hookd.event_id"), event_id);
    assert_eq!(attribute(delivery, "hookd.kind"), "payment_succeeded");
    // Its forward is yet to go when the provider is answered.
    assert_eq!(attribute(delivery, "hookd.outcome"), "failed");
    assert_eq!(attribute(delivery, "http.response.status_code"), "200");
    assert_eq!(delivery.status_code, 0);

    let verify = child(spans, delivery, "verify");
    assert_eq!(attribute(verify, "hookd.scheme"), "stripe");
    let batch = child(spans, delivery, "batch");
    assert_eq!(attribute(batch, "hookd.batch.size"), "1");
    let handler = child(spans, batch, "handler");
    assert_eq!(attribute(handler, "hookd.handler"), "payment_succeeded");
    assert_eq!(attribute(handler, "hookd.event_id"), event_id);
    child(spans, batch, "commit");

    // The forward: its span's trace and id are what the receiver was sent.
    let forwards: Vec<&Got> = spans.iter().filter(|s| s.name == "forward").collect();
    assert_eq!(forwards.len(), 1, "{spans:#?}");
    let forward = forwards[0];
    assert_eq!(forward.kind, 3, "client");
    assert_eq!(attribute(forward, "hookd.forward"), "billing");
    assert_eq!(attribute(forward, "http.response.status_code"), "200");
    let dispatch = spans
        .iter()
        .find(|s| s.span == forward.parent)
        .unwrap_or_else(|| panic!("the forward's parent: {spans:#?}"));
    assert_eq!(dispatch.name, "dispatch");
    assert_eq!(attribute(dispatch, "hookd.event_id"), event_id);
    assert_eq!(forwarded.len(), 1);
    let traceparent = forwarded[0].header("traceparent").expect("a traceparent");
    assert_eq!(
        traceparent,
        format!("00-{}-{}-01", forward.trace, forward.span)
    );

    // The delivery's log line carries its trace and span.
    let line = lines
        .iter()
        .find(|l| {
            l["event_id"] == event_id
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("delivery "))
        })
        .unwrap_or_else(|| panic!("no delivery line: {lines:#?}"));
    assert_eq!(line["trace_id"], delivery.trace.as_str(), "{line}");
    assert_eq!(line["span_id"], delivery.span.as_str(), "{line}");
}

/// One delivery and its forward with `OTEL_EXPORTER_OTLP_PROTOCOL` set to
/// `protocol` (or left out): traced as `check_traces` checks, exported as
/// `named` in `content_type`.
async fn exported(protocol: Option<&str>, named: &str, content_type: &str, event_id: &str) {
    let (collected, forwarded, lines) = one_delivery_and_its_forward(protocol, event_id).await;
    check_traces(
        named,
        content_type,
        &collected,
        &forwarded,
        &lines,
        event_id,
    );
}

#[tokio::test]
async fn slow_a_delivery_and_its_forward_are_exported_as_otlp_protobuf_by_default() {
    let event_id = "evt_trace_protobuf";
    exported(None, "http/protobuf", "application/x-protobuf", event_id).await;
}

#[tokio::test]
async fn slow_a_delivery_and_its_forward_are_exported_as_otlp_json() {
    let event_id = "evt_trace_json";
    exported(Some("http/json"), "http/json", "application/json", event_id).await;
}

#[tokio::test]
async fn slow_a_collector_that_is_down_costs_spans_never_a_delivery() {
    // A port nobody listens on any more.
    let endpoint = format!("http://127.0.0.1:{}", crate::process::free_port());
    let served = Served::start_configured(
        concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    )
    .await;
    for n in 0..5 {
        let status = deliver(&served.base, &format!("evt_trace_down_{n}")).await;
        assert_eq!(status, 200, "delivery {n}");
    }
    // It still stops (the flush at exit waits 5 s at most; the rest of the
    // bound is a loaded machine's slack), and says once that spans are lost.
    let stopping = std::time::Instant::now();
    let log = served.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(12),
        "stopped in {:?}",
        stopping.elapsed()
    );
    let warnings = log
        .lines()
        .filter(|l| l.contains("traces: cannot send"))
        .count();
    assert_eq!(warnings, 1, "{log}");
}

#[tokio::test]
async fn slow_a_shared_transaction_is_one_batch_span_linked_to_each_of_its_deliveries() {
    let collector = Collector::start();
    let served = Served::start_configured(
        concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str())],
    )
    .await;
    // Concurrent deliveries share transactions (see batching.rs).
    let ids: Vec<String> = (0..40).map(|n| format!("evt_trace_batch_{n}")).collect();
    let statuses =
        futures_util::future::join_all(ids.iter().map(|id| deliver(&served.base, id))).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    served.stop().await;
    let collected = std::mem::take(&mut *collector.got.lock().expect("lock"));
    let spans = &collected.spans;
    let deliveries: HashMap<&str, &Got> = spans
        .iter()
        .filter(|s| s.name == "delivery")
        .map(|s| (s.span.as_str(), s))
        .collect();
    assert_eq!(deliveries.len(), ids.len(), "a span per delivery");
    let batches: Vec<&Got> = spans.iter().filter(|s| s.name == "batch").collect();
    let shared: Vec<&&Got> = batches
        .iter()
        .filter(|b| {
            b.attributes
                .get("hookd.batch.size")
                .is_some_and(|n| n != "1")
        })
        .collect();
    assert!(!shared.is_empty(), "no shared transaction: {batches:#?}");
    for batch in shared {
        let size: usize = batch.attributes["hookd.batch.size"].parse().expect("size");
        let first = deliveries
            .get(batch.parent.as_str())
            .unwrap_or_else(|| panic!("a batch under a delivery: {batch:?}"));
        assert_eq!(batch.trace, first.trace);
        assert_eq!(batch.links.len(), size - 1, "{batch:?}");
        for (trace, span) in &batch.links {
            let other = deliveries
                .get(span.as_str())
                .unwrap_or_else(|| panic!("a link to a delivery: {batch:?}"));
            assert_eq!(&other.trace, trace);
            assert_ne!(other.span, first.span);
        }
        let handlers: Vec<&Got> = spans
            .iter()
            .filter(|s| s.name == "handler" && s.parent == batch.span)
            .collect();
        assert_eq!(handlers.len(), 1, "the payments handler once for the batch");
        // Unless the batch was undone (and its deliveries stored one by one).
        if batch.status_code == 0 {
            child(spans, batch, "commit");
        }
    }
    // Every delivery's span was stored under some batch: its own, or a shared one.
    let in_batches: usize = batches
        .iter()
        .map(|b| {
            b.attributes["hookd.batch.size"]
                .parse::<usize>()
                .expect("size")
        })
        .sum();
    assert!(in_batches >= ids.len(), "{in_batches} of {}", ids.len());
}

#[tokio::test]
async fn slow_a_gateway_request_is_one_trace_of_its_claim_its_upstream_call_and_its_commit() {
    use crate::support::upstream::{Reply, Upstream};

    let collector = Collector::start();
    let upstream = Upstream::start(vec![], Reply::json(201, r#"{"id":"pay_1"}"#)).await;
    let config = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("traces-gateway-{}.toml", std::process::id()));
    let text = format!(
        "{}\n{}",
        hookd_kit::settings::shipped_toml_anywhere(),
        crate::gateway::route("payments", "/payments", &upstream.url, "")
    );
    std::fs::write(&config, text).expect("write config");
    let gateway_port = crate::process::free_port();
    let listen = format!("127.0.0.1:{gateway_port}");
    let served = Served::start_configured(
        config.to_str().expect("path"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            // The gateway's listener from the environment alone.
            ("HOOKD_GATEWAY_LISTEN", listen.as_str()),
        ],
    )
    .await;
    let answer = reqwest::Client::new()
        .post(format!("http://{listen}/payments"))
        .header("Idempotency-Key", "traced")
        .header("Authorization", "Bearer sk_test")
        .header(
            "traceparent",
            format!("00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"),
        )
        .body("{}")
        .send()
        .await
        .expect("answer");
    assert_eq!(answer.status(), 201);
    collector
        .wait_for_span("gateway", "the gateway's span")
        .await;
    served.stop().await;
    let _ = std::fs::remove_file(&config);
    let spans = std::mem::take(&mut collector.got.lock().expect("lock").spans);
    let root = spans
        .iter()
        .find(|s| s.name == "gateway")
        .expect("gateway span");
    assert!(root.parent.is_empty(), "the request's trace is hookd's own");
    assert_eq!(root.kind, 2, "server");
    assert_eq!(
        root.links,
        [(PROVIDER_TRACE.to_string(), PROVIDER_SPAN.to_string())]
    );
    for (key, value) in [
        ("hookd.route", "payments"),
        ("hookd.outcome", "sent"),
        ("http.route", "/payments"),
        ("http.response.status_code", "201"),
    ] {
        assert_eq!(
            root.attributes.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
    let operation = root.attributes.get("hookd.operation").expect("operation");
    child(&spans, root, "claim");
    let call = child(&spans, root, "upstream");
    assert_eq!(call.kind, 3, "client");
    child(&spans, root, "commit");
    // Upstream continues the trace from the upstream call's span.
    let seen = &upstream.seen()[0];
    assert_eq!(
        seen.header("traceparent"),
        Some(format!("00-{}-{}-01", root.trace, call.span).as_str())
    );
    assert_eq!(
        seen.header("idempotency-operation"),
        Some(operation.as_str())
    );
}
