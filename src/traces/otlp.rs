//! Finished spans as an OTLP `ExportTraceServiceRequest`: protobuf (the few
//! messages and fields hookd fills, written by hand) or the OTLP JSON mapping
//! (hex ids, nanoseconds as strings, enums as numbers).

use serde_json::{Value, json};

/// A finished span, as the layer recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_span_id: Option<u64>,
    pub name: &'static str,
    pub kind: Kind,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// Spans this one follows from (a batch's other deliveries, a provider's
    /// trace): trace and span ids.
    pub links: Vec<(u128, u64)>,
    pub status: Status,
}

/// OTLP's `SpanKind`, by its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Status {
    #[default]
    Unset,
    Error(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

/// What every span of this process shares.
pub struct Resource<'a> {
    pub service_name: &'a str,
}

const SCOPE: &str = "hookd";
const VERSION: &str = env!("CARGO_PKG_VERSION");

// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from((field << 3) | u32::from(wire)));
}

fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    tag(out, field, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A sub-message: written apart, then as length-delimited bytes.
fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    bytes(out, field, &inner);
}

fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

/// `KeyValue { key = 1; AnyValue value = 2 }`.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &AttrValue) {
    message(out, field, |kv| {
        bytes(kv, 1, key.as_bytes());
        message(kv, 2, |any| match value {
            AttrValue::Str(s) => bytes(any, 1, s.as_bytes()),
            AttrValue::Bool(b) => {
                tag(any, 2, VARINT);
                varint(any, u64::from(*b));
            }
            AttrValue::Int(i) => {
                tag(any, 3, VARINT);
                // int64: two's complement, as protobuf has it.
                varint(any, *i as u64);
            }
            AttrValue::Double(d) => fixed64(any, 4, d.to_bits()),
        });
    });
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`, with
/// one `ResourceSpans { resource = 1; repeated ScopeSpans scope_spans = 2 }`.
pub fn protobuf(resource: &Resource<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    message(&mut out, 1, |resource_spans| {
        message(resource_spans, 1, |r| {
            let name = AttrValue::Str(resource.service_name.to_string());
            key_value(r, 1, "service.name", &name);
        });
        message(resource_spans, 2, |scope_spans| {
            message(scope_spans, 1, |scope| {
                bytes(scope, 1, SCOPE.as_bytes());
                bytes(scope, 2, VERSION.as_bytes());
            });
            for span in spans {
                message(scope_spans, 2, |s| span_protobuf(s, span));
            }
        });
    });
    out
}

fn span_protobuf(out: &mut Vec<u8>, span: &SpanRecord) {
    bytes(out, 1, &span.trace_id.to_be_bytes());
    bytes(out, 2, &span.span_id.to_be_bytes());
    if let Some(parent) = span.parent_span_id {
        bytes(out, 4, &parent.to_be_bytes());
    }
    bytes(out, 5, span.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, span.kind as u64);
    fixed64(out, 7, span.start_unix_nanos);
    fixed64(out, 8, span.end_unix_nanos);
    for (key, value) in &span.attributes {
        key_value(out, 9, key, value);
    }
    for (trace_id, span_id) in &span.links {
        message(out, 13, |link| {
            bytes(link, 1, &trace_id.to_be_bytes());
            bytes(link, 2, &span_id.to_be_bytes());
        });
    }
    if let Status::Error(why) = &span.status {
        // `Status { message = 2; code = 3 }`, code 2 = error.
        message(out, 15, |status| {
            bytes(status, 2, why.as_bytes());
            tag(status, 3, VARINT);
            varint(status, 2);
        });
    }
}

fn any_json(value: &AttrValue) -> Value {
    match value {
        AttrValue::Str(s) => json!({"stringValue": s}),
        AttrValue::Bool(b) => json!({"boolValue": b}),
        // A 64-bit integer is a string in the JSON mapping.
        AttrValue::Int(i) => json!({"intValue": i.to_string()}),
        AttrValue::Double(d) => json!({"doubleValue": d}),
    }
}

/// The same request in the OTLP JSON mapping.
pub fn json(resource: &Resource<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let spans: Vec<Value> = spans.iter().map(span_json).collect();
    let request = json!({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": resource.service_name}}
        ]},
        "scopeSpans": [{
            "scope": {"name": SCOPE, "version": VERSION},
            "spans": spans,
        }],
    }]});
    serde_json::to_vec(&request).unwrap_or_default()
}

fn span_json(span: &SpanRecord) -> Value {
    let attributes: Vec<Value> = span
        .attributes
        .iter()
        .map(|(key, value)| json!({"key": key, "value": any_json(value)}))
        .collect();
    let links: Vec<Value> = span
        .links
        .iter()
        .map(|(trace, id)| json!({"traceId": format!("{trace:032x}"), "spanId": format!("{id:016x}")}))
        .collect();
    let mut out = json!({
        "traceId": format!("{:032x}", span.trace_id),
        "spanId": format!("{:016x}", span.span_id),
        "name": span.name,
        "kind": span.kind as u8,
        "startTimeUnixNano": span.start_unix_nanos.to_string(),
        "endTimeUnixNano": span.end_unix_nanos.to_string(),
        "attributes": attributes,
        "links": links,
    });
    if let Some(parent) = span.parent_span_id {
        out["parentSpanId"] = format!("{parent:016x}").into();
    }
    if let Status::Error(why) = &span.status {
        out["status"] = json!({"code": 2, "message": why});
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_groups_of_seven_bits() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        varint(&mut out, (-1i64) as u64);
        assert_eq!(out.len(), 10);
    }
}
