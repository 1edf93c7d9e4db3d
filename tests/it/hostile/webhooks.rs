//! Webhook deliveries that never get past the signature check: hostile headers
//! and framing headers, odd bodies sent unsigned, methods and paths.

use super::{
    Cases, EVENT, Req, SOURCES, Session, UNKNOWN_SOURCE, post, req, webhook, webhook_family,
};

surface!(
    "webhooks",
    435,
    webhook_cases_get_answers_below_500_and_store_nothing
);

/// A case name, the framing headers a request carries, and its body.
type Framing<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8]);

/// Requests whose headers are hostile, for one webhook path (unsigned, so never
/// past the signature check).
fn header_cases(cases: &mut Cases, source: &str) {
    let family = webhook_family(source);
    let path = webhook(source);
    let base = || post(&path).json(EVENT);
    let big = |n: usize| "a".repeat(n);
    cases.anon(family, "no headers, empty body", post(&path));
    cases.anon(family, "unsigned event", base());
    cases.anon(
        family,
        "64 KB header value",
        base().header("X-Junk", big(64 * 1024)),
    );
    cases.anon(
        family,
        "200 KB header value (over the head limit)",
        base().header("X-Junk", big(200 * 1024)),
    );
    let mut many = base();
    for i in 0..90 {
        many = many.header(format!("X-Many-{i}"), "v");
    }
    cases.anon(family, "90 headers", many);
    let mut too_many = base();
    for i in 0..200 {
        too_many = too_many.header(format!("X-Many-{i}"), "v");
    }
    cases.anon(family, "200 headers", too_many);
    let mut same = base();
    for _ in 0..80 {
        same = same.header("X-Same", "v");
    }
    cases.anon(family, "one header repeated 80 times", same);
    let framing: [Framing; 14] = [
        (
            "duplicate equal Content-Length",
            &[("Content-Length", "2"), ("Content-Length", "2")],
            b"{}",
        ),
        (
            "duplicate differing Content-Length",
            &[("Content-Length", "2"), ("Content-Length", "3")],
            b"{}x",
        ),
        ("Content-Length list", &[("Content-Length", "2, 2")], b"{}"),
        (
            "Content-Length and chunked",
            &[("Content-Length", "2"), ("Transfer-Encoding", "chunked")],
            b"2\r\n{}\r\n0\r\n\r\n",
        ),
        (
            "chunked then Content-Length",
            &[("Transfer-Encoding", "chunked"), ("Content-Length", "40")],
            b"2\r\n{}\r\n0\r\n\r\n",
        ),
        (
            "negative Content-Length",
            &[("Content-Length", "-1")],
            b"{}",
        ),
        (
            "overflowing Content-Length",
            &[("Content-Length", "99999999999999999999")],
            b"{}",
        ),
        (
            "Content-Length with plus sign",
            &[("Content-Length", "+2")],
            b"{}",
        ),
        ("hex Content-Length", &[("Content-Length", "0x2")], b"{}"),
        (
            "Content-Length with inner space",
            &[("Content-Length", "1 1")],
            b"{}",
        ),
        ("Content-Length 1e1", &[("Content-Length", "1e1")], b"{}"),
        ("empty Content-Length", &[("Content-Length", "")], b"{}"),
        (
            "Content-Length of 1 GB, 2 bytes sent",
            &[("Content-Length", "1073741824")],
            b"{}",
        ),
        (
            "Content-Length 0 with a body",
            &[("Content-Length", "0")],
            b"{}",
        ),
    ];
    for (name, headers, body) in framing {
        let mut r = post(&path).no_length().body(body);
        for (n, v) in headers {
            r = r.header(n, v);
        }
        cases.anon(family, name, r);
    }
    let xff = "1.2.3.4, ".repeat(5000);
    let long_type = format!("application/json; x={}", big(10_000));
    let values: [(&str, &str, &[u8]); 9] = [
        ("latin-1 byte in a header value", "X-Name", b"caf\xe9"),
        (
            "invalid UTF-8 in a header value",
            "X-Name",
            b"\xff\xfe\xc0\xaf",
        ),
        ("UTF-8 in a header value", "X-Name", "ünïcödé ✓".as_bytes()),
        ("NUL in a header value", "X-Name", b"a\x00b"),
        ("DEL in a header value", "X-Name", b"a\x7fb"),
        ("bare CR in a header value", "X-Name", b"a\rb"),
        (
            "garbage X-Forwarded-For",
            "X-Forwarded-For",
            b"not-an-ip, ::ffff:zz, 999.1.1.1",
        ),
        ("huge X-Forwarded-For", "X-Forwarded-For", xff.as_bytes()),
        ("latin-1 Host", "Host", b"h\xf6st"),
    ];
    for (name, header, value) in values {
        cases.anon(family, name, base().header(header, value));
    }
    cases.anon(
        family,
        "header name with a space",
        base().header("Bad Header", "x"),
    );
    cases.anon(
        family,
        "header name with latin-1",
        base().header(b"X-N\xe4me".as_slice(), "x"),
    );
    cases.anon(family, "empty header name", base().header("", "x"));
    cases.anon(
        family,
        "obs-fold continuation line",
        base().header("X-Folded", "a\r\n  continued"),
    );
    cases.anon(family, "no Host", base().no_host());
    cases.anon(family, "two Hosts", base().header("Host", "evil.example"));
    let content_types = [
        ("charset utf-16", "application/json; charset=utf-16"),
        ("charset ebcdic", "application/json; charset=ebcdic-cp-us"),
        (
            "unterminated quoted charset",
            "application/json; charset=\"",
        ),
        ("text/plain", "text/plain"),
        (
            "multipart without boundary",
            "multipart/form-data; boundary=",
        ),
        ("content type of ;;;", ";;;;;;"),
        ("10 KB content type parameter", long_type.as_str()),
    ];
    for (name, value) in content_types {
        cases.anon(
            family,
            format!("Content-Type {name}"),
            post(&path).header("Content-Type", value).body(EVENT),
        );
    }
    let encodings: [(&str, &str, &[u8]); 5] = [
        ("gzip with garbage", "gzip", b"\x1f\x8b\x08\x00garbage"),
        ("gzip with JSON", "gzip", EVENT),
        ("br with garbage", "br", b"\xff\xff\xff"),
        ("gzip, gzip, gzip", "gzip, gzip, gzip", b"\x00\x01"),
        ("unknown coding", "x-hostile", EVENT),
    ];
    for (name, coding, body) in encodings {
        cases.anon(
            family,
            format!("Content-Encoding {name}"),
            base().header("Content-Encoding", coding).body(body),
        );
    }
    cases.anon(
        family,
        "Expect: 100-continue with the body",
        base().header("Expect", "100-continue"),
    );
    cases.anon(
        family,
        "Expect: garbage",
        base().header("Expect", "the-unexpected"),
    );
    cases.anon(
        family,
        "Upgrade: websocket",
        base()
            .header("Upgrade", "websocket")
            .header("Connection", "Upgrade"),
    );
    cases.anon(
        family,
        "Upgrade: h2c",
        base()
            .header("Upgrade", "h2c")
            .header("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
    );
    cases.anon(
        family,
        "Authorization junk",
        base().header("Authorization", "Bearer junk"),
    );
    cases.anon(
        family,
        "Cookie junk",
        base().header("Cookie", "hookd_session=a.b.c.d"),
    );
}

/// Hostile bodies, sent unsigned.
fn bodies() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", b"hello, webhook".to_vec()),
        ("10,000 [", "[".repeat(10_000).into_bytes()),
        (
            "10,000 nested objects",
            r#"{"a":"#.repeat(10_000).into_bytes(),
        ),
        (
            "1e999999",
            br#"{"id":"evt_1","type":"x","n":1e999999}"#.to_vec(),
        ),
        (
            "400-digit integer",
            format!(r#"{{"id":"evt_1","type":"x","n":{}}}"#, "9".repeat(400)).into_bytes(),
        ),
        (
            "-1e-999999",
            br#"{"id":"evt_1","type":"x","n":-1e-999999}"#.to_vec(),
        ),
        (
            "lone high surrogate",
            br#"{"id":"evt_1","type":"\ud800"}"#.to_vec(),
        ),
        (
            "lone low surrogate",
            br#"{"id":"\udc00","type":"x"}"#.to_vec(),
        ),
        (
            "invalid UTF-8",
            b"{\"id\":\"\xff\xfe\",\"type\":\"x\"}".to_vec(),
        ),
        (
            "overlong UTF-8",
            b"{\"id\":\"\xc0\xaf\",\"type\":\"x\"}".to_vec(),
        ),
        (
            "raw NUL bytes",
            b"{\"id\":\"a\x00b\",\"type\":\"x\x00\"}".to_vec(),
        ),
        (
            "escaped NUL",
            br#"{"id":"evt_\u0000","type":"x\u0000","data":{"k\u0000":"\u0000"}}"#.to_vec(),
        ),
        (
            "duplicate keys",
            br#"{"id":"evt_a","id":"evt_b","type":"x","type":"y"}"#.to_vec(),
        ),
        ("empty", Vec::new()),
        ("whitespace", b" \r\n\t ".to_vec()),
        (
            "byte order mark",
            [b"\xef\xbb\xbf".as_slice(), EVENT].concat(),
        ),
        ("UTF-16LE", EVENT.iter().flat_map(|b| [*b, 0]).collect()),
        (
            "trailing garbage",
            [EVENT, b"}}}garbage".as_slice()].concat(),
        ),
        ("top-level array", b"[]".to_vec()),
        ("top-level string", br#""evt""#.to_vec()),
        ("null", b"null".to_vec()),
        (
            "10,000 keys",
            format!(
                "{{{}}}",
                (0..10_000)
                    .map(|i| format!("\"k{i}\":{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
            .into_bytes(),
        ),
        ("1 MiB + 1 byte", vec![b' '; 1024 * 1024 + 1]),
        (
            "2 MiB of JSON",
            format!("[{}0]", "0,".repeat(1024 * 1024)).into_bytes(),
        ),
    ]
}

/// Hostile headers and unsigned bodies on each source's path (an unknown one
/// included), odd methods, and odd paths under `/webhooks`.
fn cases(cases: &mut Cases, _: &Session) {
    for source in SOURCES.iter().copied().chain([UNKNOWN_SOURCE]) {
        let family = webhook_family(source);
        header_cases(cases, source);
        for (name, body) in bodies() {
            cases.anon(
                family,
                format!("unsigned body: {name}"),
                post(webhook(source)).json(body),
            );
        }
    }
    let family = webhook_family("stripe");
    for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD"] {
        cases.anon(
            family,
            format!("method {method}"),
            req(method, "/webhooks/stripe").json(EVENT),
        );
    }
    let long_method = "P".repeat(10_000);
    for (name, method) in [
        ("garbage method FOO", "FOO"),
        ("method P0ST", "P0ST"),
        ("lowercase post", "post"),
        ("method with a slash", "PO/ST"),
        ("10,000-letter method", long_method.as_str()),
    ] {
        cases.anon(family, name, req(method, "/webhooks/stripe").json(EVENT));
    }
    cases.anon(
        family,
        "method with a control byte",
        Req {
            method: b"PO\x01ST".to_vec(),
            ..post("/webhooks/stripe").json(EVENT)
        },
    );
    let family = "webhook paths";
    let long_segment = format!("/webhooks/{}", "s".repeat(10_000));
    for (name, path) in [
        ("extra segment", "/webhooks/stripe/extra"),
        ("trailing slash", "/webhooks/stripe/"),
        ("no source", "/webhooks/"),
        ("no slash", "/webhooks"),
        ("dot-dot source", "/webhooks/.."),
        ("dot-dot to healthz", "/webhooks/../healthz"),
        ("encoded dot-dot", "/webhooks/%2e%2e/admin"),
        ("NUL after the source", "/webhooks/stripe%00"),
        ("encoded letters", "/webhooks/str%69pe"),
        ("encoded slash", "/webhooks/%2F"),
        ("encoded slash inside", "/webhooks/stripe%2Fextra"),
        ("10,000-byte source", long_segment.as_str()),
        ("percent FF", "/webhooks/%FF"),
        ("lone percent", "/webhooks/%"),
        ("bad escape %ZZ", "/webhooks/%ZZ"),
        ("double leading slash", "//webhooks/stripe"),
        ("double inner slash", "/webhooks//stripe"),
        ("query string", "/webhooks/stripe?x=1&x=2&%ZZ"),
        ("fragment", "/webhooks/stripe#frag"),
        ("matrix parameter", "/webhooks/stripe;v=1"),
        ("uppercase path", "/WEBHOOKS/stripe"),
        ("uppercase source", "/webhooks/STRIPE"),
        ("encoded space", "/webhooks/stripe%20"),
        ("backslash", "/webhooks\\stripe"),
        ("dot segment", "/webhooks/./stripe"),
        ("source with a dot", "/webhooks/stripe.json"),
        ("tilde source", "/webhooks/~"),
    ] {
        cases.anon(family, name, post(path).json(EVENT));
    }
    cases.anon(
        family,
        "unicode source",
        post("/webhooks/strïpe".as_bytes()).json(EVENT),
    );
    cases.anon(
        family,
        "raw latin-1 source",
        post(b"/webhooks/str\xefpe".as_slice()).json(EVENT),
    );
    cases.anon(
        family,
        "absolute-form URI",
        post("http://127.0.0.1/webhooks/stripe").json(EVENT),
    );
    cases.anon(
        family,
        "absolute-form URI, another host",
        post("http://evil.example/webhooks/stripe").json(EVENT),
    );
    cases.anon(
        family,
        "absolute-form https URI",
        post("https://127.0.0.1:1/webhooks/stripe").json(EVENT),
    );
}
