//! The scenarios every provider goes through, each for one shipped source.

use std::collections::BTreeSet;

use hookd::domain::PaymentKind;
use hookd::providers::{Answer as Expected, SignatureRefusal};
use serde_json::json;

use super::{Case, Documented, Fixture, Row, provider_named, provider_of, signed};
use crate::support::provider::{assert_resend_is_a_duplicate, refusal, spawn_rotated};
use crate::support::{Answer, TestApp, run_hookd, spawn_app};

/// A stored event's type, kind and status.
type Stored = (String, Option<String>, String);

/// The type, kind and status of each event of `source`, in the order stored.
async fn events(app: &TestApp, source: &str) -> Vec<Stored> {
    app.query(
        "SELECT event_type, kind, status FROM webhook_events WHERE source = $1 ORDER BY id",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// The payment rows of `source`, by payment id.
async fn payment_rows(app: &TestApp, source: &str) -> Vec<Row> {
    app.query(
        "SELECT payment_id, status, amount, amount_refunded, currency, customer_id
         FROM payments WHERE source = $1 ORDER BY payment_id",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

/// How the events of `fixtures` are stored, as documented: processed as
/// their kind, or ignored; sorted.
fn stored_as<'f>(fixtures: impl IntoIterator<Item = &'f Fixture>) -> Vec<Stored> {
    let mut stored: Vec<Stored> = (fixtures.into_iter())
        .flat_map(|f| f.types.iter().zip(&f.kinds))
        .map(|(event_type, kind)| match kind {
            Some(kind) => (event_type.clone(), Some(kind.clone()), "processed".into()),
            None => (event_type.clone(), None, "ignored".into()),
        })
        .collect();
    stored.sort();
    stored
}

/// `answer` is the one the provider expects for `fixture`, just taken: its
/// fixed body, or hookd's naming its events (the last stored).
async fn assert_answer(app: &TestApp, source: &str, fixture: &Fixture, answer: &Answer) {
    let name = &fixture.name;
    assert_eq!(answer.status, 200, "{source} {name}: {}", answer.text());
    let provider = provider_of(app, source);
    let documented = Documented::of(provider.name()).answer;
    match provider.answer() {
        Expected::Fixed { content_type, body } => {
            assert_eq!(documented, body, "{source}: the book's answer");
            assert_eq!(answer.text(), body, "{source} {name}");
            assert_eq!(answer.header("Content-Type"), Some(content_type));
        }
        Expected::Nothing => {
            assert_eq!(documented, "empty", "{source}: the book's answer");
            assert_eq!(answer.text(), "", "{source} {name}");
            assert_eq!(answer.header("Idempotent-Replayed"), None);
        }
        Expected::Json => {
            assert_eq!(documented, "JSON", "{source}: the book's answer");
            let mut ids = app
                .strings(
                    "SELECT event_id FROM webhook_events WHERE source = $1 ORDER BY id DESC LIMIT $2",
                    &[&source, &(fixture.kinds.len() as i64)],
                )
                .await;
            ids.reverse();
            match ids.as_slice() {
                [one] => {
                    let named = format!(r#"{{"status":"accepted","event_id":{}}}"#, json!(one));
                    assert_eq!(answer.text(), named, "{source} {name}");
                }
                several => {
                    let named = json!({"status": "accepted", "event_ids": several});
                    assert_eq!(answer.json(), named, "{source} {name}");
                }
            }
            assert_eq!(answer.header("content-type"), Some("application/json"));
        }
    }
}

/// Signs and sends `fixture`, checks the provider's answer, and that its
/// events were stored as documented.
async fn send_documented(app: &TestApp, source: &str, fixture: &Fixture) {
    let before = events(app, source).await.len();
    let delivery = signed(app, source, fixture, None);
    let answer = app.post(source, &delivery.headers, delivery.body).await;
    assert_answer(app, source, fixture, &answer).await;
    let mut added = events(app, source).await.split_off(before);
    added.sort();
    assert_eq!(added, stored_as([fixture]), "{source} {}", fixture.name);
}

/// Every fixture, in file order: the documented kind of each event (every
/// kind the provider maps among them), the provider's answer, and the
/// documented payment rows.
pub async fn documented_kinds_and_rows(source: &'static str) {
    let case = Case::of(source);
    let app = spawn_app().await;
    let provider = provider_of(&app, source);
    let documented: Vec<&str> = case
        .fixtures
        .iter()
        .flat_map(|f| f.kinds.iter().flatten())
        .map(String::as_str)
        .collect();
    let configured = app.settings().source(source).expect("source");
    let mapped = provider.default_event_types().into_values();
    for kind in mapped.chain(configured.event_types.values().cloned()) {
        assert!(
            documented.contains(&kind.as_str()),
            "{source}: no fixture is {kind}"
        );
    }
    if !case.rows.is_empty() {
        for kind in PaymentKind::ALL {
            assert!(
                documented.contains(&kind.as_str()),
                "{source}: no fixture is {kind:?}"
            );
        }
    }
    for fixture in &case.fixtures {
        send_documented(&app, source, fixture).await;
    }
    assert_eq!(payment_rows(&app, source).await, case.rows, "{source}");
}

/// The fixtures sent last to first (refunds and disputes before the payment
/// they are about): the same kinds and the same payment rows.
pub async fn any_order(source: &'static str) {
    let case = Case::of(source);
    let app = spawn_app().await;
    for fixture in case.fixtures.iter().rev() {
        send_documented(&app, source, fixture).await;
    }
    assert_eq!(payment_rows(&app, source).await, case.rows, "{source}");
}

/// A fixture of one event sent twice: the second is a duplicate answered
/// byte for byte as the first, and the event counts two deliveries and the
/// one attempt of its kind (none when ignored). One of a kind is chosen where
/// the fixtures have one.
pub async fn resend(source: &'static str) {
    let case = Case::of(source);
    let app = spawn_app().await;
    let single = case.fixtures.iter().filter(|f| f.kinds.len() == 1);
    let fixture = single
        .clone()
        .find(|f| f.kinds[0].is_some())
        .or_else(|| single.clone().next())
        .expect("a fixture of one event");
    let delivery = signed(&app, source, fixture, None);
    let attempts = i32::from(fixture.kinds[0].is_some());
    // Sent again as it was, then signed anew (another time, another
    // transmission): the first answer each time, the event run once.
    let first =
        assert_resend_is_a_duplicate(&app, source, &delivery.headers, delivery.body, attempts)
            .await;
    let resent = signed(&app, source, fixture, None);
    let third = app.post(source, &resent.headers, resent.body).await;
    assert_eq!((third.status, &third.body), (200, &first.body), "{source}");
    assert_eq!(third.header("Idempotent-Replayed"), Some("true"));
    let counts: Vec<(i32, i32)> = app
        .query(
            "SELECT deliveries, attempts FROM webhook_events WHERE source = $1",
            &[&source],
        )
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(counts, [(3, attempts)], "{source}");
}

/// A source holding a newer secret before its previous one: a delivery signed
/// with either is taken, and its event says which (1 the newer, 2 the previous).
/// (PayPal signs with certificates, not secrets: its own tests rotate those.)
pub async fn rotation(source: &'static str) {
    let case = Case::of(source);
    let newer = provider_named(source).new_secret();
    let (app, previous) = spawn_rotated(source, newer.expose()).await;
    // The request of the most events with the previous secret, another with the newer.
    let most = (case.fixtures.iter())
        .max_by_key(|f| (f.kinds.len(), std::cmp::Reverse(&f.name)))
        .expect("fixtures");
    let other = (case.fixtures.iter())
        .find(|f| f.name != most.name)
        .expect("another fixture");
    let mut expected = Vec::new();
    for (fixture, secret, position) in [(most, &previous, 2), (other, &newer, 1)] {
        let delivery = signed(&app, source, fixture, Some(secret));
        let answer = app.post(source, &delivery.headers, delivery.body).await;
        assert_answer(&app, source, fixture, &answer).await;
        expected.extend(fixture.kinds.iter().map(|_| position));
    }
    let signed_with: Vec<i32> = app
        .query(
            "SELECT signed_with FROM webhook_events WHERE source = $1 ORDER BY id",
            &[&source],
        )
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(signed_with, expected, "{source}");
}

/// The first fixture signed with another secret, unsigned, with its body
/// altered, its signature missing or unreadable: each refused with the provider's status
/// and why, nothing stored; the genuine delivery is then taken.
pub async fn tampering(source: &'static str) {
    let case = Case::of(source);
    let app = spawn_app().await;
    let provider = provider_of(&app, source);
    // The status the book documents, which the provider's own says too.
    let status = Documented::of(provider.name()).refused;
    let own = match provider.refused_signature() {
        SignatureRefusal::Unauthorized => 401,
        SignatureRefusal::TokenInvalid => 498,
    };
    assert_eq!(own, status, "{source}");
    let fixture = &case.fixtures[0];
    let genuine = signed(&app, source, fixture, None);
    let foreign = signed(&app, source, fixture, Some(&provider.new_secret()));
    let mut cases = vec![
        (
            "another secret",
            foreign.headers.clone(),
            foreign.body.clone(),
            "signature mismatch".to_string(),
        ),
        // The fixture as it is, without a header: the first one it lacks is named.
        (
            "nothing signed",
            vec![],
            fixture.bytes.clone(),
            String::new(),
        ),
    ];
    // Where the signature travels beside the body, the whole body is signed:
    // changing one digit of it, or leaving out or garbling the headers that
    // differ between two secrets' signatures, is refused. (A provider that
    // signs inside the body has the fields it signs checked in its own tests.)
    if genuine.body == fixture.bytes {
        let mut altered = genuine.body.clone();
        let at = altered
            .iter()
            .rposition(u8::is_ascii_digit)
            .expect("a digit in the body");
        altered[at] = b'0' + (altered[at] - b'0' + 1) % 10;
        cases.push((
            "an altered body",
            genuine.headers.clone(),
            altered,
            "signature mismatch".to_string(),
        ));
        let signature: Vec<&String> = genuine
            .headers
            .iter()
            .filter(|h| !foreign.headers.contains(h))
            .map(|(name, _)| name)
            .collect();
        assert!(
            !signature.is_empty(),
            "{source}: the signature is in a header"
        );
        let unsigned = genuine
            .headers
            .iter()
            .filter(|(name, _)| !signature.contains(&name))
            .cloned()
            .collect();
        let missing = format!("missing {} header", signature[0]);
        cases.push(("no signature", unsigned, genuine.body.clone(), missing));
        let garbled = genuine
            .headers
            .iter()
            .map(|(name, value)| match signature.contains(&name) {
                true => (name.clone(), "!".to_string()),
                false => (name.clone(), value.clone()),
            })
            .collect();
        let malformed = format!("malformed {} header", signature[0]);
        cases.push((
            "a garbled signature",
            garbled,
            genuine.body.clone(),
            malformed,
        ));
    }
    let configured = app.settings().source(source).expect("source");
    let now = chrono::Utc::now().timestamp();
    for (what, headers, body, reason) in cases {
        // The reason given is the provider's own verdict, word for word.
        let verdict = configured
            .verifier()
            .verify_request(&headers, &body, now)
            .expect_err("refused");
        let answer: Answer = app.post(source, &headers, body).await;
        let (refused, error, why) = refusal(&answer);
        assert_eq!(
            (refused, error.as_str()),
            (status, "invalid_signature"),
            "{source}, {what}: {}",
            answer.text()
        );
        assert_eq!(why, verdict.to_string(), "{source}, {what}");
        let json = Some("application/json");
        assert_eq!(answer.header("content-type"), json, "{source}, {what}");
        assert!(why.contains(&reason), "{source}, {what}: {why}");
    }
    assert_eq!(events(&app, source).await.len(), 0, "{source}");
    let answer = app.post(source, &genuine.headers, genuine.body).await;
    assert_eq!(answer.status, 200, "{source}: {}", answer.text());
    assert_eq!(
        events(&app, source).await.len(),
        fixture.kinds.len(),
        "{source}"
    );
}

/// `hookd replay fixtures/<source>` with the real binary: every file
/// accepted as new, then every file a duplicate (the payment rows as
/// documented), then twice with `--new-ids` every file new again under fresh
/// ids, stored and applied as the originals were.
pub async fn replay(source: &'static str) {
    let case = Case::of(source);
    let app = spawn_app().await;
    let fresh = match provider_of(&app, source).answer() {
        Expected::Fixed { body, .. } => format!(" 200 {body}  new "),
        Expected::Json => " 200 accepted  new ".to_string(),
        Expected::Nothing => " 200   new ".to_string(),
    };
    let fresh = fresh.as_str();
    let sent = run_replay(&app, &case, &[]).await;
    assert!(
        sent.iter().all(|l| l.contains(fresh)),
        "{source}: {sent:#?}"
    );
    let again = run_replay(&app, &case, &[]).await;
    assert!(
        again.iter().all(|l| l.contains("replayed")),
        "{source}: {again:#?}"
    );
    let mut stored: Vec<_> = events(&app, source).await;
    stored.sort();
    assert_eq!(stored, stored_as(&case.fixtures), "{source}");
    assert_eq!(payment_rows(&app, source).await, case.rows, "{source}");
    for _ in 0..2 {
        let anew = run_replay(&app, &case, &["--new-ids"]).await;
        assert!(
            anew.iter().all(|l| l.contains(fresh)),
            "{source}: {anew:#?}"
        );
    }
    // Fresh ids each run, every copy stored and applied as the originals were.
    let mut stored = events(&app, source).await;
    stored.sort();
    let fixtures = &case.fixtures;
    let thrice = stored_as(fixtures.iter().chain(fixtures).chain(fixtures));
    assert_eq!(stored, thrice, "{source}");
    let distinct = app
        .count(
            "SELECT count(DISTINCT event_id) FROM webhook_events WHERE source = $1",
            &[&source],
        )
        .await;
    assert_eq!(distinct as usize, thrice.len(), "{source}");
    // Handlers merge: copies under new ids naming the same payments change
    // none of them; where the new ids name new payments (a provider whose
    // event id is its payment's), the documented ones are still there.
    let after = payment_rows(&app, source).await;
    let ids = |rows: &[Row]| rows.iter().map(|r| r.0.clone()).collect::<BTreeSet<_>>();
    if ids(&after) == ids(&case.rows) {
        assert_eq!(
            after, case.rows,
            "{source}: the new copies changed a payment"
        );
    } else {
        assert!(
            ids(&after).is_superset(&ids(&case.rows)),
            "{source}: {after:#?}"
        );
    }
}

/// `hookd replay` of the source's fixtures folder: it succeeds, and says one
/// line for each file, which are returned.
async fn run_replay(app: &TestApp, case: &Case, extra: &[&str]) -> Vec<String> {
    let source = case.source;
    let folder = format!("fixtures/{source}");
    // The source is the folder's name when --source is left out.
    let mut args = vec!["replay", &folder, "--url", &app.base];
    args.extend_from_slice(extra);
    let output = run_hookd(&args, None).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{source} {extra:?}: {stdout}");
    let sent: Vec<String> = stdout
        .lines()
        .filter(|l| l.ends_with(" ms") && !l.contains("deliveries:"))
        .map(String::from)
        .collect();
    assert_eq!(sent.len(), case.fixtures.len(), "{source}: {stdout}");
    sent
}
