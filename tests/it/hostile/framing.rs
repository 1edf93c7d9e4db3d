//! Broken HTTP/1 framing sent as raw bytes: chunking, lengths, truncation,
//! pipelining, smuggling attempts, versions, line endings, and bytes that are
//! not HTTP/1 at all.

use super::{Cases, Session};

surface!(
    "framing",
    73,
    framing_cases_get_answers_below_500_and_store_nothing
);

/// Framing garbage, sent as raw bytes. Every case must be answered, except those
/// marked `may_close`: no complete request ever arrived (nothing to answer), the
/// bytes are not HTTP/1 at all (TLS, HTTP/2, noise), or the client gave up
/// mid-body by closing its side.
fn cases(cases: &mut Cases, _: &Session) {
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
