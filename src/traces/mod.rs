//! Traces: `tracing` spans of a delivery (`delivery` → `verify`, `batch` →
//! `handler`…, `commit`) and of the dispatcher's runs (`dispatch` → `handler`,
//! `forward`, which sends W3C `traceparent` to its target), exported over
//! OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set.
//!
//! Without an endpoint no subscriber is installed: spans are disabled at their
//! callsite, so a delivery pays a cached check and allocates nothing. Spans are
//! at `trace` level, so the `log` bridge of `tracing` never prints them below
//! `RUST_LOG=trace`.

mod export;
mod layer;
pub mod otlp;

use std::sync::OnceLock;

use tracing::Span;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::{LookupSpan, SpanData};

pub use export::Exporter;
use otlp::SpanRecord;

/// How finished spans are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Protobuf,
    Json,
}

/// Where and how spans go, from the `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The full URL spans are POSTed to.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub protocol: Protocol,
    pub service_name: String,
    pub timeout: std::time::Duration,
}

/// Why traces cannot be exported: a variable's problem (named), or the exporter
/// failing to start.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("{name}: {url:?} is not an http(s) URL")]
    NotHttpUrl { name: &'static str, url: String },
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL: {0:?} is not one of http/protobuf, http/json")]
    Protocol(String),
    /// `OTEL_EXPORTER_OTLP_HEADERS`, its problem said whole.
    #[error("{0}")]
    Headers(String),
    #[error("OTEL_EXPORTER_OTLP_TIMEOUT: {0:?} is not a number of milliseconds")]
    Timeout(String),
    /// The HTTP client (its TLS roots) could not be built.
    #[error("{0}")]
    Client(String),
    #[error("traces: {0}")]
    Start(String),
}

impl Settings {
    /// `None` when no endpoint is set (traces off); `Err` names the variable.
    pub fn from_env() -> Result<Option<Settings>, TracesError> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, TracesError> {
        let url = match (
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => checked_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)?,
            (None, Some(base)) => {
                let base = checked_url("OTEL_EXPORTER_OTLP_ENDPOINT", base)?;
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
            (None, None) => return Ok(None),
        };
        let protocol = match get("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
            None | Some("http/protobuf") => Protocol::Protobuf,
            Some("http/json") => Protocol::Json,
            Some(other) => {
                return Err(TracesError::Protocol(other.to_string()));
            }
        };
        let headers = match get("OTEL_EXPORTER_OTLP_HEADERS") {
            Some(list) => headers(&list).map_err(TracesError::Headers)?,
            None => Vec::new(),
        };
        let timeout = match get("OTEL_EXPORTER_OTLP_TIMEOUT") {
            Some(ms) => ms
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(std::time::Duration::from_millis)
                .ok_or_else(|| TracesError::Timeout(ms.clone()))?,
            None => export::TIMEOUT,
        };
        Ok(Some(Settings {
            url,
            headers,
            protocol,
            service_name: get("OTEL_SERVICE_NAME").unwrap_or_else(|| "hookd".into()),
            timeout,
        }))
    }
}

fn checked_url(name: &'static str, url: String) -> Result<String, TracesError> {
    match reqwest::Url::parse(url.trim()) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(url.trim().to_string()),
        _ => Err(TracesError::NotHttpUrl { name, url }),
    }
}

/// `key=value,key=value`, values percent-decoded (the OpenTelemetry format).
fn headers(list: &str) -> Result<Vec<(String, String)>, String> {
    let bad = |item: &str| format!("OTEL_EXPORTER_OTLP_HEADERS: {item:?} is not key=value");
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (key, value) = item.split_once('=').ok_or_else(|| bad(item))?;
            let key = key.trim();
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| bad(item))?;
            let valid = reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_ok()
                && reqwest::header::HeaderValue::from_str(&value).is_ok();
            if !valid {
                return Err(bad(item));
            }
            // The request's own framing is the exporter's to write.
            const FRAMING: [&str; 5] = [
                "content-length",
                "content-type",
                "transfer-encoding",
                "host",
                "connection",
            ];
            if FRAMING.iter().any(|name| key.eq_ignore_ascii_case(name)) {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_HEADERS: {key} is set by the exporter itself"
                ));
            }
            Ok((key.to_string(), value.into_owned()))
        })
        .collect()
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Installs the span layer as the process's subscriber and starts the exporter.
pub fn install(settings: Settings) -> Result<(), TracesError> {
    let (exporter, layer) = Exporter::start(settings)?;
    tracing::subscriber::set_global_default(Registry::default().with(layer))
        .map_err(|e| TracesError::Start(e.to_string()))?;
    let _ = EXPORTER.set(exporter);
    Ok(())
}

/// Sends the spans still queued (within a few seconds): at the end of `main`.
pub fn shutdown() {
    if let Some(exporter) = EXPORTER.get() {
        exporter.flush();
    }
}

/// What `f` makes of `span`'s record, when spans are recorded.
fn with_record<T>(span: &Span, f: impl FnOnce(&mut SpanRecord) -> T) -> Option<T> {
    let id = span.id()?;
    span.with_subscriber(|(_, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span_data(&id)?;
        let mut extensions = data.extensions_mut();
        extensions.get_mut::<SpanRecord>().map(f)
    })
    .flatten()
}

/// Marks `span` failed, saying why (nothing is formatted when spans are off).
pub fn fail(span: &Span, why: &dyn std::fmt::Display) {
    if !span.is_disabled() {
        span.record("otel.status_message", why.to_string());
    }
}

/// The trace and span ids of the span a log line is written in.
pub fn current_ids() -> Option<(u128, u64)> {
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    with_record(&span, |r| (r.trace_id, r.span_id))
}

/// The W3C `traceparent` of the current span, for a request it sends.
pub fn traceparent() -> Option<String> {
    let (trace, span) = current_ids()?;
    Some(format!("00-{trace:032x}-{span:016x}-01"))
}

/// Links `span` to the trace a caller's `traceparent` names (ignored unless
/// well formed).
pub fn link_traceparent(span: &Span, header: &str) {
    if let Some(link) = parse_traceparent(header) {
        with_record(span, |r| r.links.push(link));
    }
}

/// `version-traceid-spanid-flags`: version `00` exactly, a later one by its
/// first four fields; all-zero ids are invalid.
pub fn parse_traceparent(header: &str) -> Option<(u128, u64)> {
    let mut parts = header.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    let hex =
        |s: &str, len| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    Some((trace, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_string())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_otel_variables_give_the_url_protocol_headers_and_service() {
        assert_eq!(from(&[]), Ok(None));
        let base = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")])
            .expect("valid")
            .expect("on");
        assert_eq!(base.url, "http://collector:4318/v1/traces");
        assert_eq!(base.protocol, Protocol::Protobuf);
        assert_eq!(base.service_name, "hookd");
        let full = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://x.example/otlp/spans",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x-tenant=7"),
            ("OTEL_SERVICE_NAME", "payments-hookd"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(full.url, "https://x.example/otlp/spans");
        assert_eq!(full.protocol, Protocol::Json);
        assert_eq!(
            full.headers,
            [
                ("api-key".into(), "a b".into()),
                ("x-tenant".into(), "7".into())
            ]
        );
        assert_eq!(full.service_name, "payments-hookd");
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(
            from(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            Err(
                "OTEL_EXPORTER_OTLP_PROTOCOL: \"grpc\" is not one of http/protobuf, http/json"
                    .into()
            )
        );
        assert!(from(&[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]).is_err());
        assert!(from(&[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "Content-Length=5")]).is_err());
        assert!(from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).is_err());
    }

    #[test]
    fn a_traceparent_is_read_only_when_well_formed() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(good),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7))
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
