//! `docs/openapi.json` against the server: it describes every `/admin/api` route
//! hookd registers, and the real answers of each route match the schemas it
//! gives them, key for key (a key the document does not name is a failure).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::support::{Answer, Credential, OPERATOR, VIEWER, spawn_app, stripe_event};

fn document() -> Value {
    serde_json::from_str(hookd::http::OPENAPI).expect("docs/openapi.json is JSON")
}

/// `#/components/schemas/X` and the like.
fn resolve<'d>(doc: &'d Value, reference: &str) -> &'d Value {
    let pointer = reference.strip_prefix('#').expect("a local $ref");
    doc.pointer(pointer)
        .unwrap_or_else(|| panic!("{reference} resolves to nothing"))
}

fn follow<'d>(doc: &'d Value, mut node: &'d Value) -> &'d Value {
    while let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        node = resolve(doc, reference);
    }
    node
}

/// The property names a schema (with its `allOf` parts) declares.
fn declared(doc: &Value, schema: &Value, into: &mut BTreeSet<String>) {
    let schema = follow(doc, schema);
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        into.extend(properties.keys().cloned());
    }
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        declared(doc, part, into);
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        other => panic!("unknown type {other}"),
    }
}

/// The JSON Schema subset the document uses: `$ref`, `allOf`, `type` (one or a
/// list, `"null"` included), `enum`, `required`, `properties`,
/// `additionalProperties`, `items`, `format: date-time`, `minimum`/`maximum` —
/// and, stricter than JSON Schema, an object may hold only the keys its schema
/// declares unless `additionalProperties` says what the others are.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = follow(doc, schema);
    validate_shallow(doc, schema, value, at)?;
    if let Some(object) = value.as_object()
        && schema.get("additionalProperties").is_none()
        && (schema.get("properties").is_some() || schema.get("allOf").is_some())
    {
        let mut known = BTreeSet::new();
        declared(doc, schema, &mut known);
        if let Some(extra) = object.keys().find(|k| !known.contains(*k)) {
            return Err(format!("{at}.{extra}: not in the document"));
        }
    }
    Ok(())
}

/// One schema's own keywords (its `allOf` parts are checked by the caller).
fn validate_shallow(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = follow(doc, schema);
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        validate_shallow(doc, part, value, at)?;
    }
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            other => panic!("bad type {other}"),
        };
        if !names.iter().any(|name| type_matches(name, value)) {
            return Err(format!("{at}: {value} is not {names:?}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !value.is_null()
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && let Some(text) = value.as_str()
        && chrono::DateTime::parse_from_rfc3339(text).is_err()
    {
        return Err(format!("{at}: {text} is not an RFC 3339 time"));
    }
    for (keyword, holds) in [
        ("minimum", (|v, m| v >= m) as fn(f64, f64) -> bool),
        ("maximum", |v, m| v <= m),
    ] {
        if let (Some(bound), Some(number)) =
            (schema.get(keyword).and_then(Value::as_f64), value.as_f64())
            && !holds(number, bound)
        {
            return Err(format!("{at}: {number} breaks {keyword} {bound}"));
        }
    }
    if let Some(object) = value.as_object() {
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                return Err(format!("{at}.{name}: required, missing"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, item) in object {
            if let Some(property) = properties.and_then(|p| p.get(key)) {
                validate(doc, property, item, &format!("{at}.{key}"))?;
            } else if let Some(other) = schema.get("additionalProperties").filter(|a| a.is_object())
            {
                validate(doc, other, item, &format!("{at}.{key}"))?;
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate(doc, items, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// The schema the document gives the answer of `method path` with `status`.
fn answer_schema<'d>(doc: &'d Value, method: &str, path: &str, status: u16) -> &'d Value {
    let operation = &doc["paths"][path][method];
    assert!(operation.is_object(), "{method} {path} is not documented");
    let response = operation["responses"]
        .get(status.to_string())
        .unwrap_or_else(|| panic!("{method} {path}: {status} is not documented"));
    &follow(doc, response)["content"]["application/json"]["schema"]
}

/// Checks a real answer against the document.
fn check(doc: &Value, method: &str, path: &str, answer: &Answer) {
    let value: Value = answer.json();
    let schema = answer_schema(doc, method, path, answer.status);
    validate(doc, schema, &value, "$").unwrap_or_else(|problem| {
        panic!("{method} {path} {}: {problem}\n{value:#}", answer.status)
    });
}

#[test]
fn every_admin_api_route_is_documented_and_nothing_else() {
    let doc = document();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    let registered: BTreeSet<(String, String)> = hookd::http::admin_api_routes()
        .into_iter()
        .map(|(method, path, _)| (method.as_str().to_ascii_lowercase(), path.to_string()))
        .collect();
    let paths: &Map<String, Value> = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("a path item")
                .keys()
                .filter(|k| ["get", "post", "put", "patch", "delete"].contains(&k.as_str()))
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    assert_eq!(documented, registered);
    assert!(registered.len() >= 5);
    let paths: BTreeSet<&str> = hookd::http::admin_api_routes()
        .iter()
        .map(|(_, path, _)| *path)
        .collect();
    assert_eq!(paths.len(), registered.len(), "one method per path");

    // Every reference resolves, and every operation answers 401 without a credential.
    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for reference in all {
        resolve(&doc, &reference);
    }
    for (method, path) in &registered {
        answer_schema(&doc, method, path, 401);
    }
    let schemes = doc["components"]["securitySchemes"]
        .as_object()
        .expect("schemes");
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["session"]["in"], "cookie");
    assert_eq!(schemes["session"]["name"], "hookd_session");
}

#[test]
fn the_validator_refuses_what_the_document_does_not_describe() {
    let doc = document();
    let schema = json!({"$ref": "#/components/schemas/EventList"});
    let fine = json!({"events": [], "next_cursor": null});
    assert_eq!(validate(&doc, &schema, &fine, "$"), Ok(()));
    for bad in [
        json!({"events": []}),
        json!({"events": [], "next_cursor": 3}),
        json!({"events": [], "next_cursor": null, "extra": 1}),
        json!({"events": [{"id": 1}], "next_cursor": null}),
    ] {
        assert!(validate(&doc, &schema, &bad, "$").is_err(), "{bad}");
    }
}

#[tokio::test]
async fn the_real_answers_of_every_route_match_the_document() {
    let doc = document();
    let app = spawn_app().await;
    let event = stripe_event(
        "evt_openapi",
        "payment_intent.succeeded",
        json!({"id": "pi_openapi", "object": "payment_intent", "amount": 700, "customer": "cus_1"}),
    );
    assert_eq!(app.deliver("stripe", &event).await.status, 200);
    let ignored = stripe_event(
        "evt_openapi_ignored",
        "customer.created",
        json!({"id": "cus_1"}),
    );
    assert_eq!(app.deliver("stripe", &ignored).await.status, 200);
    let viewer = app.admin(Credential::Bearer(VIEWER.into()));
    let operator = app.admin(Credential::Bearer(OPERATOR.into()));
    let nobody = app.admin(Credential::None);

    let list = viewer.get("/admin/api/events?limit=1").await;
    assert_eq!(list.status, 200);
    assert!(list.json()["next_cursor"].is_string(), "a second page");
    check(&doc, "get", "/admin/api/events", &list);
    let last = viewer.get("/admin/api/events?source=stripe").await;
    assert!(last.json()["next_cursor"].is_null());
    check(&doc, "get", "/admin/api/events", &last);
    for bad in ["?limit=0", "?status=lost", "?since=yesterday"] {
        let answer = viewer.get(&format!("/admin/api/events{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}");
        check(&doc, "get", "/admin/api/events", &answer);
    }

    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_openapi'",
            &[],
        )
        .await;
    let show = viewer.event(id).await;
    assert_eq!(show.status, 200);
    check(&doc, "get", "/admin/api/events/{id}", &show);
    let missing = viewer.get("/admin/api/events/999999").await;
    assert_eq!(missing.status, 404);
    check(&doc, "get", "/admin/api/events/{id}", &missing);
    let reveal = format!("/admin/api/events/{id}?reveal=true");
    for (client, path, status) in [
        (&operator, reveal.clone(), 200),
        (&viewer, reveal, 403),
        (&viewer, format!("/admin/api/events/{id}?reveal=maybe"), 400),
    ] {
        let answer = client.get(&path).await;
        assert_eq!(answer.status, status, "{path}");
        check(&doc, "get", "/admin/api/events/{id}", &answer);
    }

    let retry = format!("/admin/api/events/{id}/retry");
    let retried = operator.post(&retry, &[("Idempotency-Key", "k-1")]).await;
    assert_eq!(retried.status, 200);
    check(&doc, "post", "/admin/api/events/{id}/retry", &retried);
    let replayed = operator.post(&retry, &[("Idempotency-Key", "k-1")]).await;
    assert_eq!(replayed.header("Idempotent-Replayed"), Some("true"));
    check(&doc, "post", "/admin/api/events/{id}/retry", &replayed);
    let ignored_id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_openapi_ignored'",
            &[],
        )
        .await;
    for (client, path, status) in [
        (&viewer, retry.clone(), 403),
        (&operator, "/admin/api/events/999999/retry".to_string(), 404),
        (
            &operator,
            format!("/admin/api/events/{ignored_id}/retry"),
            409,
        ),
    ] {
        let answer = client.post(&path, &[]).await;
        assert_eq!(answer.status, status, "{path}");
        check(&doc, "post", "/admin/api/events/{id}/retry", &answer);
    }
    let reused = operator
        .post(
            &format!("/admin/api/events/{ignored_id}/retry"),
            &[("Idempotency-Key", "k-1")],
        )
        .await;
    assert_eq!(reused.status, 422);
    check(&doc, "post", "/admin/api/events/{id}/retry", &reused);

    let stats = viewer.get("/admin/api/stats?window=7d").await;
    assert_eq!(stats.status, 200);
    check(&doc, "get", "/admin/api/stats", &stats);
    let series = viewer.get("/admin/api/stats/series").await;
    assert_eq!(series.status, 200);
    check(&doc, "get", "/admin/api/stats/series", &series);
    let bad_window = viewer.get("/admin/api/stats?window=soon").await;
    assert_eq!(bad_window.status, 400);
    check(&doc, "get", "/admin/api/stats", &bad_window);

    let payment = viewer.get("/admin/api/payments/stripe/pi_openapi").await;
    assert_eq!(payment.status, 200);
    assert_eq!(payment.json()["events"][0]["attempt_count"], 2);
    check(
        &doc,
        "get",
        "/admin/api/payments/{source}/{payment_id}",
        &payment,
    );
    let unknown = viewer.get("/admin/api/payments/stripe/pi_nobody").await;
    assert_eq!(unknown.status, 404);
    check(
        &doc,
        "get",
        "/admin/api/payments/{source}/{payment_id}",
        &unknown,
    );

    let customer = viewer.get("/admin/api/payments?customer=cus_1").await;
    assert_eq!(customer.status, 200);
    assert_eq!(customer.json()["payments"][0]["payment_id"], "pi_openapi");
    check(&doc, "get", "/admin/api/payments", &customer);
    for bad in ["", "?customer=cus_1&limit=0", "?customer=cus_1&cursor=nope"] {
        let answer = viewer.get(&format!("/admin/api/payments{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}");
        check(&doc, "get", "/admin/api/payments", &answer);
    }

    let json_body = [("Content-Type", "application/json")];
    let preview = operator
        .send(
            "POST",
            "/admin/api/events/retry",
            &json_body,
            br#"{"source":"stripe","dry_run":true}"#.to_vec(),
        )
        .await;
    assert_eq!(preview.status, 200);
    assert_eq!(preview.json()["matched"], 2);
    check(&doc, "post", "/admin/api/events/retry", &preview);
    let bulk = operator
        .send(
            "POST",
            "/admin/api/events/retry",
            &[
                ("Content-Type", "application/json"),
                ("Idempotency-Key", "bulk-1"),
            ],
            br#"{"q":"pi_openapi"}"#.to_vec(),
        )
        .await;
    assert_eq!(bulk.status, 200);
    assert_eq!(bulk.json()["outcomes"]["processed"], 1);
    check(&doc, "post", "/admin/api/events/retry", &bulk);
    for (client, body, status) in [
        (&viewer, br#"{}"#.to_vec(), 403),
        (&operator, br#"{"status":"lost"}"#.to_vec(), 400),
        (&operator, b"not json".to_vec(), 400),
    ] {
        let answer = client
            .send("POST", "/admin/api/events/retry", &json_body, body)
            .await;
        assert_eq!(answer.status, status);
        check(&doc, "post", "/admin/api/events/retry", &answer);
    }

    let forget = "/admin/api/customers/cus_nobody/forget";
    for (client, body, status) in [
        (&operator, br#"{"dry_run":true}"#.to_vec(), 200),
        (&operator, Vec::new(), 200),
        (&viewer, Vec::new(), 403),
        (&operator, br#"{"source":"nope"}"#.to_vec(), 422),
        (&operator, b"not json".to_vec(), 400),
    ] {
        let answer = client.send("POST", forget, &json_body, body).await;
        assert_eq!(answer.status, status, "{}", answer.text());
        check(
            &doc,
            "post",
            "/admin/api/customers/{customer}/forget",
            &answer,
        );
    }

    let audit = operator.get("/admin/api/audit?limit=2").await;
    assert_eq!(audit.status, 200);
    assert!(audit.json()["next_cursor"].is_string(), "a second page");
    check(&doc, "get", "/admin/api/audit", &audit);
    let everything = operator.get("/admin/api/audit?limit=500").await;
    let actions: BTreeSet<String> = everything.json()["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str().map(String::from))
        .collect();
    assert_eq!(
        actions,
        [
            "bulk_retried",
            "forgot_customer",
            "retried",
            "revealed_payload",
            "viewed_event",
            "viewed_payment"
        ]
        .map(String::from)
        .into(),
        "every action the document names appears"
    );
    check(&doc, "get", "/admin/api/audit", &everything);
    let refused = viewer.get("/admin/api/audit").await;
    assert_eq!(refused.status, 403);
    check(&doc, "get", "/admin/api/audit", &refused);

    // The document itself, to a token or to the page's session.
    let served = viewer.get("/admin/api/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.json(), doc);
    check(&doc, "get", "/admin/api/openapi.json", &served);
    let cookie = app.sign_in(VIEWER).await;
    let by_session = app
        .admin(Credential::Cookie(cookie))
        .get("/admin/api/openapi.json")
        .await;
    assert_eq!(by_session.status, 200);

    for (method, path, _) in hookd::http::admin_api_routes() {
        let concrete = path
            .replace("{id}", &id.to_string())
            .replace("{source}", "stripe")
            .replace("{payment_id}", "pi_openapi")
            .replace("{customer}", "cus_1");
        let answer = nobody
            .send(method.as_str(), &concrete, &[], Vec::new())
            .await;
        assert_eq!(answer.status, 401, "{method} {path}");
        check(&doc, &method.as_str().to_ascii_lowercase(), path, &answer);
    }
}

#[tokio::test]
async fn the_idempotency_routes_answer_as_the_document_says() {
    use crate::gateway::{Call, cut_once_without_resend};

    let doc = document();
    let (_upstream, app) = cut_once_without_resend(r#"{"id":"p"}"#).await;
    Call::post("/payments", "lost", "{}").send(&app).await;
    Call::post("/payments", "done", "{}").send(&app).await;
    let ids = app
        .query(
            "SELECT id FROM api_idempotency_keys ORDER BY idempotency_key",
            &[],
        )
        .await;
    let (done, lost): (i64, i64) = (ids[0].get(0), ids[1].get(0));
    let (viewer, operator) = (app.viewer(), app.operator());
    for query in [
        "",
        "limit=1",
        "state=unknown&route=payments&q=lost",
        "state=nope",
    ] {
        let answer = viewer.idempotency_keys(query).await;
        check(&doc, "get", "/admin/api/idempotency", &answer);
    }
    for (who, id, query) in [
        (&viewer, done, ""),
        (&operator, done, "reveal=true"),
        (&viewer, lost, ""),
        (&viewer, 999_999, ""),
        (&viewer, done, "reveal=true"),
    ] {
        let answer = who.idempotency_key(id, query).await;
        check(&doc, "get", "/admin/api/idempotency/{id}", &answer);
    }
    for (who, id) in [
        (&viewer, lost),
        (&operator, lost),
        (&operator, lost),
        (&operator, 999_999),
    ] {
        let answer = who.release_idempotency_key(id).await;
        check(&doc, "post", "/admin/api/idempotency/{id}/release", &answer);
    }
}

#[tokio::test]
async fn the_forwards_routes_answer_as_documented() {
    let doc = document();
    let receiver = crate::support::Receiver::start(&[]).await;
    let mut settings = crate::support::shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    let app = crate::support::spawn(crate::support::Spawn {
        settings,
        ..crate::support::Spawn::default()
    })
    .await;
    let viewer = app.admin(Credential::Bearer(VIEWER.into()));
    let operator = app.admin(Credential::Bearer(OPERATOR.into()));
    let list = viewer.get("/admin/api/forwards").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["forwards"][0]["state"], "closed");
    check(&doc, "get", "/admin/api/forwards", &list);
    for (client, path, status) in [
        (&operator, "/admin/api/forwards/billing/pause", 200),
        (&viewer, "/admin/api/forwards/billing/pause", 403),
        (&operator, "/admin/api/forwards/nope/pause", 404),
    ] {
        let answer = client.post(path, &[]).await;
        assert_eq!(answer.status, status, "{path}");
        check(&doc, "post", "/admin/api/forwards/{name}/pause", &answer);
    }
    let paused = viewer.get("/admin/api/forwards").await;
    assert_eq!(paused.json()["forwards"][0]["state"], "paused");
    check(&doc, "get", "/admin/api/forwards", &paused);
    let resumed = operator
        .post("/admin/api/forwards/billing/resume", &[])
        .await;
    assert_eq!(resumed.status, 200);
    check(&doc, "post", "/admin/api/forwards/{name}/resume", &resumed);
}
