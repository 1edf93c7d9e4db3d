//! `[[forwards]]`: read, matched, and refused with their key.

use super::*;

const FORWARD: &str = r#"
[[forwards]]
name = "billing"
url = "http://127.0.0.1:9000/hooks"
secret = "whsec_Zm9yd2FyZC10ZXN0LXNlY3JldC0zMi1ieXRlcy1sb25nISE="
kinds = ["payment_succeeded"]
types = ["invoice.paid"]
sources = ["stripe"]
timeout = "3s"
"#;

#[test]
fn forwards_are_read_and_match_by_kind_type_and_source() {
    let s = load(&format!("{MINIMAL}{FORWARD}")).expect("valid");
    let f = &s.forwards[0];
    assert_eq!(
        (f.name.as_str(), f.timeout),
        ("billing", Duration::from_secs(3))
    );
    assert_eq!(f.handler_name().to_string(), "forward:billing");
    assert!(f.matches(
        "stripe",
        "payment_intent.succeeded",
        Some("payment_succeeded")
    ));
    assert!(f.matches("stripe", "invoice.paid", None));
    assert!(!f.matches("stripe", "customer.created", None));
    assert!(!f.matches("shop", "invoice.paid", None), "another source");
    let every = load(&format!(
        "{MINIMAL}[[forwards]]\nname = \"all\"\nurl = \"https://x.example/h\"\n\
         secret = \"whsec_c2VjcmV0\"\ntypes = [\"*\"]\n"
    ))
    .expect("valid");
    assert!(every.forwards[0].matches("anything", "any.type", None));
    assert_eq!(every.forwards[0].timeout, Duration::from_secs(10));
    assert!(
        !format!("{every:?}").contains("c2VjcmV0"),
        "the secret is redacted"
    );
}

#[test]
fn bad_forwards_name_their_key() {
    let cases = [
        (
            FORWARD.replace("http://127.0.0.1:9000/hooks", "ftp://x"),
            "forwards[0].url",
        ),
        (
            FORWARD.replace("whsec_Zm9y", "whsec_***"),
            "forwards[0].secret",
        ),
        (
            FORWARD
                .replace("kinds = [\"payment_succeeded\"]\n", "")
                .replace("types = [\"invoice.paid\"]\n", ""),
            "forwards[0].kinds",
        ),
        (
            FORWARD.replace("[\"stripe\"]", "[\"nope\"]"),
            "forwards[0].sources[0]",
        ),
        (
            FORWARD.replace("\"billing\"", "\"bill ing\""),
            "forwards[0].name",
        ),
        (format!("{FORWARD}{FORWARD}"), "forwards[1].name"),
        (
            FORWARD.replace("timeout = \"3s\"", "timout = \"3s\""),
            "timout",
        ),
        (
            FORWARD.replace("timeout = \"3s\"", "timeout = \"61s\""),
            "forwards[0].timeout",
        ),
    ];
    for (forward, key) in cases {
        let e = error(&format!("{MINIMAL}{forward}"));
        assert!(e.contains(key), "{key}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn forward_urls_with_credentials_are_refused_without_showing_them() {
    for url in [
        "http://hookd:s3cr3t@127.0.0.1:9000/hooks",
        "https://:s3cr3t@x.example/h",
        "https://hookd@x.example/h",
        "ftp://hookd:s3cr3t@x.example/h",
    ] {
        let text = FORWARD.replace("http://127.0.0.1:9000/hooks", url);
        let e = error(&format!("{MINIMAL}{text}"));
        assert!(e.contains("forwards[0].url"), "{e}");
        assert!(!e.contains("s3cr3t") && !e.contains("hookd@"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let capped = FORWARD.replace("timeout = \"3s\"", "timeout = \"60s\"");
    let s = load(&format!("{MINIMAL}{capped}")).expect("60s is the cap");
    assert_eq!(s.forwards[0].timeout, Duration::from_secs(60));
}

#[test]
fn a_forward_shows_its_url_without_the_query() {
    let text = FORWARD.replace(
        "http://127.0.0.1:9000/hooks",
        "https://x.example:8443/in/hooks?token=abc",
    );
    let s = load(&format!("{MINIMAL}{text}")).expect("valid");
    assert_eq!(s.forwards[0].endpoint(), "https://x.example:8443/in/hooks");
}
