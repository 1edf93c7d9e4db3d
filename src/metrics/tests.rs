use std::sync::Arc;

use super::*;

/// The calls behind `exposition.golden.txt`, which the mutex-and-map metrics
/// before these rendered: the text a scraper reads is unchanged.
fn count_the_golden_calls(m: &Metrics) {
    m.delivery("stripe", "processed");
    m.delivery("stripe", "processed");
    m.delivery("unknown", "unknown_source");
    m.delivery("github", "invalid_signature");
    m.delivery("stripe", "duplicate");
    m.delivery("we\"ird\\", "accepted");
    m.signature_failure("github", &SignatureError::Mismatch);
    m.signature_failure(
        "github",
        &SignatureError::Missing("Stripe-Signature".into()),
    );
    m.duplicate("stripe");
    m.delivery_duration("stripe", Duration::from_millis(3));
    m.delivery_duration("stripe", Duration::from_millis(20));
    m.delivery_duration("unknown", Duration::from_secs(12));
    m.event(Some("payment_succeeded"), EventStatus::Processed);
    m.event(None, EventStatus::Ignored);
    m.event(Some("an_old_kind"), EventStatus::Dead);
    m.handler_duration("forward:billing", Duration::from_micros(40_500));
    m.handler_duration("payment_succeeded", Duration::from_millis(1));
    m.forward("billing", ForwardOutcome::Failed);
    m.forward("billing", ForwardOutcome::Delivered);
    m.ingest_batch(3);
    for (what, n) in [
        (Purged::Payload, 0),
        (Purged::Key, 5),
        (Purged::IdempotencyKey, 1),
        (Purged::RevokedSession, 0),
        (Purged::AuditEntry, 2),
    ] {
        m.purged(what, n);
    }
    m.purge_run(true);
    m.config_reload(true);
    m.config_reload(false);
    m.config_reload(true);
    m.gateway_request("payments", GatewayOutcome::Sent);
    m.gateway_request("payments", GatewayOutcome::Replayed);
    m.gateway_request("payments", GatewayOutcome::Sent);
    m.gateway_upstream("payments", Duration::from_millis(3));
}

fn configured() -> Metrics {
    Metrics::knowing(Known {
        sources: vec!["stripe", "github"],
        kinds: vec!["payment_succeeded", "payment_failed"],
        handlers: vec!["payment_succeeded".into(), "forward:billing".into()],
        forwards: vec!["billing"],
        routes: vec!["payments"],
    })
}

#[test]
fn the_exposition_is_the_one_scrapers_read_before() {
    let golden = include_str!("exposition.golden.txt")
        .replace("{version}", env!("CARGO_PKG_VERSION"))
        .replace("{revision}", crate::version::REVISION);
    let gauges = [(Metric::Ready, 1.0), (Metric::ProcessOpenFds, 9.0)];
    // Label values known from the configuration and first seen at runtime alike.
    for metrics in [configured(), Metrics::default()] {
        count_the_golden_calls(&metrics);
        let text = metrics.render(&gauges);
        for (line, (got, want)) in text.lines().zip(golden.lines()).enumerate() {
            assert_eq!(got, want, "line {}", line + 1);
        }
        assert_eq!(text.lines().count(), golden.lines().count());
    }
}

#[test]
fn nothing_but_the_internal_errors_the_reloads_and_the_purges_is_shown_before_counting() {
    let text = configured().render(&[]);
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let version = format!(
        "hookd_build_info{{version=\"{}\",revision=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        crate::version::REVISION
    );
    assert_eq!(
        samples,
        [
            "hookd_internal_errors_total 0",
            "hookd_purge_runs_total{result=\"error\"} 0",
            "hookd_purge_runs_total{result=\"ok\"} 0",
            "hookd_config_reloads_total{result=\"error\"} 0",
            "hookd_config_reloads_total{result=\"ok\"} 0",
            version.as_str()
        ]
    );
}

/// The sample lines of `name` whose labels hold `labels`, with their values.
fn value(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {sample} in:\n{text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{sample}: {e}"))
}

#[test]
fn many_threads_counting_at_once_lose_no_counts() {
    const THREADS: u64 = 8;
    const EACH: u64 = 20_000;
    let metrics = Arc::new(configured());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let metrics = metrics.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    // A configured source, a value every thread sees first at
                    // runtime, and one per thread.
                    metrics.delivery("stripe", "processed");
                    metrics.event(Some("an_old_kind"), EventStatus::Failed);
                    let own = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];
                    metrics.handler_duration(own[t as usize], Duration::from_micros(i % 3000));
                    metrics.handler_duration("payment_succeeded", Duration::from_millis(2));
                    metrics.ingest_batch(2);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("counting thread");
    }
    let text = metrics.render(&[]);
    let all = THREADS * EACH;
    assert_eq!(
        value(
            &text,
            r#"hookd_deliveries_total{source="stripe",outcome="processed"}"#
        ),
        all
    );
    assert_eq!(
        value(
            &text,
            r#"hookd_events_total{kind="an_old_kind",status="failed"}"#
        ),
        all
    );
    assert_eq!(value(&text, "hookd_ingest_batches_total"), all);
    assert_eq!(
        value(&text, "hookd_ingest_batched_deliveries_total"),
        2 * all
    );
    let handlers = "hookd_handler_duration_seconds";
    assert_eq!(
        value(
            &text,
            &format!(r#"{handlers}_count{{kind="payment_succeeded"}}"#)
        ),
        all
    );
    assert_eq!(
        value(
            &text,
            &format!(r#"{handlers}_bucket{{kind="payment_succeeded",le="0.001"}}"#)
        ),
        0
    );
    assert_eq!(
        value(
            &text,
            &format!(r#"{handlers}_bucket{{kind="payment_succeeded",le="0.0025"}}"#)
        ),
        all
    );
    for kind in ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"] {
        assert_eq!(
            value(&text, &format!(r#"{handlers}_count{{kind="{kind}"}}"#)),
            EACH
        );
        // Under 1 ms: i % 3000 µs below 1000, a third of them.
        assert_eq!(
            value(
                &text,
                &format!(r#"{handlers}_bucket{{kind="{kind}",le="0.001"}}"#)
            ),
            (0..EACH).filter(|i| i % 3000 <= 1000).count() as u64
        );
    }
}

#[test]
fn the_configurations_label_values_need_no_series_added_at_runtime() {
    let text = include_str!("../../hookd.toml");
    let settings = Settings::from_toml("hookd.toml", text, &Default::default())
        .unwrap_or_else(|e| panic!("hookd.toml: {e}"));
    let metrics = Metrics::new(&settings);
    for source in ["stripe", "standard", "github", "shop", "square", "unknown"] {
        metrics.delivery(source, "processed");
        metrics.delivery_duration(source, Duration::from_millis(1));
        metrics.signature_failure(source, &SignatureError::TooOld { seconds: 600 });
    }
    for status in EventStatus::ALL {
        metrics.event(Some("payment_succeeded"), status);
        metrics.event(None, status);
    }
    metrics.handler_duration("payment_refunded", Duration::from_millis(1));
    assert_eq!(metrics.deliveries.added_later(), 0);
    assert_eq!(metrics.delivery_duration.added_later(), 0);
    assert_eq!(metrics.signature_failures.added_later(), 0);
    assert_eq!(metrics.events.added_later(), 0);
    assert_eq!(metrics.handler_duration.added_later(), 0);
    // A kind an older configuration stored is counted all the same.
    metrics.event(Some("an_old_kind"), EventStatus::Dead);
    assert_eq!(metrics.events.added_later(), 1);
    assert!(
        metrics
            .render(&[])
            .contains("hookd_events_total{kind=\"an_old_kind\",status=\"dead\"} 1\n")
    );
}
