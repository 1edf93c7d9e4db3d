use super::*;
use super::{Encoding, GenericHmac};

fn every_scheme() -> Vec<Scheme> {
    vec![
        Scheme::Stripe,
        Scheme::Standard,
        Scheme::Github,
        Scheme::Adyen(Default::default()),
        Scheme::Paddle,
        Scheme::Square(square::ANY.clone()),
        Scheme::Razorpay,
        Scheme::Checkout(checkout::ANY.clone()),
        Scheme::GoCardless,
        Scheme::PayPal(paypal::ANY.clone()),
        Scheme::Braintree,
        Scheme::Mollie(mollie::ANY.clone()),
        Scheme::Hmac(GenericHmac {
            signature_header: "X-Sig".into(),
            encoding: Encoding::Hex,
            prefix: String::new(),
            id: Locator::Pointer("/id".into()),
            event_type: Locator::Header("X-Topic".into()),
            timestamp_header: None,
        }),
    ]
}

#[test]
fn each_scheme_has_its_provider_and_the_list_holds_every_one() {
    for scheme in every_scheme() {
        let provider = scheme.provider();
        assert_eq!(provider.name(), scheme.name());
        let listed = named(scheme.name()).expect("listed");
        assert_eq!(listed.name(), scheme.name());
        assert_eq!(listed.payment_shape(), provider.payment_shape());
    }
    assert_eq!(REGISTRY.len(), every_scheme().len());
}

#[test]
fn hmac_keys_are_the_fields_of_raw_hmac() {
    let e = toml::from_str::<hmac::RawHmac>("bogus = 1").expect_err("refused");
    assert_eq!(
        e.message(),
        crate::config_keys::unknown_key("bogus", hmac::KEYS)
    );
}

#[test]
fn hookd_secret_takes_the_names_it_always_took() {
    assert_eq!(
        names()[..5],
        ["stripe", "standard", "svix", "github", "hmac"]
    );
    assert!(names().contains(&"adyen"));
    assert_eq!(named("svix").map(|p| p.name()), Some("standard"));
    assert!(named("nosuchprovider").is_none());
}

#[test]
fn only_stripe_has_defaults_and_its_own_payment_shape() {
    for scheme in every_scheme() {
        let provider = scheme.provider();
        let stripe = scheme == Scheme::Stripe;
        // Square's and Braintree's one static type and Paddle's transactions
        // (their others depend on the payload).
        let typed = stripe
            || scheme == Scheme::Paddle
            || matches!(scheme, Scheme::Square(_))
            || scheme == Scheme::Razorpay
            || matches!(scheme, Scheme::Checkout(_))
            || scheme == Scheme::GoCardless
            || matches!(scheme, Scheme::PayPal(_))
            || scheme == Scheme::Braintree;
        assert_eq!(!provider.default_event_types().is_empty(), typed);
        // Stripe's volatile fields, Paddle's id of each notification, and the
        // parts of a Mollie payment that change without a call.
        let volatile = stripe || scheme == Scheme::Paddle || matches!(scheme, Scheme::Mollie(_));
        assert_eq!(!provider.default_fingerprint_ignore().is_empty(), volatile);
        assert_eq!(provider.payment_shape() != PaymentShape::NEUTRAL, stripe);
        assert_eq!(provider.names_events_by_file(), scheme == Scheme::Github);
    }
}

#[test]
fn schemes_that_sign_no_time_read_the_providers_own_from_the_payload() {
    let at = |rfc3339: &str| {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .expect("time")
            .with_timezone(&chrono::Utc)
    };
    let cases = [
        (
            Scheme::Adyen(Default::default()),
            serde_json::json!({"eventDate": "2024-06-12T12:32:47+02:00"}),
        ),
        (
            Scheme::GoCardless,
            serde_json::json!({"created_at": "2024-06-12T10:32:47.000Z"}),
        ),
        (
            Scheme::Square(square::ANY.clone()),
            serde_json::json!({"created_at": "2024-06-12T10:32:47Z"}),
        ),
        (
            Scheme::Braintree,
            serde_json::json!({"timestamp": "2024-06-12T10:32:47Z"}),
        ),
        (
            Scheme::Razorpay,
            serde_json::json!({"created_at": 1_718_188_367}),
        ),
        (
            Scheme::Checkout(checkout::ANY.clone()),
            serde_json::json!({"created_on": "2024-06-12T10:32:47Z"}),
        ),
    ];
    for (scheme, payload) in cases {
        assert_eq!(
            scheme.provider().unsigned_time(&payload),
            Some(at("2024-06-12T10:32:47Z")),
            "{}",
            scheme.name()
        );
        assert_eq!(
            scheme.provider().unsigned_time(&serde_json::json!({})),
            None
        );
    }
    // A scheme that signs its time has none to show, whatever the payload says.
    let created =
        serde_json::json!({"created": 1_718_188_367, "created_at": "2024-06-12T10:32:47Z"});
    for scheme in [
        Scheme::Stripe,
        Scheme::Standard,
        Scheme::Paddle,
        Scheme::PayPal(paypal::ANY.clone()),
    ] {
        assert_eq!(
            scheme.provider().unsigned_time(&created),
            None,
            "{}",
            scheme.name()
        );
    }
}
