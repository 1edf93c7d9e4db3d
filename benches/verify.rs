//! `cargo bench --bench verify`: signature verification of a 2 KiB body, one
//! thread (one core), for each scheme: what verifying costs on the delivery path.
//! The body is signed once; every iteration checks the header, computes the MAC
//! over the whole body and compares it in constant time, as a delivery does.

use std::hint::black_box;
use std::time::{Duration, Instant};

use hookd::providers::{self, Encoding, GenericHmac, Locator, Scheme, Verifier};
use hookd::signature::{Envelope, Secret};

const BODY_BYTES: usize = 2048;
const RUN: Duration = Duration::from_secs(2);

fn main() {
    let mut body = br#"{"id":"evt_verify","type":"payment_intent.succeeded","pad":""#.to_vec();
    body.resize(BODY_BYTES - 2, b'x');
    body.extend_from_slice(b"\"}");
    let now = 1_764_600_000;
    let envelope = Envelope {
        event_id: "evt_verify",
        event_type: "payment_intent.succeeded",
        timestamp: now,
    };
    let schemes = [
        (Scheme::Stripe, "whsec_bench_stripe_secret_0123456789"),
        (
            Scheme::Standard,
            "whsec_YmVuY2gtc3RhbmRhcmQtc2VjcmV0LTMyLWJ5dGVzISE=",
        ),
        (Scheme::Github, "bench-github-secret"),
        (
            Scheme::Hmac(GenericHmac {
                signature_header: "X-Shopify-Hmac-Sha256".into(),
                encoding: Encoding::Base64,
                prefix: String::new(),
                id: Locator::Header("X-Shopify-Webhook-Id".into()),
                event_type: Locator::Header("X-Shopify-Topic".into()),
                timestamp_header: None,
            }),
            "bench-shop-secret",
        ),
    ];
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let sha_ni = cpu.contains(" sha_ni");
    println!(
        "signature verification of a {BODY_BYTES}-byte body, one thread, {} s per scheme; \
         {model}; SHA extensions: {}",
        RUN.as_secs(),
        if sha_ni { "yes" } else { "no" }
    );
    for (scheme, secret) in schemes {
        let secrets = [Secret::new(secret)];
        let headers = providers::sign(&scheme, &secrets[0], &body, &envelope)
            .expect("sign")
            .headers;
        let verifier = Verifier {
            scheme: &scheme,
            secrets: &secrets,
            tolerance: Duration::from_secs(300),
        };
        assert!(verifier.verify(&headers, &body, now).is_ok());
        let started = Instant::now();
        let mut done: u64 = 0;
        while started.elapsed() < RUN {
            for _ in 0..1000 {
                black_box(verifier.verify(black_box(&headers), black_box(&body), now)).ok();
            }
            done += 1000;
        }
        let per_second = done as f64 / started.elapsed().as_secs_f64();
        println!(
            "{:<9} {:>9.0} verifications/s ({:.2} µs each; {:.2} GB/s of body)",
            scheme.name(),
            per_second,
            1e6 / per_second,
            per_second * BODY_BYTES as f64 / 1e9
        );
    }
}
