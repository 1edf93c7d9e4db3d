//! `[[sources]]`: names, scheme keys, fingerprints, masks, `dedupe_on_body`, paths.

use super::*;

#[test]
fn sources_are_checked() {
    let source = |body: &str| format!("[[sources]]\nname = \"s\"\n{body}\n");
    let cases = [
        (
            "scheme = \"paypall\"\nsecrets = [\"x\"]",
            "sources[0].scheme",
        ),
        (
            "scheme = \"paypal\"\nwebhook_id = \"W\"\nsecrets = [\"x\"]",
            "sources[0].secrets",
        ),
        ("scheme = \"stripe\"\nsecrets = []", "sources[0].secrets"),
        (
            "scheme = \"standard\"\nsecrets = [\"whsec_***\"]",
            "sources[0].secrets[0]",
        ),
        (
            "scheme = \"stripe\"\nsecrets = [\"x\"]\nsignature_header = \"X\"",
            "sources[0].signature_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]",
            "sources[0].signature_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\ntype_header = \"T\"",
            "sources[0].id_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\nid_pointer = \"id\"\ntype_header = \"T\"",
            "sources[0].id_pointer",
        ),
        (
            "scheme = \"stripe\"\nsecrets = [\"x\"]\nevent_types = { \"a.b\" = \"\" }",
            "sources[0].event_types",
        ),
    ];
    for (body, key) in cases {
        let e = error(&source(body));
        assert!(e.contains(key), "{body}: {e}");
    }
    let twice = format!("{MINIMAL}{MINIMAL}");
    assert!(error(&twice).contains("sources[1].name"));
    let bad_name = "[[sources]]\nname = \"Bad Name\"\nscheme = \"stripe\"\nsecrets = [\"x\"]\n";
    assert!(error(bad_name).contains("sources[0].name"));
}

#[test]
fn stripe_sources_leave_volatile_fields_out_of_the_fingerprint_unless_told_otherwise() {
    let s = load(MINIMAL).expect("valid");
    assert_eq!(
        s.source("stripe")
            .expect("stripe")
            .fingerprint_ignore
            .to_vec(),
        ["/pending_webhooks", "/request"]
    );
    let s = load(&format!("{MINIMAL}fingerprint_ignore = []\n")).expect("valid");
    assert!(
        s.source("stripe")
            .expect("stripe")
            .fingerprint_ignore
            .is_empty()
    );
    let shop = "[[sources]]\nname = \"g\"\nscheme = \"github\"\nsecrets = [\"x\"]\n";
    assert!(
        load(shop).expect("valid").sources[0]
            .fingerprint_ignore
            .is_empty()
    );
    let e = error(&format!("{MINIMAL}fingerprint_ignore = [\"request\"]\n"));
    assert!(e.contains("sources[0].fingerprint_ignore[0]"), "{e}");
}

#[test]
fn a_sources_mask_adds_to_its_providers_defaults_unless_they_are_turned_off() {
    let mask = |extra: &str| load(&format!("{MINIMAL}{extra}")).map(|s| s.sources[0].mask.clone());
    let defaults = mask("").expect("valid");
    assert!(defaults.contains(&"/data/object/client_secret".to_string()));
    let own = mask("mask = [\"/data/object/metadata/*\"]\n").expect("valid");
    assert_eq!(own.len(), defaults.len() + 1);
    assert_eq!(
        own.last().map(String::as_str),
        Some("/data/object/metadata/*")
    );
    let only = mask("mask = [\"/data/x\"]\nmask_defaults = false\n").expect("valid");
    assert_eq!(only, ["/data/x"]);
    let e = error(&format!("{MINIMAL}mask = [\"/a\", \"email\"]\n"));
    assert!(e.contains("sources[0].mask[1]"), "{e}");
    let e = error(&format!("{MINIMAL}mask_defaults = \"no\"\n"));
    assert!(e.contains("mask_defaults"), "{e}");
}

#[test]
fn the_scheme_tag_may_follow_its_keys_and_errors_inside_name_their_key() {
    let hmac = "[[sources]]\nname = \"h\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\n\
                id_pointer = \"/id\"\ntype_header = \"T\"\nscheme = \"hmac\"\n";
    let s = load(hmac).expect("valid");
    let Scheme::Hmac(opts) = &s.sources[0].scheme else {
        panic!("not hmac: {:?}", s.sources[0].scheme);
    };
    assert_eq!(opts.encoding, Encoding::Hex);
    assert_eq!(opts.id, Locator::Pointer("/id".into()));
    let e = error(&hmac.replace("scheme", "signature_encoding = \"b64\"\nscheme"));
    assert!(
        e.ends_with("sources[0].signature_encoding: \"b64\" is not one of hex, base64"),
        "{e}"
    );
    let svix = "[[sources]]\nname = \"s\"\nscheme = \"svix\"\nsecrets = [\"whsec_c2VjcmV0\"]\n";
    assert_eq!(
        load(svix).expect("valid").sources[0].scheme,
        Scheme::Standard
    );
    let e = error(&format!("{svix}type_pointer = \"/t\"\nid_header = \"I\"\n"));
    assert!(
        e.ends_with("sources[0].id_header: only applies to scheme \"hmac\""),
        "{e}"
    );
}

#[test]
fn dedupe_on_body_is_on_where_the_id_or_type_is_unsigned_and_refused_elsewhere() {
    let shipped = load(include_str!("../../../hookd.toml")).expect("shipped hookd.toml");
    let on: Vec<(&str, bool)> = shipped
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.dedupe_on_body))
        .collect();
    assert_eq!(
        on,
        [
            ("stripe", false),
            ("standard", false),
            ("github", true),
            ("shop", true),
            ("adyen", false),
            ("paddle", false),
            ("square", false),
            ("razorpay", true),
            ("checkout", false),
            ("gocardless", false),
            ("paypal", false),
            ("braintree", false)
        ]
    );
    let github = "[[sources]]\nname = \"g\"\nscheme = \"github\"\nsecrets = [\"x\"]\n";
    let off = load(&format!("{github}dedupe_on_body = false\n")).expect("valid");
    assert!(!off.sources[0].dedupe_on_body);
    let e = error(&format!("{github}dedupe_on_body = \"no\"\n"));
    assert!(e.contains("sources[0].dedupe_on_body"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // A generic source signs its identity when both come from the body.
    let hmac = "[[sources]]\nname = \"h\"\nscheme = \"hmac\"\nsecrets = [\"x\"]\n\
                signature_header = \"S\"\nid_pointer = \"/id\"\n";
    let typed = load(&format!("{hmac}type_header = \"T\"\n")).expect("valid");
    assert!(
        typed.sources[0].dedupe_on_body,
        "the type header is unsigned"
    );
    for signed in [
        format!("{hmac}type_pointer = \"/type\"\n"),
        MINIMAL.to_string(),
        "[[sources]]\nname = \"s\"\nscheme = \"standard\"\nsecrets = [\"whsec_c2VjcmV0\"]\n"
            .to_string(),
    ] {
        assert!(!load(&signed).expect("valid").sources[0].dedupe_on_body);
        let e = error(&format!("{signed}dedupe_on_body = true\n"));
        assert!(
            e.ends_with(
                "sources[0].dedupe_on_body: only applies to sources whose event id or type is \
                 not signed (scheme \"github\" or \"razorpay\", or \"hmac\" with id_header or \
                 type_header)"
            ),
            "{e}"
        );
    }
}

#[test]
fn relative_file_paths_are_read_from_the_configuration_files_folder() {
    let shipped = include_str!("../../../hookd.toml");
    let beside = concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml");
    assert!(Settings::from_toml(beside, shipped, &HashMap::new()).is_ok());
    let elsewhere = concat!(env!("CARGO_MANIFEST_DIR"), "/elsewhere/hookd.toml");
    let e = Settings::from_toml(elsewhere, shipped, &HashMap::new())
        .expect_err("no certificate there")
        .to_string();
    assert!(
        e.contains("certificates[0]") && e.contains("/elsewhere/fixtures/paypal/"),
        "{e}"
    );
}
