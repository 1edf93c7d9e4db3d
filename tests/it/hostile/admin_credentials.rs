//! Every admin page and API route asked without a usable credential: no
//! credential, malformed bearer tokens, forged or broken session cookies.

use super::{Cases, OPERATOR, Session, VIEWER, b64, get, req};

surface!(
    "admin credentials",
    705,
    admin_credential_cases_get_answers_below_500_and_store_nothing
);

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

/// Every admin route without a credential, with malformed `Authorization`
/// headers and session cookies, and a client guessing tokens.
fn cases(cases: &mut Cases, _: &Session) {
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
