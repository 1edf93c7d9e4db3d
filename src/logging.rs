//! Log lines as JSON (`HOOKD_LOG_FORMAT=json`): one object per line with
//! `timestamp` (RFC 3339, UTC), `level`, `target` and `message`, and a line's
//! structured fields (the delivery's source, event id, outcome, …) as keys of
//! their own, for log pipelines that index fields rather than parse text, and the
//! `trace_id` and `span_id` of the span it was written in when traces are
//! exported. And the
//! database driver held at `info`, whose debug lines carry statement parameters.

use std::io::Write;

use log::kv::{self, VisitSource, VisitValue};
use serde_json::{Map, Value};

/// The driver logs every statement's parameters at debug (bodies, signature
/// headers, the server secret): `RUST_LOG=debug` must not write them out.
const DRIVER: &str = "tokio_postgres";

/// Holds `tokio_postgres` at `info` when `spec` (`RUST_LOG`) would let its debug
/// lines through without naming it: only an explicit `tokio_postgres=…` directive
/// lets an operator see them all. A directive naming one of its modules
/// (`tokio_postgres::connection=debug`) opens that module alone, never the
/// statements' parameters of `tokio_postgres::query` beside it.
pub fn hold_back_driver(logger: &mut env_logger::Builder, spec: &str) {
    if names_driver(spec) {
        return;
    }
    let debug = log::Metadata::builder()
        .target(DRIVER)
        .level(log::Level::Debug)
        .build();
    let probe = env_logger::Builder::new().parse_filters(spec).build();
    if log::Log::enabled(&probe, &debug) {
        logger.filter_module(DRIVER, log::LevelFilter::Info);
    }
}

/// Whether a directive of `spec` names the whole driver.
fn names_driver(spec: &str) -> bool {
    let directives = spec.split('/').next().unwrap_or_default();
    directives.split(',').any(|directive| {
        let module = directive.split('=').next().unwrap_or_default().trim();
        module == DRIVER
    })
}

/// An `env_logger` format: the record as one JSON object on one line.
pub fn json_line(out: &mut impl Write, record: &log::Record<'_>) -> std::io::Result<()> {
    writeln!(out, "{}", Value::Object(json_object(record)))
}

pub fn json_object(record: &log::Record<'_>) -> Map<String, Value> {
    let mut line = Map::new();
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    line.insert("timestamp".into(), timestamp.into());
    line.insert(
        "level".into(),
        record.level().as_str().to_ascii_lowercase().into(),
    );
    line.insert("target".into(), record.target().into());
    line.insert("message".into(), record.args().to_string().into());
    // The span the line is written in, when traces are exported.
    if let Some((trace_id, span_id)) = crate::traces::current_ids() {
        line.insert("trace_id".into(), format!("{trace_id:032x}").into());
        line.insert("span_id".into(), format!("{span_id:016x}").into());
    }
    let _ = record.key_values().visit(&mut Fields(&mut line));
    line
}

/// Adds each field, without replacing the four above.
struct Fields<'a>(&'a mut Map<String, Value>);

impl<'kvs> VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(&mut self, key: kv::Key<'kvs>, value: kv::Value<'kvs>) -> Result<(), kv::Error> {
        let mut json = Value::Null;
        value.visit(ToJson(&mut json))?;
        self.0.entry(key.as_str()).or_insert(json);
        Ok(())
    }
}

struct ToJson<'a>(&'a mut Value);

impl<'v> VisitValue<'v> for ToJson<'_> {
    fn visit_any(&mut self, value: kv::Value<'_>) -> Result<(), kv::Error> {
        *self.0 = Value::String(value.to_string());
        Ok(())
    }

    fn visit_null(&mut self) -> Result<(), kv::Error> {
        *self.0 = Value::Null;
        Ok(())
    }

    fn visit_u64(&mut self, value: u64) -> Result<(), kv::Error> {
        *self.0 = value.into();
        Ok(())
    }

    fn visit_i64(&mut self, value: i64) -> Result<(), kv::Error> {
        *self.0 = value.into();
        Ok(())
    }

    fn visit_f64(&mut self, value: f64) -> Result<(), kv::Error> {
        // NaN and infinities are not JSON numbers.
        *self.0 = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        Ok(())
    }

    fn visit_bool(&mut self, value: bool) -> Result<(), kv::Error> {
        *self.0 = value.into();
        Ok(())
    }

    fn visit_str(&mut self, value: &str) -> Result<(), kv::Error> {
        *self.0 = value.into();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver_debug_logged(spec: &str) -> bool {
        let mut logger = env_logger::Builder::new();
        logger.parse_filters(spec);
        hold_back_driver(&mut logger, spec);
        let logger = logger.build();
        let debug = |target| {
            log::Metadata::builder()
                .target(target)
                .level(log::Level::Debug)
                .build()
        };
        assert_eq!(
            log::Log::enabled(&logger, &debug("hookd::http")),
            log::Log::enabled(
                &env_logger::Builder::new().parse_filters(spec).build(),
                &debug("hookd::http")
            ),
            "{spec}: hookd's own lines are left as they were"
        );
        log::Log::enabled(&logger, &debug("tokio_postgres::query"))
    }

    #[test]
    fn the_driver_stays_at_info_unless_a_directive_names_it() {
        for held in [
            "debug",
            "trace",
            "info,tokio=debug",
            "hookd=debug,debug",
            "debug/select",
            "debug,tokio_postgres::connection=debug",
        ] {
            assert!(!driver_debug_logged(held), "{held}");
        }
        for explicit in [
            "debug,tokio_postgres=debug",
            "tokio_postgres=trace",
            "info,tokio_postgres::query=debug",
        ] {
            assert!(driver_debug_logged(explicit), "{explicit}");
        }
        // Nothing is raised: at warn the driver's info lines stay out too.
        let mut logger = env_logger::Builder::new();
        logger.parse_filters("warn");
        hold_back_driver(&mut logger, "warn");
        let info = log::Metadata::builder()
            .target("tokio_postgres")
            .level(log::Level::Info)
            .build();
        assert!(!log::Log::enabled(&logger.build(), &info));
    }

    #[test]
    fn a_record_is_one_json_object_with_its_fields_as_keys() {
        let event_id: Option<&str> = Some("evt_\"1\"\n");
        let kind: Option<&str> = None;
        let pairs: [(&str, kv::Value<'_>); 6] = [
            ("source", kv::Value::from("stripe")),
            ("event_id", kv::ToValue::to_value(&event_id)),
            ("kind", kv::ToValue::to_value(&kind)),
            ("status", kv::Value::from(200u16)),
            ("latency_ms", kv::Value::from(3.5f64)),
            ("message", kv::Value::from("not the message")),
        ];
        let record = log::Record::builder()
            .args(format_args!("delivery line"))
            .level(log::Level::Info)
            .target("hookd::http::receive")
            .key_values(&pairs)
            .build();
        let mut out = Vec::new();
        json_line(&mut out, &record).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(text.matches('\n').count(), 1, "one line: {text}");
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(value["level"], "info");
        assert_eq!(value["target"], "hookd::http::receive");
        assert_eq!(value["message"], "delivery line");
        assert_eq!(value["source"], "stripe");
        assert_eq!(value["event_id"], "evt_\"1\"\n");
        assert_eq!(value["kind"], Value::Null);
        assert_eq!(value["status"], 200);
        assert_eq!(value["latency_ms"], 3.5);
        let timestamp = value["timestamp"].as_str().expect("timestamp");
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{timestamp}"
        );
    }
}
