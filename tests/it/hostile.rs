//! Hostile input on every route: more than a thousand malformed, oversized, odd or
//! unauthenticated requests, generated as data and sent byte for byte over raw TCP.
//! Each must get an answer below 500 (framing garbage may instead be closed without
//! one, see `may_close`); afterwards nothing is stored and hookd still serves.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hookd::signature::{Envelope, sign};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Credential, Spawn, TestApp, csrf_of, shipped_settings, spawn, stripe_event};

const VIEWER: &str = "dev-viewer-token-0123456789";
const OPERATOR: &str = "dev-operator-token-0123456789";
const SOURCES: [&str; 4] = ["stripe", "standard", "github", "shop"];
const UNKNOWN_SOURCE: &str = "paypal";
/// Cases in flight at once.
const CONCURRENCY: usize = 32;
/// A case that has neither an answer nor a closed connection by then has hung.
const CASE_LIMIT: Duration = Duration::from_secs(15);
/// The apps' `body_timeout`, short so that truncated bodies end quickly.
const BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// Which instance a case goes to. `Anon` cases never carry a valid credential and
/// each comes from an address of its own (`X-Forwarded-For`, honoured from a
/// loopback peer), so the failure limiter does not hide the code behind it;
/// `Authed` cases carry a valid bearer token and go to an instance that never
/// sees a failed authentication, so they reach the handlers' parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Anon,
    Authed,
}

/// What the client does after sending the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Keeps its side open: hookd must answer, or time out and answer.
    Open,
    /// Shuts down its sending side: hookd sees the end of the stream.
    HalfClose,
}

struct Case {
    name: String,
    family: &'static str,
    target: Target,
    bytes: Vec<u8>,
    ending: Ending,
    /// Final answers expected (more than one for pipelined requests).
    answers: usize,
    /// Framing garbage that HTTP gives no answer for: closing is acceptable.
    may_close: bool,
    /// A HEAD request: its answer has no body whatever its `Content-Length`.
    head: bool,
}

/// An HTTP/1.1 request put together byte for byte.
#[derive(Clone)]
struct Req {
    method: Vec<u8>,
    target: Vec<u8>,
    version: &'static str,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
    /// Adds `Content-Length` for the body (or 0 on POST/PUT/PATCH).
    length: bool,
    host: bool,
    close: bool,
    ending: Ending,
}

fn req(method: &str, target: impl AsRef<[u8]>) -> Req {
    Req {
        method: method.as_bytes().to_vec(),
        target: target.as_ref().to_vec(),
        version: "HTTP/1.1",
        headers: Vec::new(),
        body: Vec::new(),
        length: true,
        host: true,
        close: true,
        ending: Ending::Open,
    }
}

fn get(target: impl AsRef<[u8]>) -> Req {
    req("GET", target)
}

fn post(target: impl AsRef<[u8]>) -> Req {
    req("POST", target)
}

impl Req {
    fn header(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.as_ref().to_vec(), value.as_ref().to_vec()));
        self
    }

    fn headers(mut self, pairs: &[(String, String)]) -> Self {
        for (name, value) in pairs {
            self = self.header(name, value);
        }
        self
    }

    fn bearer(self, token: &str) -> Self {
        self.header("Authorization", format!("Bearer {token}"))
    }

    fn body(mut self, body: impl AsRef<[u8]>) -> Self {
        self.body = body.as_ref().to_vec();
        self
    }

    fn json(self, body: impl AsRef<[u8]>) -> Self {
        self.header("Content-Type", "application/json").body(body)
    }

    fn form(self, body: impl AsRef<[u8]>) -> Self {
        self.header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
    }

    /// No automatic `Content-Length`: the case gives its own framing headers.
    fn no_length(mut self) -> Self {
        self.length = false;
        self
    }

    fn no_host(mut self) -> Self {
        self.host = false;
        self
    }

    fn keep_alive(mut self) -> Self {
        self.close = false;
        self
    }

    fn version(mut self, version: &'static str) -> Self {
        self.version = version;
        self
    }

    fn half_close(mut self) -> Self {
        self.ending = Ending::HalfClose;
        self
    }

    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.body.len());
        out.extend_from_slice(&self.method);
        out.push(b' ');
        out.extend_from_slice(&self.target);
        out.push(b' ');
        out.extend_from_slice(self.version.as_bytes());
        out.extend_from_slice(b"\r\n");
        if self.host {
            out.extend_from_slice(b"Host: 127.0.0.1\r\n");
        }
        for (name, value) in &self.headers {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        let sends_body =
            !self.body.is_empty() || matches!(self.method.as_slice(), b"POST" | b"PUT" | b"PATCH");
        if self.length && sends_body {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        if self.close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

#[derive(Default)]
struct Cases {
    list: Vec<Case>,
}

impl Cases {
    /// A request built with `Req`. `Anon` ones get an address of their own.
    fn add(&mut self, family: &'static str, name: impl Into<String>, target: Target, r: Req) {
        let mut r = r;
        if target == Target::Anon && !r.has_header("X-Forwarded-For") {
            let n = self.list.len();
            let address = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
            r = r.header("X-Forwarded-For", address);
        }
        let head = r.method == b"HEAD";
        self.list.push(Case {
            name: name.into(),
            family,
            target,
            bytes: r.bytes(),
            ending: r.ending,
            answers: 1,
            may_close: false,
            head,
        });
    }

    fn anon(&mut self, family: &'static str, name: impl Into<String>, r: Req) {
        self.add(family, name, Target::Anon, r);
    }

    fn authed(&mut self, family: &'static str, name: impl Into<String>, r: Req) {
        self.add(family, name, Target::Authed, r);
    }

    /// Bytes sent as they are (to the `Anon` instance); by default the client keeps
    /// its side open and one answer is expected.
    fn raw(&mut self, family: &'static str, name: &str, bytes: impl AsRef<[u8]>) -> &mut Case {
        self.list.push(Case {
            name: name.to_string(),
            family,
            target: Target::Anon,
            bytes: bytes.as_ref().to_vec(),
            ending: Ending::Open,
            answers: 1,
            may_close: false,
            head: false,
        });
        let last = self.list.len() - 1;
        &mut self.list[last]
    }
}

impl Case {
    fn half_close(&mut self) -> &mut Self {
        self.ending = Ending::HalfClose;
        self
    }

    fn answers(&mut self, n: usize) -> &mut Self {
        self.answers = n;
        self
    }

    fn may_close(&mut self) -> &mut Self {
        self.may_close = true;
        self
    }
}

fn webhook(source: &str) -> String {
    format!("/webhooks/{source}")
}

fn webhook_family(source: &str) -> &'static str {
    match source {
        "stripe" => "POST /webhooks/stripe",
        "standard" => "POST /webhooks/standard",
        "github" => "POST /webhooks/github",
        "shop" => "POST /webhooks/shop",
        _ => "POST /webhooks/{unknown}",
    }
}

/// Signs `body` as `source`'s provider would, at `timestamp`, with its first secret.
fn signed(
    source: &str,
    body: &[u8],
    id: &str,
    event_type: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    let settings = shipped_settings();
    let source = settings.source(source).expect("shipped source");
    let envelope = Envelope {
        event_id: id,
        event_type,
        timestamp,
    };
    sign(&source.scheme, &source.secrets[0], body, &envelope).expect("sign")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

const EVENT: &[u8] = br#"{"id":"evt_hostile","type":"payment_intent.succeeded","data":{"object":{"id":"pi_h","amount":1}}}"#;

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

/// Signature headers malformed in every way, per scheme, and genuine signatures
/// of the wrong body or at the wrong time.
fn signature_cases(cases: &mut Cases, source: &str) {
    let family = webhook_family(source);
    let path = webhook(source);
    let t = now();
    let hex64 = "ab".repeat(32);
    let b64 = "q80=".repeat(11);
    let mut with = |name: &str, headers: &[(&str, String)]| {
        let mut r = post(&path).json(EVENT);
        for (n, v) in headers {
            r = r.header(n, v);
        }
        cases.anon(family, format!("signature: {name}"), r);
    };
    match source {
        "stripe" => {
            let h = "Stripe-Signature";
            let values = [
                ("empty", String::new()),
                ("t= only", "t=".into()),
                ("v1= only", "v1=".into()),
                ("t without v1", format!("t={t}")),
                ("v1 without t", format!("v1={hex64}")),
                ("empty v1", format!("t={t},v1=")),
                ("non-numeric t", format!("t=abc,v1={hex64}")),
                (
                    "t=99999999999999999999",
                    format!("t=99999999999999999999,v1={hex64}"),
                ),
                ("negative t", format!("t=-1,v1={hex64}")),
                ("t=i64::MIN", format!("t=-9223372036854775808,v1={hex64}")),
                ("t=i64::MAX", format!("t=9223372036854775807,v1={hex64}")),
                ("two t", format!("t={t},t={t},v1={hex64}")),
                ("non-hex v1", format!("t={t},v1={}", "zz".repeat(32))),
                ("odd-length hex", format!("t={t},v1=abc")),
                ("4,000-digit v1", format!("t={t},v1={}", "ab".repeat(2000))),
                (
                    "1,500 v1 entries",
                    format!("t={t},{}", vec![format!("v1={hex64}"); 1500].join(",")),
                ),
                ("no equals sign", "garbage".into()),
                ("only commas", ",,,,,,".into()),
                ("empty item", format!("t={t},,v1={hex64}")),
                ("uppercase keys", format!("T={t},V1={hex64}")),
                ("spaces around", format!(" t = {t} , v1 = {hex64} ")),
                ("semicolons", format!("t={t};v1={hex64}")),
                ("v0 only", format!("t={t},v0={hex64}")),
                ("31-byte tag", format!("t={t},v1={}", "ab".repeat(31))),
                ("t with decimals", format!("t={t}.5,v1={hex64}")),
                ("120 KB value", format!("t={t},v1={}", "a".repeat(120_000))),
            ];
            for (name, value) in values {
                with(name, &[(h, value)]);
            }
            with("arabic digits", &[(h, format!("t=١٢٣,v1={hex64}"))]);
            with(
                "two headers",
                &[
                    (h, format!("t={t},v1={hex64}")),
                    (h, format!("t={t},v1={hex64}")),
                ],
            );
        }
        "standard" => {
            let id = ("webhook-id", "msg_hostile".to_string());
            let ts = ("webhook-timestamp", t.to_string());
            let sig = ("webhook-signature", format!("v1,{b64}"));
            with("all missing", &[]);
            with("no id", &[ts.clone(), sig.clone()]);
            with("no timestamp", &[id.clone(), sig.clone()]);
            with("no signature", &[id.clone(), ts.clone()]);
            with(
                "all empty",
                &[
                    ("webhook-id", String::new()),
                    ("webhook-timestamp", String::new()),
                    ("webhook-signature", String::new()),
                ],
            );
            let stamps = [
                ("timestamp abc", "abc"),
                ("timestamp 99999999999999999999", "99999999999999999999"),
                ("timestamp -1", "-1"),
                ("timestamp i64::MIN", "-9223372036854775808"),
                ("timestamp 1.5", "1.5"),
                ("timestamp 1e9", "1e9"),
                ("timestamp 0x10", "0x10"),
            ];
            for (name, stamp) in stamps {
                with(
                    name,
                    &[id.clone(), ("webhook-timestamp", stamp.into()), sig.clone()],
                );
            }
            let sigs = [
                ("signature v1", "v1".to_string()),
                ("signature v1,", "v1,".into()),
                ("signature not base64", "v1,!!!!".into()),
                ("signature v2 only", format!("v2,{b64}")),
                ("signature of 5 bytes", "v1,AAAAAAA=".into()),
                ("signature 100 KB", format!("v1,{}", "A".repeat(100_000))),
                (
                    "1,000 signatures",
                    vec![format!("v1,{b64}"); 1000].join(" "),
                ),
                ("signature v1a", format!("v1a,{b64}")),
                ("tab-separated signatures", format!("v1,{b64}\tv1,{b64}")),
                ("base64url signature", "v1,-_-_-_-_".into()),
                ("unpadded base64", "v1,q80".into()),
                ("whsec_ prefix in the signature", format!("v1,whsec_{b64}")),
            ];
            for (name, value) in sigs {
                with(
                    name,
                    &[id.clone(), ts.clone(), ("webhook-signature", value)],
                );
            }
            with(
                "10 KB webhook-id",
                &[("webhook-id", "m".repeat(10_000)), ts.clone(), sig.clone()],
            );
            with(
                "svix names, garbage",
                &[
                    ("svix-id", "x".into()),
                    ("svix-timestamp", "y".into()),
                    ("svix-signature", "z".into()),
                ],
            );
            with(
                "webhook and svix names disagree",
                &[
                    id.clone(),
                    ts.clone(),
                    sig.clone(),
                    ("svix-id", "other".into()),
                    ("svix-timestamp", "0".into()),
                    ("svix-signature", "v1,AAAA".into()),
                ],
            );
            with(
                "latin-1 webhook-id",
                &[("webhook-id", "caf\u{e9}".into()), ts.clone(), sig.clone()],
            );
        }
        "github" => {
            let h = "X-Hub-Signature-256";
            let values = [
                ("empty", String::new()),
                ("sha256=", "sha256=".into()),
                ("sha256 without =", format!("sha256{hex64}")),
                ("sha1=", format!("sha1={}", "ab".repeat(20))),
                ("non-hex", format!("sha256={}", "zz".repeat(32))),
                ("odd-length hex", "sha256=abc".into()),
                ("uppercase prefix", format!("SHA256={hex64}")),
                ("trailing text", format!("sha256={hex64} trailing")),
                ("100 KB hex", format!("sha256={}", "ab".repeat(50_000))),
                ("two tags", format!("sha256={hex64},sha256={hex64}")),
            ];
            for (name, value) in values {
                with(
                    name,
                    &[
                        (h, value),
                        ("X-GitHub-Event", "push".into()),
                        ("X-GitHub-Delivery", "d-1".into()),
                    ],
                );
            }
            with(
                "only X-Hub-Signature (sha1)",
                &[("X-Hub-Signature", format!("sha1={}", "ab".repeat(20)))],
            );
            with("no delivery or event", &[(h, format!("sha256={hex64}"))]);
        }
        _ => {
            let h = "X-Shopify-Hmac-Sha256";
            let values = [
                ("empty", String::new()),
                ("not base64", "!!!!".into()),
                ("only padding", "====".into()),
                ("hex instead of base64", hex64.clone()),
                ("base64url alphabet", "-_-_-_-_".into()),
                ("unpadded", "q80".into()),
                ("100 KB base64", "A".repeat(100_000)),
                ("whitespace inside", "q8 0=".into()),
            ];
            for (name, value) in values {
                with(
                    name,
                    &[
                        (h, value),
                        ("X-Shopify-Webhook-Id", "w-1".into()),
                        ("X-Shopify-Topic", "orders/create".into()),
                    ],
                );
            }
            with("no id or topic", &[(h, b64.clone())]);
        }
    }
    // Genuine signatures of another body, and of this one at times outside the
    // tolerance (both directions, the extremes of the clock included).
    let (id, event_type) = match source {
        "standard" => ("msg_hostile", "x"),
        "github" => ("d-1", "push"),
        "shop" => ("w-1", "orders/create"),
        _ => ("evt_hostile", "x"),
    };
    let other = signed(source, b"{}", id, event_type, t);
    let r = post(&path).headers(&other).body(EVENT);
    cases.anon(family, "signature: tag of another body", r);
    if matches!(source, "stripe" | "standard") {
        for (name, at) in [
            ("signed at 0", 0),
            ("signed at -1", -1),
            ("signed at i64::MIN", i64::MIN),
            ("signed at i64::MAX", i64::MAX),
            ("signed 301 s ago", t - 301),
            ("signed 301 s ahead", t + 301),
        ] {
            let r = post(&path)
                .headers(&signed(source, EVENT, id, event_type, at))
                .body(EVENT);
            cases.anon(family, format!("signature: {name}"), r);
        }
    }
}

/// Genuinely signed bodies that are not events hookd can take: these reach the
/// body parser. None is a valid event, and none carries an escaped NUL.
fn signed_body_cases(cases: &mut Cases, source: &str) {
    let family = webhook_family(source);
    let path = webhook(source);
    let long = "x".repeat(300);
    let wide = "é".repeat(128);
    let mut bad: Vec<(String, Vec<u8>, String, String)> = Vec::new();
    let mut body = |name: &str, bytes: Vec<u8>| {
        bad.push((
            name.to_string(),
            bytes,
            "id_ok".to_string(),
            "push".to_string(),
        ));
    };
    body("not JSON", b"hello".to_vec());
    body("10,000 [", "[".repeat(10_000).into_bytes());
    body(
        "10,000 nested objects",
        r#"{"a":"#.repeat(10_000).into_bytes(),
    );
    body(
        "1e999999",
        br#"{"id":"evt_s","type":"x","n":1e999999}"#.to_vec(),
    );
    body(
        "lone surrogate",
        br#"{"id":"evt_s","type":"x","s":"\ud800"}"#.to_vec(),
    );
    body(
        "invalid UTF-8",
        b"{\"id\":\"evt_s\",\"type\":\"x\",\"s\":\"\xff\"}".to_vec(),
    );
    body("empty", Vec::new());
    body(
        "byte order mark",
        [b"\xef\xbb\xbf".as_slice(), EVENT].concat(),
    );
    body("trailing garbage", [EVENT, b"]".as_slice()].concat());
    body("UTF-16LE", EVENT.iter().flat_map(|b| [*b, 0]).collect());
    match source {
        "stripe" => {
            let mut event = |name: &str, text: String| body(name, text.into_bytes());
            event("empty object", "{}".into());
            event("array", "[]".into());
            event("null", "null".into());
            event("string", r#""evt_s""#.into());
            event("empty id", r#"{"id":"","type":"x"}"#.into());
            event("blank id", r#"{"id":"   ","type":"x"}"#.into());
            event("object id", r#"{"id":{"id":"evt_s"},"type":"x"}"#.into());
            event("empty type", r#"{"id":"evt_s","type":""}"#.into());
            event("array type", r#"{"id":"evt_s","type":["x"]}"#.into());
            event("300-byte id", format!(r#"{{"id":"{long}","type":"x"}}"#));
            event(
                "256-byte multibyte id",
                format!(r#"{{"id":"{wide}","type":"x"}}"#),
            );
            event(
                "300-byte type",
                format!(r#"{{"id":"evt_s","type":"{long}"}}"#),
            );
            event(
                "duplicate ids, both unusable",
                r#"{"id":"","type":"x","id":null}"#.into(),
            );
            event(
                "duplicate types, both unusable",
                r#"{"type":"","id":"","type":""}"#.into(),
            );
        }
        _ => {
            // Identity from headers (standard: id; github, shop: both).
            let event_type = if source == "shop" {
                "orders/create"
            } else {
                "push"
            };
            let ok = if source == "standard" {
                r#"{"type":"x"}"#
            } else {
                r#"{"action":"opened"}"#
            };
            bad.push((
                "empty id".into(),
                ok.into(),
                String::new(),
                event_type.into(),
            ));
            bad.push((
                "300-byte id".into(),
                ok.into(),
                long.clone(),
                event_type.into(),
            ));
            bad.push((
                "256-byte multibyte id".into(),
                ok.into(),
                wide.clone(),
                event_type.into(),
            ));
            if source == "standard" {
                bad.push(("no type".into(), b"{}".to_vec(), "id_ok".into(), "x".into()));
                bad.push((
                    "empty type".into(),
                    br#"{"type":""}"#.to_vec(),
                    "id_ok".into(),
                    "x".into(),
                ));
                bad.push((
                    "300-byte type".into(),
                    format!(r#"{{"type":"{long}"}}"#).into_bytes(),
                    "id_ok".into(),
                    "x".into(),
                ));
                bad.push((
                    "array body".into(),
                    b"[]".to_vec(),
                    "id_ok".into(),
                    "x".into(),
                ));
            } else {
                bad.push((
                    "empty type".into(),
                    ok.into(),
                    "id_ok".into(),
                    String::new(),
                ));
                bad.push((
                    "300-byte type".into(),
                    ok.into(),
                    "id_ok".into(),
                    long.clone(),
                ));
            }
            if source == "github" {
                let action = format!(r#"{{"action":"{long}"}}"#);
                bad.push((
                    "300-byte action".into(),
                    action.into_bytes(),
                    "id_ok".into(),
                    "push".into(),
                ));
            }
        }
    }
    for (name, bytes, id, event_type) in bad {
        let headers = signed(source, &bytes, &id, &event_type, now());
        cases.anon(
            family,
            format!("signed, {name}"),
            post(&path).headers(&headers).body(bytes),
        );
    }
}

fn webhook_cases(cases: &mut Cases) {
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
        if source != UNKNOWN_SOURCE {
            signature_cases(cases, source);
            signed_body_cases(cases, source);
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

fn ops_cases(cases: &mut Cases) {
    for (family, path) in [
        ("GET /healthz", "/healthz"),
        ("GET /readyz", "/readyz"),
        ("GET /metrics", "/metrics"),
    ] {
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "HEAD", "BREW"] {
            cases.anon(family, format!("method {method}"), req(method, path));
        }
        let long_query = format!("{path}?{}", "q=x&".repeat(10_000));
        for (name, target) in [
            ("junk query", format!("{path}?%ZZ&&==&a=%00&b=%FF")),
            ("40 KB query", long_query),
            ("trailing slash", format!("{path}/")),
            ("NUL suffix", format!("{path}%00")),
            ("double slash", format!("/{path}")),
            (
                "encoded path",
                format!("/%{:02X}{}", path.as_bytes()[1], &path[2..]),
            ),
        ] {
            cases.anon(family, name, get(target));
        }
        cases.anon(family, "GET with a body", get(path).json(EVENT));
        cases.anon(
            family,
            "GET with a chunked body",
            get(path)
                .no_length()
                .header("Transfer-Encoding", "chunked")
                .body("5\r\nhello\r\n0\r\n\r\n"),
        );
        cases.anon(
            family,
            "garbage credentials",
            get(path)
                .header("Authorization", "Bearer nope")
                .header("Cookie", "hookd_session=x.y.z.w"),
        );
        cases.anon(family, "HTTP/1.0", get(path).version("HTTP/1.0").no_host());
        cases.anon(family, "raw UTF-8 query", get(format!("{path}?q=ünï")));
    }
}

/// The admin endpoints, as method, a path template (`{id}` becomes `1`) and family.
const ADMIN_ROUTES: [(&str, &str, &str); 21] = [
    ("GET", "/admin", "GET /admin"),
    ("GET", "/admin/", "GET /admin/"),
    ("GET", "/admin/login", "GET /admin/login"),
    ("POST", "/admin/login", "POST /admin/login"),
    ("POST", "/admin/logout", "POST /admin/logout"),
    ("GET", "/admin/events/1", "GET /admin/events/{id}"),
    (
        "POST",
        "/admin/events/1/retry",
        "POST /admin/events/{id}/retry",
    ),
    ("GET", "/admin/api/events", "GET /admin/api/events"),
    ("GET", "/admin/api/events/1", "GET /admin/api/events/{id}"),
    (
        "POST",
        "/admin/api/events/1/retry",
        "POST /admin/api/events/{id}/retry",
    ),
    ("GET", "/admin/api/stats", "GET /admin/api/stats"),
    (
        "POST",
        "/admin/api/events/retry",
        "POST /admin/api/events/retry",
    ),
    (
        "GET",
        "/admin/api/payments?customer=cus_1",
        "GET /admin/api/payments",
    ),
    (
        "GET",
        "/admin/api/payments/stripe/pi_1",
        "GET /admin/api/payments/{source}/{payment_id}",
    ),
    ("GET", "/admin/api/audit", "GET /admin/api/audit"),
    (
        "GET",
        "/admin/api/openapi.json",
        "GET /admin/api/openapi.json",
    ),
    (
        "GET",
        "/admin/payments/stripe/pi_1",
        "GET /admin/payments/{source}/{payment_id}",
    ),
    (
        "GET",
        "/admin/customers/cus_1",
        "GET /admin/customers/{customer}",
    ),
    ("GET", "/admin/retry", "GET /admin/retry"),
    ("POST", "/admin/retry", "POST /admin/retry"),
    ("GET", "/admin/audit", "GET /admin/audit"),
];

fn b64(text: impl AsRef<[u8]>) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, text)
}

fn admin_credential_cases(cases: &mut Cases) {
    let huge = "t".repeat(100 * 1024);
    let authorizations: [(&str, Vec<u8>); 14] = [
        ("Authorization: Bearer", b"Bearer".to_vec()),
        ("Authorization: Bearer and a space", b"Bearer ".to_vec()),
        ("Authorization: Basic", b"Basic dXNlcjpwYXNz".to_vec()),
        (
            "Authorization: lowercase bearer",
            format!("bearer {VIEWER}").into_bytes(),
        ),
        (
            "Authorization: 100 KB token",
            format!("Bearer {huge}").into_bytes(),
        ),
        (
            "Authorization: token and more",
            format!("Bearer {VIEWER} extra").into_bytes(),
        ),
        (
            "Authorization: Token scheme",
            format!("Token {OPERATOR}").into_bytes(),
        ),
        (
            "Authorization: tab separator",
            format!("Bearer\t{OPERATOR}").into_bytes(),
        ),
        ("Authorization: latin-1 token", b"Bearer caf\xe9".to_vec()),
        (
            "Authorization: doubled token",
            format!("Bearer {VIEWER}{VIEWER}").into_bytes(),
        ),
        ("Authorization: empty", Vec::new()),
        (
            "Authorization: token prefix",
            b"Bearer dev-viewer-token".to_vec(),
        ),
        (
            "Authorization: Bearer Bearer",
            format!("Bearer Bearer {VIEWER}").into_bytes(),
        ),
        (
            "Authorization: comma list",
            format!("Bearer x, Bearer {VIEWER}").into_bytes(),
        ),
    ];
    let far = "99999999999";
    let viewer = b64("viewer");
    let cookies: [(&str, Vec<u8>); 17] = [
        ("cookie: garbage", b"hookd_session=garbage".to_vec()),
        ("cookie: five dots", b"hookd_session=a.b.c.d.e.f".to_vec()),
        ("cookie: three parts", b"hookd_session=a.b.c".to_vec()),
        ("cookie: empty", b"hookd_session=".to_vec()),
        (
            "cookie: 300 cookies",
            (0..300)
                .map(|i| format!("c{i}=v{i}"))
                .collect::<Vec<_>>()
                .join("; ")
                .into_bytes(),
        ),
        (
            "cookie: 60 KB value",
            format!("hookd_session={}", "a".repeat(60_000)).into_bytes(),
        ),
        (
            "cookie: non-UTF-8",
            b"hookd_session=\xff\xfe.\xc0.\x80.\x81".to_vec(),
        ),
        (
            "cookie: real name, bad MAC",
            format!(
                "hookd_session={viewer}.{far}.{}.{}",
                "00".repeat(16),
                "ab".repeat(32)
            )
            .into_bytes(),
        ),
        (
            "cookie: overflowing expiry",
            format!("hookd_session={viewer}.99999999999999999999999.n.m").into_bytes(),
        ),
        (
            "cookie: negative expiry",
            format!("hookd_session={viewer}.-1.n.m").into_bytes(),
        ),
        (
            "cookie: expiry i64::MAX",
            format!("hookd_session={viewer}.9223372036854775807.n.m").into_bytes(),
        ),
        (
            "cookie: name not base64",
            format!("hookd_session=!!!.{far}.n.m").into_bytes(),
        ),
        (
            "cookie: name base64 of non-UTF-8",
            format!("hookd_session={}.{far}.n.m", b64([0xff, 0xfe])).into_bytes(),
        ),
        (
            "cookie: unknown name",
            format!("hookd_session={}.{far}.n.m", b64("root")).into_bytes(),
        ),
        (
            "cookie: twice",
            b"hookd_session=a.b.c.d; hookd_session=e.f.g.h".to_vec(),
        ),
        ("cookie: no equals sign", b"hookd_session".to_vec()),
        (
            "cookie: percent-encoded NUL",
            format!("hookd_session={viewer}.{far}.%00.%00").into_bytes(),
        ),
    ];
    for (method, path, family) in ADMIN_ROUTES {
        let base = || req(method, path);
        cases.anon(family, "no credentials", base());
        for (name, value) in &authorizations {
            cases.anon(family, *name, base().header("Authorization", value));
        }
        cases.anon(
            family,
            "Authorization: bad then valid",
            base()
                .header("Authorization", "Bearer nope")
                .header("Authorization", format!("Bearer {OPERATOR}")),
        );
        for (name, value) in &cookies {
            cases.anon(family, *name, base().header("Cookie", value));
        }
    }
    // Bad bearer guesses from one client: past ten the limiter answers 429.
    for i in 0..12 {
        cases.anon(
            "GET /admin/api/events",
            format!("guess {i} from one client"),
            get("/admin/api/events")
                .bearer(&format!("guess-{i}"))
                .header("X-Forwarded-For", "192.0.2.77"),
        );
    }
}

/// Absurd filter values, with a valid token, on the API and the page.
fn admin_query_cases(cases: &mut Cases) {
    let long_q = "q".repeat(8_000);
    let filters: Vec<(&str, String)> = vec![
        ("limit=-1", "limit=-1".into()),
        ("limit=0", "limit=0".into()),
        ("limit=1e9", "limit=1e9".into()),
        ("limit=501", "limit=501".into()),
        ("limit=abc", "limit=abc".into()),
        ("limit overflows", "limit=99999999999999999999".into()),
        ("limit=0x10", "limit=0x10".into()),
        ("limit twice", "limit=1&limit=2".into()),
        (
            "since=999999999999999999999d",
            "since=999999999999999999999d".into(),
        ),
        ("since=-1d", "since=-1d".into()),
        ("since=1y", "since=1y".into()),
        ("since=36501d", "since=36501d".into()),
        ("since year 0", "since=0000-01-01T00:00:00Z".into()),
        (
            "since year 0 at +23:59",
            "since=0000-01-01T00:00:00%2B23:59".into(),
        ),
        (
            "since year 9999 at -23:59",
            "since=9999-12-31T23:59:59-23:59".into(),
        ),
        ("since a leap second", "since=2016-12-31T23:59:60Z".into()),
        ("since 30 February", "since=2024-02-30T00:00:00Z".into()),
        (
            "since with six-digit year",
            "since=%2B275760-01-01T00:00:00Z".into(),
        ),
        ("since NUL", "since=%00".into()),
        (
            "since with 19 fraction digits",
            "since=2024-01-01T00:00:00.9999999999999999999Z".into(),
        ),
        (
            "since with an offset of 24 hours",
            "since=2024-01-01T00:00:00%2B24:00".into(),
        ),
        (
            "until=999999999999999999999d",
            "until=999999999999999999999d".into(),
        ),
        ("until before since", "since=1h&until=2h".into()),
        ("until garbage", "until=yesterday".into()),
        ("cursor garbage", "cursor=!!!".into()),
        (
            "cursor base64 of garbage",
            format!("cursor={}", b64("garbage")),
        ),
        ("cursor of three parts", format!("cursor={}", b64("1:2:3"))),
        (
            "cursor time overflows",
            format!("cursor={}", b64("99999999999999999999:1")),
        ),
        (
            "cursor id overflows",
            format!("cursor={}", b64("0:99999999999999999999")),
        ),
        (
            "cursor before year 1",
            format!("cursor={}", b64("-62135596800000001:1")),
        ),
        (
            "cursor at i64::MIN",
            format!(
                "cursor={}",
                b64("-9223372036854775808:-9223372036854775808")
            ),
        ),
        (
            "cursor base64 of non-UTF-8",
            format!("cursor={}", b64([0xff, 0x3a, 0x31])),
        ),
        ("cursor 10 KB", format!("cursor={}", "A".repeat(10_000))),
        ("cursor of a well-formed 1:1", "cursor=MTox".into()),
        ("%ZZ", "%ZZ=%ZZ".into()),
        ("only separators", "&&&&;;;===".into()),
        ("8,000-byte q", format!("q={long_q}")),
        ("q of invalid UTF-8", "q=%FF%FE%C0%AF".into()),
        ("q with NUL", "q=evt%00".into()),
        ("source with NUL", "source=stripe%00".into()),
        ("kind with NUL", "kind=%00".into()),
        ("type with NUL", "type=%00".into()),
        ("status not a status", "status=exploded".into()),
        ("status uppercase", "status=PROCESSED".into()),
        ("status with NUL", "status=dead%00".into()),
        ("source twice", "source=a&source=b".into()),
        ("unknown parameter", "evil=1".into()),
        (
            "every filter at once",
            "source=x&kind=y&type=z&status=dead&since=1h&until=1m&q=w&limit=500".into(),
        ),
        ("raw UTF-8 in q", "q=ünï".into()),
    ];
    for (name, query) in &filters {
        cases.authed(
            "GET /admin/api/events",
            *name,
            get(format!("/admin/api/events?{query}")).bearer(VIEWER),
        );
        cases.authed(
            "GET /admin",
            *name,
            get(format!("/admin?{query}")).bearer(VIEWER),
        );
    }
    cases.authed(
        "GET /admin/",
        "page with a cursor",
        get(format!("/admin/?cursor={}", b64("1:1"))).bearer(VIEWER),
    );
    let windows = [
        ("window=-1h", "window=-1h"),
        ("window=1y", "window=1y"),
        (
            "window=999999999999999999999d",
            "window=999999999999999999999d",
        ),
        ("window=0ms", "window=0ms"),
        ("window=36501d", "window=36501d"),
        ("window empty", "window="),
        ("window NUL", "window=%00"),
        ("window twice", "window=1h&window=2h"),
        ("window=1.5h", "window=1.5h"),
        ("window with a space", "window=1%20h"),
        ("window uppercase", "window=1H"),
        ("window arabic digits", "window=%D9%A3h"),
        ("window u64::MAX ms", "window=18446744073709551615ms"),
        ("window %ZZ", "window=%ZZ"),
        (
            "window 10 KB",
            "window=1111111111111111111111111111111111111111111111111111111111111111111111111111h",
        ),
    ];
    for (name, query) in windows {
        cases.authed(
            "GET /admin/api/stats",
            name,
            get(format!("/admin/api/stats?{query}")).bearer(VIEWER),
        );
    }
}

/// Odd ids, and odd retry requests, with a valid token, on every route that
/// takes an id.
fn admin_id_cases(cases: &mut Cases) {
    let long_id = "9".repeat(10_000);
    let ids = [
        ("-1", "-1"),
        ("0", "0"),
        ("huge", "99999999999999999999999"),
        ("1e3", "1e3"),
        ("0x10", "0x10"),
        ("NUL", "%00"),
        ("encoded slash", "1%2F2"),
        ("dot-dot", ".."),
        ("10,000 digits", long_id.as_str()),
        ("plus sign", "+1"),
        ("1.0", "1.0"),
        ("i64::MAX", "9223372036854775807"),
        ("i64::MIN", "-9223372036854775808"),
        ("arabic digit", "%D9%A1"),
        ("encoded digit", "%31"),
        ("space", "%201"),
    ];
    for (name, id) in ids {
        cases.authed(
            "GET /admin/api/events/{id}",
            format!("id {name}"),
            get(format!("/admin/api/events/{id}")).bearer(VIEWER),
        );
        cases.authed(
            "GET /admin/events/{id}",
            format!("id {name}"),
            get(format!("/admin/events/{id}")).bearer(VIEWER),
        );
        cases.authed(
            "POST /admin/api/events/{id}/retry",
            format!("id {name}"),
            post(format!("/admin/api/events/{id}/retry")).bearer(OPERATOR),
        );
        cases.authed(
            "POST /admin/events/{id}/retry",
            format!("id {name}"),
            post(format!("/admin/events/{id}/retry"))
                .bearer(OPERATOR)
                .form("csrf=x"),
        );
    }
    let keys = [
        ("NUL", "%00"),
        ("NUL suffix", "pi_1%00"),
        ("encoded slash", "pi%2F1"),
        ("dot-dot", ".."),
        ("10,000 bytes", long_id.as_str()),
        ("invalid UTF-8", "%FF%FE"),
        ("space", "%20"),
    ];
    for (name, key) in keys {
        for (place, path, family) in [
            (
                "payment id",
                format!("/admin/api/payments/stripe/{key}"),
                "GET /admin/api/payments/{source}/{payment_id}",
            ),
            (
                "source",
                format!("/admin/api/payments/{key}/pi_1"),
                "GET /admin/api/payments/{source}/{payment_id}",
            ),
            (
                "payment id",
                format!("/admin/payments/stripe/{key}"),
                "GET /admin/payments/{source}/{payment_id}",
            ),
            (
                "customer",
                format!("/admin/customers/{key}"),
                "GET /admin/customers/{customer}",
            ),
            (
                "customer",
                format!("/admin/api/payments?customer={key}"),
                "GET /admin/api/payments",
            ),
        ] {
            cases.authed(family, format!("{place} {name}"), get(path).bearer(VIEWER));
        }
    }
    // A cursor this API could never have returned, naming a NUL id.
    let nul_cursor = b64(r#"[1700000000000000,"stripe","a\u0000"]"#);
    for (path, family) in [
        (
            format!("/admin/api/payments?customer=cus_1&cursor={nul_cursor}"),
            "GET /admin/api/payments",
        ),
        (
            format!("/admin/customers/cus_1?cursor={nul_cursor}"),
            "GET /admin/customers/{customer}",
        ),
    ] {
        cases.authed(family, "cursor naming a NUL id", get(path).bearer(VIEWER));
    }
    let family = "GET /admin/events/{id}";
    cases.authed(
        family,
        "retried twice",
        get("/admin/events/1?retried=a&retried=b").bearer(VIEWER),
    );
    cases.authed(
        family,
        "retried junk",
        get("/admin/events/1?retried=%3Cscript%3E%00%FF").bearer(VIEWER),
    );
    cases.authed(
        family,
        "trailing slash",
        get("/admin/events/1/").bearer(VIEWER),
    );
    let family = "POST /admin/api/events/{id}/retry";
    let retry = || post("/admin/api/events/1/retry").bearer(OPERATOR);
    cases.authed(
        family,
        "empty Idempotency-Key",
        retry().header("Idempotency-Key", ""),
    );
    cases.authed(
        family,
        "256-byte Idempotency-Key",
        retry().header("Idempotency-Key", "k".repeat(256)),
    );
    cases.authed(
        family,
        "10 KB Idempotency-Key",
        retry().header("Idempotency-Key", "k".repeat(10_000)),
    );
    cases.authed(
        family,
        "latin-1 Idempotency-Key",
        retry().header("Idempotency-Key", b"k\xe9y".as_slice()),
    );
    cases.authed(
        family,
        "Idempotency-Key and a 100 KB body",
        retry()
            .header("Idempotency-Key", "")
            .json(vec![b'x'; 100 * 1024]),
    );
    cases.authed(family, "100 KB body", retry().json(vec![b'x'; 100 * 1024]));
    cases.authed(
        family,
        "declared 1 GB body",
        retry().no_length().header("Content-Length", "1073741824"),
    );
    cases.authed(
        family,
        "chunked garbage body",
        retry()
            .no_length()
            .header("Transfer-Encoding", "chunked")
            .body("zz\r\nhello\r\n0\r\n\r\n"),
    );
    cases.authed(
        family,
        "viewer token",
        post("/admin/api/events/1/retry").bearer(VIEWER),
    );
    cases.authed(
        family,
        "operator token and a cookie",
        retry().header("Cookie", "hookd_session=a.b.c.d"),
    );
    cases.authed(
        family,
        "GET instead of POST",
        get("/admin/api/events/1/retry").bearer(OPERATOR),
    );
    cases.authed(
        family,
        "cross-site Origin",
        retry().header("Origin", "http://evil.example"),
    );
    let family = "POST /admin/events/{id}/retry";
    cases.authed(
        family,
        "no csrf field",
        post("/admin/events/1/retry").bearer(OPERATOR),
    );
    cases.authed(
        family,
        "100 KB form",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .form(format!("csrf={}", "x".repeat(100 * 1024))),
    );
    cases.authed(
        family,
        "form of invalid UTF-8",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .form(b"csrf=\xff\xfe"),
    );
    cases.authed(
        family,
        "cross-site Origin",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .header("Origin", "http://evil.example")
            .form("csrf=x"),
    );
    cases.authed(
        family,
        "viewer token",
        post("/admin/events/1/retry").bearer(VIEWER).form("csrf=x"),
    );
    let family = "POST /admin/logout";
    cases.authed(
        family,
        "bearer, no session",
        post("/admin/logout").bearer(VIEWER).form("csrf=x"),
    );
    cases.authed(
        "GET /admin/login",
        "already signed in by bearer",
        get("/admin/login").bearer(VIEWER),
    );
    let family = "GET /admin/api/events";
    cases.authed(
        family,
        "bearer and garbage cookie",
        get("/admin/api/events")
            .bearer(VIEWER)
            .header("Cookie", "hookd_session=a.b.c.d.e"),
    );
    cases.authed(
        family,
        "bearer with surrounding spaces",
        get("/admin/api/events").header("Authorization", format!("Bearer   {VIEWER}   ")),
    );
    cases.authed(
        family,
        "HEAD",
        req("HEAD", "/admin/api/events").bearer(VIEWER),
    );
    cases.authed(
        "GET /admin/api/stats",
        "POST instead of GET",
        post("/admin/api/stats").bearer(VIEWER),
    );
}

fn login_cases(cases: &mut Cases) {
    let family = "POST /admin/login";
    let login = || post("/admin/login");
    let forms: [(&str, &[u8]); 14] = [
        ("empty token", b"token="),
        ("NUL token", b"token=%00"),
        ("token twice", b"token=a&token=b"),
        ("form of invalid UTF-8", b"token=\xff\xfe\xfd"),
        ("percent garbage", b"token=%ZZ%"),
        ("no equals sign", b"token"),
        ("plus signs", b"token=+++"),
        ("unknown fields", b"user=admin&password=admin"),
        ("JSON body as a form", br#"{"token":"x"}"#),
        ("semicolon separated", b"token=a;token=b"),
        ("10,000 fields", b""),
        ("60 KB token", b""),
        ("65 KB form (over the admin cap)", b""),
        ("whitespace token", b"token=%20%09%0A"),
    ];
    for (name, body) in forms {
        let body = match name {
            "10,000 fields" => (0..10_000)
                .map(|i| format!("f{i}=v"))
                .collect::<Vec<_>>()
                .join("&")
                .into_bytes(),
            "60 KB token" => format!("token={}", "t".repeat(60_000)).into_bytes(),
            "65 KB form (over the admin cap)" => {
                format!("token={}", "t".repeat(65 * 1024)).into_bytes()
            }
            _ => body.to_vec(),
        };
        cases.anon(family, name, login().form(body));
    }
    let jsons: [(&str, &[u8]); 10] = [
        ("JSON null token", br#"{"token":null}"#),
        ("JSON array token", br#"{"token":["a"]}"#),
        ("JSON number token", br#"{"token":1e999999}"#),
        ("JSON lone surrogate", br#"{"token":"\ud800"}"#),
        ("JSON escaped NUL", br#"{"token":"\u0000"}"#),
        ("JSON 10,000 [", b""),
        ("JSON not JSON", b"token=abc"),
        ("JSON duplicate keys", br#"{"token":"a","token":"b"}"#),
        ("JSON invalid UTF-8", b"{\"token\":\"\xff\"}"),
        ("JSON empty", b""),
    ];
    for (name, body) in jsons {
        let body = if name == "JSON 10,000 [" {
            "[".repeat(10_000).into_bytes()
        } else {
            body.to_vec()
        };
        cases.anon(family, name, login().json(body));
    }
    for (name, content_type) in [
        (
            "JSON with latin1 charset",
            "application/json; charset=latin1",
        ),
        ("content type jsonx", "application/jsonx"),
        ("multipart", "multipart/form-data; boundary=x"),
        ("latin-1 content type", "application/json; charset=\u{e9}"),
    ] {
        cases.anon(
            family,
            name,
            login()
                .header("Content-Type", content_type)
                .body(r#"{"token":"x"}"#),
        );
    }
    for (name, header, value) in [
        (
            "Origin of another site",
            "Origin",
            b"http://evil.example".as_slice(),
        ),
        ("Origin null", "Origin", b"null"),
        ("Referer garbage", "Referer", b"::::"),
        ("Origin non-UTF-8", "Origin", b"http://\xff\xfe"),
        ("Origin without a scheme", "Origin", b"127.0.0.1"),
        (
            "Referer of another site",
            "Referer",
            b"https://evil.example/admin",
        ),
    ] {
        cases.anon(family, name, login().header(header, value).form("token=x"));
    }
    cases.anon(
        family,
        "chunked form",
        login()
            .no_length()
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Transfer-Encoding", "chunked")
            .body("6\r\ntoken=\r\n1\r\nx\r\n0\r\n\r\n"),
    );
    cases.anon(
        family,
        "truncated form, connection kept",
        login()
            .no_length()
            .header("Content-Length", "100")
            .form("token=x")
            .keep_alive(),
    );
    cases.anon(
        family,
        "truncated form, connection half-closed",
        login()
            .no_length()
            .header("Content-Length", "100")
            .form("token=x")
            .half_close(),
    );
    let family = "POST /admin/logout";
    let logout = || post("/admin/logout");
    cases.anon(family, "csrf junk", logout().form("csrf=%00%FF"));
    cases.anon(
        family,
        "100 KB form",
        logout().form(format!("csrf={}", "c".repeat(100 * 1024))),
    );
    cases.anon(
        family,
        "cross-site with a garbage cookie",
        logout()
            .header("Origin", "http://evil.example")
            .header("Cookie", "hookd_session=a.b.c.d")
            .form("csrf=x"),
    );
    cases.anon(family, "GET instead of POST", get("/admin/logout"));
    cases.anon(family, "JSON body", logout().json("[[[[[["));
    let family = "GET /admin/login";
    cases.anon(
        family,
        "query junk",
        get("/admin/login?next=//evil.example&%ZZ"),
    );
    cases.anon(family, "PUT", req("PUT", "/admin/login").form("token=x"));
    cases.anon(family, "trailing slash", get("/admin/login/"));
}

fn unknown_path_cases(cases: &mut Cases) {
    let family = "unknown paths";
    let long = format!("/{}", "a".repeat(60_000));
    for (name, path) in [
        ("root", "/"),
        ("/admin/api", "/admin/api"),
        ("/admin/api/", "/admin/api/"),
        ("retry with a tail", "/admin/api/events/1/retry/x"),
        ("/admin/events", "/admin/events"),
        ("/.env", "/.env"),
        ("raw dot-dot to /etc/passwd", "/../../etc/passwd"),
        ("encoded dot-dot", "/%2e%2e/%2e%2e/etc/passwd"),
        ("favicon", "/favicon.ico"),
        ("/metrics/", "/metrics/"),
        ("/healthz/x", "/healthz/x"),
        ("60 KB path", long.as_str()),
        ("NUL path", "/%00"),
        ("encoded admin", "/%61dmin"),
        ("admin with NUL", "/admin%00"),
        ("api with query only", "/admin/api/events/?"),
        ("server-status", "/server-status"),
        ("wp-login", "/wp-login.php"),
        ("dot segments to admin", "/webhooks/../admin/api/stats"),
        ("uppercase ADMIN", "/ADMIN"),
        ("many slashes", "//////////"),
        ("query only", "/?"),
    ] {
        cases.anon(family, format!("GET {name}"), get(path));
        cases.anon(family, format!("POST {name}"), post(path).json(EVENT));
    }
    cases.anon(
        family,
        "GET raw UTF-8 path",
        get("/ädmin/ünknown".as_bytes()),
    );
    cases.anon(
        family,
        "GET raw control byte in path",
        get(b"/a\x01b".as_slice()),
    );
    cases.anon(family, "OPTIONS *", req("OPTIONS", "*"));
    cases.anon(family, "GET *", get("*"));
    cases.anon(family, "authority-form GET", get("127.0.0.1:80"));
    cases.anon(family, "empty target", get(""));
}

/// Framing garbage, sent as raw bytes. Every case must be answered, except those
/// marked `may_close`: no complete request ever arrived (nothing to answer), the
/// bytes are not HTTP/1 at all (TLS, HTTP/2, noise), or the client gave up
/// mid-body by closing its side.
fn framing_cases(cases: &mut Cases) {
    let family = "framing";
    let head =
        "POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
    let chunked =
        |body: &str| format!("{head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}");
    let ext = format!("5;{}\r\nhello\r\n0\r\n\r\n", "e".repeat(10_000));
    let ones = "1\r\nx\r\n".repeat(10_000) + "0\r\n\r\n";
    let big = format!("10000\r\n{}\r\n", "y".repeat(0x10000)).repeat(40) + "0\r\n\r\n";
    for (name, body) in [
        ("chunk size not hex", "zz\r\nhello\r\n0\r\n\r\n"),
        (
            "chunk size overflows",
            "fffffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        ),
        ("negative chunk size", "-5\r\nhello\r\n0\r\n\r\n"),
        ("chunk extension", "5;ext=val;other\r\nhello\r\n0\r\n\r\n"),
        (
            "chunk extension with quotes",
            "5;ext=\"a\\\"b\"\r\nhello\r\n0\r\n\r\n",
        ),
        ("10 KB chunk extension", ext.as_str()),
        ("chunk size with spaces", "  5  \r\nhello\r\n0\r\n\r\n"),
        ("chunk size with a 0x prefix", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("chunk data longer than its size", "2\r\nhello\r\n0\r\n\r\n"),
        ("no CRLF after the chunk data", "5\r\nhello0\r\n\r\n"),
        (
            "trailers",
            "5\r\nhello\r\n0\r\nX-Trailer: 1\r\nContent-Length: 5\r\n\r\n",
        ),
        ("bare LF chunk lines", "5\nhello\n0\n\n"),
        (
            "leading zeros",
            "0000000000000000000005\r\nhello\r\n0\r\n\r\n",
        ),
        ("10,000 one-byte chunks", ones.as_str()),
        ("2.5 MiB in chunks", big.as_str()),
        ("missing last chunk, kept open", "5\r\nhello\r\n"),
    ] {
        cases.raw(family, name, chunked(body));
    }
    cases
        .raw(
            family,
            "missing last chunk, half-closed",
            chunked("5\r\nhello\r\n"),
        )
        .half_close()
        .may_close();
    cases
        .raw(
            family,
            "chunk shorter than its size, half-closed",
            chunked("100\r\nhello"),
        )
        .half_close()
        .may_close();
    for (name, te) in [
        (
            "chunked twice",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        ),
        ("Transfer-Encoding identity", "Transfer-Encoding: identity"),
        ("Transfer-Encoding gzip", "Transfer-Encoding: gzip"),
        (
            "Transfer-Encoding chunked, gzip",
            "Transfer-Encoding: chunked, gzip",
        ),
        (
            "Transfer-Encoding gzip, chunked",
            "Transfer-Encoding: gzip, chunked",
        ),
        ("Transfer-Encoding xchunked", "Transfer-Encoding: xchunked"),
        ("space before the colon", "Transfer-Encoding : chunked"),
        (
            "Transfer-Encoding in upper case",
            "TRANSFER-ENCODING: CHUNKED",
        ),
        (
            "Transfer-Encoding with a tab",
            "Transfer-Encoding:\tchunked",
        ),
        (
            "Transfer-Encoding and Content-Length",
            "Transfer-Encoding: chunked\r\nContent-Length: 3",
        ),
    ] {
        let bytes = format!("{head}{te}\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        cases.raw(family, name, bytes);
    }
    let with_length = |length: &str, body: &str| {
        format!("{head}Content-Length: {length}\r\nConnection: close\r\n\r\n{body}")
    };
    cases.raw(
        family,
        "truncated body, kept open",
        with_length("100", "{\"id\":"),
    );
    cases
        .raw(
            family,
            "truncated body, half-closed",
            with_length("100", "{\"id\":"),
        )
        .half_close()
        .may_close();
    let admin_body = "POST /admin/api/events/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                      Content-Length: 50\r\nConnection: close\r\n\r\n{";
    cases.raw(family, "truncated admin body, kept open", admin_body);
    cases.raw(
        family,
        "truncated head, kept open",
        format!("{head}Content-Length: 2\r\n"),
    );
    cases.raw(
        family,
        "request line only, kept open",
        "GET /healthz HTTP/1.1\r\n",
    );
    cases
        .raw(
            family,
            "truncated head, half-closed",
            format!("{head}Content-Length: 2"),
        )
        .half_close()
        .may_close();
    cases
        .raw(family, "empty connection", "")
        .half_close()
        .may_close();
    cases
        .raw(family, "only CRLFs", "\r\n\r\n\r\n\r\n")
        .half_close()
        .may_close();

    let get = |path: &str, last: bool| {
        let close = if last { "Connection: close\r\n" } else { "" };
        format!("GET {path} HTTP/1.1\r\nHost: a\r\n{close}\r\n")
    };
    let two = get("/healthz", false) + &get("/readyz", true);
    cases.raw(family, "two pipelined GETs", two).answers(2);
    let ten = get("/healthz", false).repeat(9) + &get("/metrics", true);
    cases.raw(family, "ten pipelined GETs", ten).answers(10);
    let forty = get("/healthz", false).repeat(39) + &get("/healthz", true);
    cases.raw(family, "forty pipelined GETs", forty).answers(40);
    let posts = format!("{head}Content-Length: 2\r\n\r\n{{}}") + &with_length("2", "{}");
    cases.raw(family, "two pipelined POSTs", posts).answers(2);
    let smuggle = format!(
        "{head}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
         POST /admin/api/events/1/retry HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n\
         Connection: close\r\n\r\n"
    );
    cases.raw(family, "CL.TE smuggling attempt", smuggle);
    let te_cl = format!(
        "{head}Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n1\r\nG\r\n0\r\n\r\n{}",
        get("/healthz", true)
    );
    cases.raw(family, "TE.CL smuggling attempt", te_cl);
    let eats = format!(
        "{head}Content-Length: 5\r\n\r\n{{}}{}",
        get("/healthz", true)
    );
    cases.raw(family, "body length eats the next request", eats);

    for (name, bytes) in [
        ("HTTP/1.0 GET", "GET /healthz HTTP/1.0\r\n\r\n"),
        (
            "HTTP/1.0 POST without length",
            "POST /webhooks/stripe HTTP/1.0\r\n\r\n{\"id\":\"x\"}",
        ),
        (
            "HTTP/1.0 chunked",
            "POST /webhooks/stripe HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ),
        ("HTTP/0.9", "GET /healthz\r\n"),
        (
            "HTTP/2.0 version",
            "GET /healthz HTTP/2.0\r\nHost: a\r\n\r\n",
        ),
        (
            "HTTP/1.2 version",
            "GET /healthz HTTP/1.2\r\nHost: a\r\n\r\n",
        ),
        (
            "HTTP/9.9 version",
            "GET /healthz HTTP/9.9\r\nHost: a\r\n\r\n",
        ),
        (
            "lowercase version",
            "GET /healthz http/1.1\r\nHost: a\r\n\r\n",
        ),
        (
            "HTTP/1.10 version",
            "GET /healthz HTTP/1.10\r\nHost: a\r\n\r\n",
        ),
        (
            "lone LF line endings",
            "GET /healthz HTTP/1.1\nHost: a\nConnection: close\n\n",
        ),
        (
            "lone LF POST",
            "POST /webhooks/stripe HTTP/1.1\nHost: a\nContent-Length: 2\nConnection: close\n\n{}",
        ),
        (
            "mixed line endings",
            "GET /healthz HTTP/1.1\r\nHost: a\nConnection: close\r\n\n",
        ),
        (
            "lone CR line endings",
            "GET /healthz HTTP/1.1\rHost: a\rConnection: close\r\r",
        ),
        (
            "empty lines before the request",
            "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        ),
        (
            "tabs in the request line",
            "GET\t/healthz\tHTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        ),
        (
            "double spaces in the request line",
            "GET  /healthz  HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        ),
        (
            "trailing space in the request line",
            "GET /healthz HTTP/1.1 \r\nHost: a\r\nConnection: close\r\n\r\n",
        ),
        (
            "header without a colon",
            "GET /healthz HTTP/1.1\r\nHost a\r\nConnection: close\r\n\r\n",
        ),
        (
            "space before a header colon",
            "GET /healthz HTTP/1.1\r\nHost : a\r\nConnection: close\r\n\r\n",
        ),
        (
            "header line starting with a space",
            "GET /healthz HTTP/1.1\r\n Host: a\r\nConnection: close\r\n\r\n",
        ),
    ] {
        cases.raw(family, name, bytes);
    }
    let keep_alive =
        "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n";
    cases
        .raw(family, "HTTP/1.0 keep-alive", keep_alive)
        .answers(2);
    let expect =
        format!("{head}Content-Length: 10\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n");
    cases.raw(family, "Expect: 100-continue without the body", expect);
    // Tunnels and upgrades: the client ends its side, as it would when giving up.
    for (name, bytes) in [
        (
            "CONNECT",
            "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
        ),
        (
            "CONNECT to a webhook",
            "CONNECT /webhooks/stripe HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
        ),
        (
            "websocket upgrade",
            "GET /admin HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        ),
    ] {
        cases.raw(family, name, bytes).half_close();
    }
    let uri = format!(
        "GET /{} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "u".repeat(140_000)
    );
    cases.raw(family, "140 KB request target", uri);
    // Not HTTP/1 at all.
    cases
        .raw(family, "HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .may_close();
    let mut client_hello = vec![
        0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03,
    ];
    client_hello.extend(std::iter::repeat_n(0x42u8, 160));
    cases
        .raw(family, "TLS ClientHello", client_hello)
        .half_close()
        .may_close();
    cases
        .raw(family, "NUL bytes only", vec![0u8; 512])
        .half_close()
        .may_close();
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    cases
        .raw(family, "4 KB of binary noise", noise)
        .half_close()
        .may_close();
}

/// A signed-in operator's page session, so cookie-authenticated handlers are reached.
struct Session {
    cookie: String,
    csrf: String,
}

fn session_cases(cases: &mut Cases, session: &Session) {
    let cookie = session.cookie.as_str();
    let csrf = format!("csrf={}", session.csrf);
    let ids = [
        "-1",
        "0",
        "99999999999999999999999",
        "1e3",
        "0x10",
        "%00",
        "..",
        "1",
    ];
    for id in ids {
        let path = format!("/admin/events/{id}/retry");
        cases.authed(
            "POST /admin/events/{id}/retry",
            format!("session: id {id}"),
            post(&path).header("Cookie", cookie).form(&csrf),
        );
        let path = format!("/admin/api/events/{id}/retry");
        cases.authed(
            "POST /admin/api/events/{id}/retry",
            format!("session: id {id}"),
            post(&path)
                .header("Cookie", cookie)
                .header("X-CSRF-Token", &session.csrf),
        );
        cases.authed(
            "GET /admin/events/{id}",
            format!("session: id {id}"),
            get(format!("/admin/events/{id}")).header("Cookie", cookie),
        );
    }
    let family = "POST /admin/events/{id}/retry";
    let retry = || post("/admin/events/1/retry").header("Cookie", cookie);
    cases.authed(family, "session: wrong csrf", retry().form("csrf=00"));
    cases.authed(
        family,
        "session: csrf twice",
        retry().form(format!("{csrf}&{csrf}")),
    );
    cases.authed(
        family,
        "session: Origin of another site",
        retry().header("Origin", "http://evil.example").form(&csrf),
    );
    cases.authed(
        family,
        "session: Referer garbage",
        retry().header("Referer", ":::").form(&csrf),
    );
    cases.authed(
        family,
        "session: Origin non-UTF-8",
        retry()
            .header("Origin", b"http://\xff".as_slice())
            .form(&csrf),
    );
    let family = "POST /admin/api/events/{id}/retry";
    let retry = || post("/admin/api/events/1/retry").header("Cookie", cookie);
    cases.authed(family, "session: no CSRF header", retry());
    cases.authed(
        family,
        "session: garbage CSRF header",
        retry().header("X-CSRF-Token", "garbage"),
    );
    cases.authed(
        family,
        "session: Origin null",
        retry()
            .header("Origin", "null")
            .header("X-CSRF-Token", &session.csrf),
    );
    cases.authed(
        family,
        "session: Host and Origin disagree in case",
        retry()
            .header("Origin", "http://127.0.0.1:1")
            .header("X-CSRF-Token", &session.csrf),
    );
    cases.authed(
        family,
        "session: empty Idempotency-Key",
        retry()
            .header("X-CSRF-Token", &session.csrf)
            .header("Idempotency-Key", ""),
    );
    let family = "POST /admin/logout";
    cases.authed(
        family,
        "session: wrong csrf",
        post("/admin/logout")
            .header("Cookie", cookie)
            .form("csrf=nope"),
    );
    cases.authed(
        family,
        "session: cross-site",
        post("/admin/logout")
            .header("Cookie", cookie)
            .header("Origin", "http://evil.example")
            .form(&csrf),
    );
    cases.authed(
        family,
        "session: no body",
        post("/admin/logout").header("Cookie", cookie),
    );
    for (name, query) in [
        ("q with NUL", "q=%00"),
        ("limit=1e9", "limit=1e9"),
        ("cursor garbage", "cursor=%FF"),
        ("since year 0", "since=0000-01-01T00:00:00Z"),
    ] {
        cases.authed(
            "GET /admin",
            format!("session: {name}"),
            get(format!("/admin?{query}")).header("Cookie", cookie),
        );
        cases.authed(
            "GET /admin/api/events",
            format!("session: {name}"),
            get(format!("/admin/api/events?{query}")).header("Cookie", cookie),
        );
    }
    cases.authed(
        "GET /admin/api/stats",
        "session: window garbage",
        get("/admin/api/stats?window=%FF").header("Cookie", cookie),
    );
    cases.authed(
        "GET /admin/login",
        "session: already signed in",
        get("/admin/login").header("Cookie", cookie),
    );
    cases.authed(
        "GET /admin/",
        "session: cookie and a garbage bearer-less Authorization",
        get("/admin/")
            .header("Cookie", cookie)
            .header("X-Authorization", "Bearer x"),
    );
}

fn all_cases(session: &Session) -> Vec<Case> {
    let mut cases = Cases::default();
    session_cases(&mut cases, session);
    webhook_cases(&mut cases);
    ops_cases(&mut cases);
    admin_credential_cases(&mut cases);
    admin_query_cases(&mut cases);
    admin_id_cases(&mut cases);
    login_cases(&mut cases);
    unknown_path_cases(&mut cases);
    framing_cases(&mut cases);
    cases.list
}

/// How a case ended.
#[derive(Debug)]
struct Outcome {
    /// Status codes of the final answers read (1xx skipped).
    statuses: Vec<u16>,
    /// `None` when all expected answers arrived; else how the connection ended.
    end: Option<String>,
    took: Duration,
}

/// One complete answer at the start of `buf`: its status and length, or `None`
/// when more bytes are needed.
fn parse_answer(buf: &[u8], head_only: bool) -> Option<(u16, usize)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head.get(9..12)?.parse().ok()?;
    if (100..200).contains(&status) || head_only || status == 204 || status == 304 {
        return Some((status, head_end));
    }
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    if let Some(length) = header("content-length:") {
        let length: usize = length.parse().ok()?;
        return (buf.len() >= head_end + length).then_some((status, head_end + length));
    }
    if header("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        let mut at = head_end;
        loop {
            let line_end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
            let size_text = String::from_utf8_lossy(&buf[at..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            at = line_end + 2 + size + 2;
            if buf.len() < at {
                return None;
            }
            if size == 0 {
                return Some((status, at));
            }
        }
    }
    // Neither: the body runs to the end of the connection.
    None
}

/// The status of an answer whose head arrived but not (all of) its body.
fn status_of_head(buf: &[u8]) -> Option<u16> {
    buf.starts_with(b"HTTP/")
        .then(|| String::from_utf8_lossy(buf.get(9..12)?).parse().ok())
        .flatten()
}

async fn run_case(addr: SocketAddr, case: &Case) -> Outcome {
    let started = Instant::now();
    let stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) => {
            return Outcome {
                statuses: Vec::new(),
                end: Some(format!("connect failed: {e}")),
                took: started.elapsed(),
            };
        }
    };
    let (mut reader, mut writer) = stream.into_split();
    let writing = async {
        let result = writer.write_all(&case.bytes).await;
        if case.ending == Ending::HalfClose {
            let _ = writer.shutdown().await;
        }
        result
    };
    let reading = async {
        let mut buf = Vec::new();
        let mut statuses = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            while let Some((status, used)) = parse_answer(&buf, case.head) {
                buf.drain(..used);
                if status >= 200 {
                    statuses.push(status);
                }
            }
            if statuses.len() >= case.answers {
                return (statuses, None);
            }
            match reader.read(&mut chunk).await {
                Ok(0) => {
                    statuses.extend(status_of_head(&buf));
                    return (statuses, Some("closed".to_string()));
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    statuses.extend(status_of_head(&buf));
                    return (statuses, Some(format!("read error: {:?}", e.kind())));
                }
            }
        }
    };
    // Reads while writing (hookd may answer before it has read everything), and
    // stops as soon as the answers are in, however far the writing got.
    tokio::pin!(writing, reading);
    let mut written = false;
    let read = tokio::time::timeout(CASE_LIMIT, async {
        loop {
            tokio::select! {
                answers = &mut reading => break answers,
                _ = &mut writing, if !written => written = true,
            }
        }
    })
    .await;
    let (statuses, end) =
        read.unwrap_or_else(|_| (Vec::new(), Some("no answer: timed out".into())));
    Outcome {
        statuses,
        end,
        took: started.elapsed(),
    }
}

/// What is wrong with an outcome, if anything.
fn judge(case: &Case, outcome: &Outcome) -> Option<String> {
    if let Some(bad) = outcome.statuses.iter().find(|s| **s >= 500) {
        return Some(format!("answered {bad} (statuses {:?})", outcome.statuses));
    }
    if case.target == Target::Authed && outcome.statuses.iter().any(|s| *s == 401 || *s == 429) {
        return Some(format!(
            "a valid token was refused ({:?}): the handler was not reached",
            outcome.statuses
        ));
    }
    match &outcome.end {
        None => None,
        Some(end) if end.starts_with("no answer") || end.starts_with("connect") => {
            Some(format!("{end} after {:?}", outcome.took))
        }
        Some(end) if outcome.statuses.is_empty() && !case.may_close => {
            Some(format!("{end} without an answer after {:?}", outcome.took))
        }
        Some(end) if outcome.statuses.len() < case.answers && !case.may_close => Some(format!(
            "{end} after {} of {} answers {:?}",
            outcome.statuses.len(),
            case.answers,
            outcome.statuses
        )),
        Some(_) => None,
    }
}

async fn stored(app: &TestApp) -> BTreeMap<&'static str, i64> {
    let mut counts = BTreeMap::new();
    for table in [
        "webhook_events",
        "payments",
        "admin_idempotency_keys",
        "admin_revoked_sessions",
    ] {
        let count = app
            .count(&format!("SELECT count(*) FROM {table}"), &[])
            .await;
        counts.insert(table, count);
    }
    counts
}

fn app_addr(app: &TestApp) -> SocketAddr {
    app.base
        .trim_start_matches("http://")
        .parse()
        .expect("address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_thousand_hostile_requests_get_answers_below_500_and_store_nothing() {
    let started = Instant::now();
    let mut settings = shipped_settings();
    settings.body_timeout = BODY_TIMEOUT;
    let anon = spawn(Spawn {
        settings: settings.clone(),
        ..Spawn::default()
    })
    .await;
    let authed = spawn(Spawn {
        settings,
        db: anon.db.clone(),
        ..Spawn::default()
    })
    .await;
    let cookie = authed.sign_in(OPERATOR).await;
    let page = authed
        .admin(Credential::Cookie(cookie.clone()))
        .get("/admin")
        .await;
    let session = Session {
        csrf: csrf_of(&String::from_utf8_lossy(&page.body)),
        cookie,
    };
    let cases = all_cases(&session);

    let mut names = HashSet::new();
    for case in &cases {
        assert!(
            names.insert((case.family, case.name.as_str())),
            "two cases named {}: {}",
            case.family,
            case.name
        );
    }
    let mut per_family: BTreeMap<&str, usize> = BTreeMap::new();
    for case in &cases {
        *per_family.entry(case.family).or_default() += 1;
    }
    println!("{} hostile cases:", cases.len());
    for (family, count) in &per_family {
        println!("  {count:5}  {family}");
    }
    assert!(cases.len() >= 300, "{} cases", cases.len());

    let (anon_addr, authed_addr) = (app_addr(&anon), app_addr(&authed));
    let outcomes: Vec<(usize, Outcome)> = futures_util::stream::iter(cases.iter().enumerate())
        .map(|(i, case)| async move {
            let addr = match case.target {
                Target::Anon => anon_addr,
                Target::Authed => authed_addr,
            };
            (i, run_case(addr, case).await)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;

    let mut failures = Vec::new();
    let mut closed_silently = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    for (i, outcome) in &outcomes {
        let case = &cases[*i];
        let label = format!("{}: {}", case.family, case.name);
        if outcome.took > slowest.0 {
            slowest = (outcome.took, label.clone());
        }
        if let Some(problem) = judge(case, outcome) {
            failures.push(format!("{label} → {problem}"));
        } else if outcome.statuses.is_empty() {
            closed_silently.push(format!(
                "{label} ({})",
                outcome.end.as_deref().unwrap_or("")
            ));
        }
    }
    if std::env::var_os("HOSTILE_VERBOSE").is_some() {
        let mut lines: Vec<String> = outcomes
            .iter()
            .map(|(i, o)| {
                let case = &cases[*i];
                format!(
                    "{:?} {:?} {}: {}",
                    o.statuses, o.end, case.family, case.name
                )
            })
            .collect();
        lines.sort();
        println!("{}", lines.join("\n"));
    }
    closed_silently.sort();
    println!(
        "{} cases closed without an answer (allowed for framing garbage):",
        closed_silently.len()
    );
    for line in &closed_silently {
        println!("  {line}");
    }
    println!(
        "cases done in {:?}; slowest {:?}: {}",
        started.elapsed(),
        slowest.0,
        slowest.1
    );

    // Nothing stored, and both instances still serve.
    let counts = stored(&anon).await;
    for app in [&anon, &authed] {
        let health = app.get("/healthz").await;
        if health.status != 200 {
            failures.push(format!("afterwards /healthz answered {}", health.status));
        }
    }
    let genuine = stripe_event(
        "evt_after_hostile",
        "customer.created",
        json!({"id": "cus_after", "object": "customer"}),
    );
    let delivered = anon.deliver("stripe", &genuine).await;
    if delivered.status != 200 {
        failures.push(format!(
            "afterwards a genuine delivery answered {}",
            delivered.status
        ));
    }
    failures.sort();
    println!("run time {:?}", started.elapsed());
    assert!(
        failures.is_empty() && counts.values().all(|c| *c == 0),
        "stored rows {counts:?}; {} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
