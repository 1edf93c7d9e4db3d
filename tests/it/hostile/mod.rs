//! Hostile input on every route: more than a thousand malformed, oversized, odd or
//! unauthenticated requests, generated as data and sent byte for byte over raw TCP.
//! Each must get an answer below 500 (framing garbage may instead be closed without
//! one, see `may_close`); afterwards nothing is stored and hookd still serves.
//!
//! The cases are split by the surface they hit, a file and a test each (so a
//! failure names its surface); this runner sends them and judges the outcomes.

/// A surface file's `SURFACE` (its name, its builder `cases`, how many cases it
/// holds) and its test, which sends them.
macro_rules! surface {
    ($name:literal, $count:literal, $test:ident) => {
        pub(super) const SURFACE: super::Surface = super::Surface {
            name: $name,
            build: cases,
            count: $count,
        };

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            super::run(&SURFACE).await;
        }
    };
}

mod admin_credentials;
mod admin_queries;
mod admin_sessions;
mod framing;
mod ops;
mod signatures;
mod unknown_paths;
mod webhooks;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    Credential, OPERATOR, Spawn, TestApp, VIEWER, csrf_of, shipped_settings, spawn,
    spawn_with_settings, stripe_event,
};

const SOURCES: [&str; 4] = ["stripe", "standard", "github", "shop"];
const UNKNOWN_SOURCE: &str = "nosuchprovider";
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

const EVENT: &[u8] = br#"{"id":"evt_hostile","type":"payment_intent.succeeded","data":{"object":{"id":"pi_h","amount":1}}}"#;

fn b64(text: impl AsRef<[u8]>) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, text)
}

/// A signed-in operator's page session, so cookie-authenticated handlers are reached.
struct Session {
    cookie: String,
    csrf: String,
}

/// The cases of one surface: `count` is how many it holds, so that a case lost
/// in an edit fails the test instead of silently going untested.
struct Surface {
    name: &'static str,
    build: fn(&mut Cases, &Session),
    count: usize,
}

impl Surface {
    fn cases(&self, session: &Session) -> Vec<Case> {
        let mut cases = Cases::default();
        (self.build)(&mut cases, session);
        cases.list
    }
}

/// Every surface; their counts add up to `TOTAL`.
const SURFACES: [Surface; 8] = [
    webhooks::SURFACE,
    signatures::SURFACE,
    ops::SURFACE,
    admin_credentials::SURFACE,
    admin_queries::SURFACE,
    admin_sessions::SURFACE,
    unknown_paths::SURFACE,
    framing::SURFACE,
];
const TOTAL: usize = 1_816;

#[test]
fn the_surfaces_hold_every_hostile_case_once() {
    let session = Session {
        cookie: "hookd_session=a.b.c.d".into(),
        csrf: "csrf".into(),
    };
    let mut names = HashSet::new();
    let mut total = 0;
    for surface in &SURFACES {
        let cases = surface.cases(&session);
        println!("{:5}  {}", cases.len(), surface.name);
        assert_eq!(cases.len(), surface.count, "cases on {}", surface.name);
        total += cases.len();
        for case in &cases {
            assert!(
                names.insert((case.family, case.name.clone())),
                "two cases named {}: {}",
                case.family,
                case.name
            );
        }
    }
    println!("{total} hostile cases");
    assert_eq!(total, TOTAL);
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

/// For each request line in `bytes`, in order, whether it asks readiness
/// (`GET` or `HEAD` of `/readyz`, with or without a query).
fn readiness_requests(bytes: &[u8]) -> Vec<bool> {
    String::from_utf8_lossy(bytes)
        .split("\r\n")
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
            let request = parts.next().is_none()
                && version.starts_with("HTTP/")
                && !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase());
            request.then(|| {
                let path = target.split('?').next().unwrap_or_default();
                (method == "GET" || method == "HEAD") && path == "/readyz"
            })
        })
        .collect()
}

/// What is wrong with an outcome, if anything.
fn judge(case: &Case, outcome: &Outcome) -> Option<String> {
    // Readiness may say "not ready" (503) when its check of the database
    // missed its limit on a loaded machine: that is its answer, not a fault
    // — for the answer to a request for `/readyz` itself, matched by its place.
    let readiness = readiness_requests(&case.bytes);
    let bad = outcome
        .statuses
        .iter()
        .enumerate()
        .find(|(at, s)| **s >= 500 && !(**s == 503 && readiness.get(*at) == Some(&true)))
        .map(|(_, s)| s);
    if let Some(bad) = bad {
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

/// Sends every case of `surface` (to two instances on one database, see
/// `Target`), then checks each was answered below 500, nothing was stored, and
/// both instances still serve.
async fn run(surface: &Surface) {
    let started = Instant::now();
    let mut settings = shipped_settings();
    settings.body_timeout = BODY_TIMEOUT;
    let anon = spawn_with_settings(settings.clone()).await;
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
    let cases = surface.cases(&session);
    assert_eq!(
        cases.len(),
        surface.count,
        "{} cases on {}: a case added or lost? (update its count and TOTAL)",
        cases.len(),
        surface.name
    );
    let mut per_family: BTreeMap<&str, usize> = BTreeMap::new();
    for case in &cases {
        *per_family.entry(case.family).or_default() += 1;
    }
    println!("{} hostile cases on {}:", cases.len(), surface.name);
    for (family, count) in &per_family {
        println!("  {count:5}  {family}");
    }

    let (anon_addr, authed_addr) = (anon.addr(), authed.addr());
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
        "{}: stored rows {counts:?}; {} failing cases:\n{}",
        surface.name,
        failures.len(),
        failures.join("\n")
    );
}
