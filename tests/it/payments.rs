//! The payment handlers: exactly-once effects under concurrency, and the same final
//! state whatever the order and repetition of events (property-tested), refunds
//! stated as cumulative totals (Stripe) or one at a time (the neutral shape).

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use crate::support::{Spawn, TestApp, spawn, spawn_app, stripe_event};

/// The source whose bodies have the neutral shape.
const NEUTRAL: &str = "standard";

/// One fact about a payment, as Stripe (or the neutral shape) would send it.
#[derive(Debug, Clone)]
enum Fact {
    Succeeded,
    Failed,
    /// Cumulative refunded amount, as `charge.refunded` carries it.
    Refunded(i64),
    /// One refund, by its number among the payment's, and its amount: the neutral
    /// shape's `refund_id` and `refund_amount`.
    Refund(usize, i64),
    Disputed,
}

/// A fact and what its event says besides: events about one payment may
/// disagree on the amount, the currency and the customer (or leave them out).
#[derive(Debug, Clone)]
struct Said {
    fact: Fact,
    amount: i64,
    currency: Option<&'static str>,
    customer: Option<&'static str>,
}

/// Same length, lowercase ASCII: ordered alike by Rust and by any collation.
const CURRENCIES: [&str; 3] = ["eur", "gbp", "usd"];
const CUSTOMERS: [&str; 3] = ["cus_a", "cus_b", "cus_c"];

#[derive(Debug, Clone, PartialEq, Eq)]
struct PaymentRow {
    succeeded: bool,
    failed: bool,
    disputed: bool,
    amount: i64,
    amount_refunded: i64,
    currency: Option<String>,
    customer_id: Option<String>,
    status: String,
}

/// The event `source` sends stating fact `n` of `payment`; `copy` 0 is the
/// provider's first event id, others are the same fact resent under a new id.
fn body(source: &str, said: &Said, n: usize, copy: usize, payment: &str) -> Value {
    let id = format!("evt_{payment}_{n}_{copy}");
    if source == NEUTRAL {
        return neutral_body(said, &id, payment);
    }
    let Said {
        amount,
        currency,
        customer,
        ..
    } = said;
    let intent = |status: &str| {
        json!({"id": payment, "object": "payment_intent", "amount": amount, "currency": currency,
               "customer": customer, "status": status})
    };
    match said.fact {
        Fact::Succeeded => stripe_event(&id, "payment_intent.succeeded", intent("succeeded")),
        Fact::Failed => stripe_event(
            &id,
            "payment_intent.payment_failed",
            intent("requires_payment_method"),
        ),
        Fact::Refunded(refunded) => stripe_event(
            &id,
            "charge.refunded",
            json!({"id": format!("ch_{payment}"), "object": "charge", "payment_intent": payment,
                   "amount": amount, "amount_refunded": refunded, "currency": currency,
                   "customer": customer, "refunded": refunded >= *amount}),
        ),
        Fact::Disputed => stripe_event(
            &id,
            "charge.dispute.created",
            json!({"id": format!("dp_{payment}"), "object": "dispute", "payment_intent": payment,
                   "charge": format!("ch_{payment}"), "amount": amount, "currency": currency}),
        ),
        Fact::Refund(..) => unreachable!("Stripe states cumulative refunds only"),
    }
}

/// The neutral shape's event with event id `id` stating `said` of `payment`.
fn neutral_body(said: &Said, id: &str, payment: &str) -> Value {
    let mut data = json!({"payment_id": payment, "amount": said.amount,
                          "currency": said.currency, "customer_id": said.customer});
    let event_type = match said.fact {
        Fact::Succeeded => "payment.succeeded",
        Fact::Failed => "payment.failed",
        Fact::Refunded(total) => {
            data["amount_refunded"] = json!(total);
            "payment.refunded"
        }
        Fact::Refund(n, amount) => {
            data["refund_id"] = json!(format!("re_{payment}_{n}"));
            data["refund_amount"] = json!(amount);
            "payment.refunded"
        }
        Fact::Disputed => {
            // Like Stripe's, disputes carry no customer.
            data["customer_id"] = Value::Null;
            "dispute.created"
        }
    };
    json!({"id": id, "type": event_type, "created": 1, "data": data})
}

/// The payment rules (which facts give which row), computed independently of
/// hookd: every flag once stated stays, the largest amount stands, the refunded
/// amount is the largest cumulative total or the sum of the distinct refunds
/// (the largest amount stated for one), and of disagreeing currencies or
/// customers the greatest stated one stands.
fn expected(said: &[Said]) -> PaymentRow {
    let any = |f: fn(&Fact) -> bool| said.iter().any(|s| f(&s.fact));
    let succeeded = any(|f| matches!(f, Fact::Succeeded));
    let failed = any(|f| matches!(f, Fact::Failed));
    let disputed = any(|f| matches!(f, Fact::Disputed));
    let total = said
        .iter()
        .filter_map(|s| match s.fact {
            Fact::Refunded(r) => Some(r),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut refunds = std::collections::BTreeMap::new();
    for s in said {
        if let Fact::Refund(n, amount) = s.fact {
            let largest = refunds.entry(n).or_insert(amount);
            *largest = (*largest).max(amount);
        }
    }
    let refunded = total.max(refunds.values().sum());
    let amount = said.iter().map(|s| s.amount).max().unwrap_or(0);
    let status = if disputed {
        "disputed"
    } else if amount > 0 && refunded >= amount {
        "refunded"
    } else if refunded > 0 {
        "partially_refunded"
    } else if succeeded {
        "succeeded"
    } else if failed {
        "failed"
    } else {
        "pending"
    };
    // Disputes carry no customer.
    let customer = said
        .iter()
        .filter(|s| !matches!(s.fact, Fact::Disputed))
        .filter_map(|s| s.customer)
        .max();
    PaymentRow {
        succeeded,
        failed,
        disputed,
        amount,
        amount_refunded: refunded,
        currency: said
            .iter()
            .filter_map(|s| s.currency)
            .max()
            .map(String::from),
        customer_id: customer.map(String::from),
        status: status.into(),
    }
}

async fn payment_row(app: &TestApp, source: &str, payment: &str) -> PaymentRow {
    let row = &app
        .query(
            "SELECT succeeded, failed, disputed, amount, amount_refunded, currency, customer_id, status
             FROM payments WHERE source = $1 AND payment_id = $2",
            &[&source, &payment],
        )
        .await[0];
    PaymentRow {
        succeeded: row.get(0),
        failed: row.get(1),
        disputed: row.get(2),
        amount: row.get(3),
        amount_refunded: row.get(4),
        currency: row.get(5),
        customer_id: row.get(6),
        status: row.get(7),
    }
}

fn said_with(fact: Fact) -> impl Strategy<Value = Said> {
    (
        prop_oneof![Just(1_000i64), Just(2_500), Just(4_000), 1i64..5_000],
        proptest::option::of(proptest::sample::select(CURRENCIES.to_vec())),
        proptest::option::of(proptest::sample::select(CUSTOMERS.to_vec())),
    )
        .prop_map(move |(amount, currency, customer)| Said {
            fact: fact.clone(),
            amount,
            currency,
            customer,
        })
}

/// A payment's source and events, and their deliveries in order: `(fact, copy)`,
/// where each fact comes at least once under its first id, and some again under
/// that id (which the receiver dedupes) or under new ids (which reach the
/// handlers: a refund resent so must count once). Stripe states cumulative
/// refund totals; the neutral source those and single refunds, each its own id.
fn scenario() -> impl Strategy<Value = (&'static str, Vec<Said>, Vec<(usize, usize)>)> {
    let totals = proptest::collection::vec(1i64..=5_000, 0..3);
    let refunds = proptest::collection::vec(1i64..=2_500, 0..4);
    let source = prop_oneof![Just("stripe"), Just(NEUTRAL)];
    let facts = (any::<bool>(), any::<bool>(), any::<bool>(), totals, refunds);
    (source, facts)
        .prop_flat_map(|(source, (succeeded, failed, disputed, totals, refunds))| {
            let refunds = if source == NEUTRAL { refunds } else { vec![] };
            let mut facts = Vec::new();
            if succeeded || !totals.is_empty() || !refunds.is_empty() {
                facts.push(Fact::Succeeded);
            }
            if failed {
                facts.push(Fact::Failed);
            }
            facts.extend(totals.into_iter().map(Fact::Refunded));
            facts.extend(
                refunds
                    .into_iter()
                    .enumerate()
                    .map(|(n, amount)| Fact::Refund(n, amount)),
            );
            if disputed || facts.is_empty() {
                facts.push(Fact::Disputed);
            }
            let said = facts.into_iter().map(said_with).collect::<Vec<_>>();
            (Just(source), said)
        })
        .prop_flat_map(|(source, said)| {
            let n = said.len();
            let order = proptest::collection::vec((0..n, 0..3usize), 0..n * 3 + 1)
                .prop_map(move |extra| {
                    let mut order: Vec<(usize, usize)> = (0..n).map(|i| (i, 0)).collect();
                    order.extend(extra);
                    order
                })
                .prop_shuffle();
            (Just(source), Just(said), order)
        })
}

#[test]
fn any_order_repetition_and_resend_of_events_gives_the_same_payment() {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    });
    let app = rt.block_on(spawn_app());
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&scenario(), |(source, said, order)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let canonical = format!("pi_canon_{case}");
        let shuffled = format!("pi_shuf_{case}");
        rt.block_on(async {
            for (n, fact) in said.iter().enumerate() {
                let answer = app
                    .deliver(source, &body(source, fact, n, 0, &canonical))
                    .await;
                prop_assert_eq!(answer.status, 200);
            }
            let mut seen = std::collections::HashSet::new();
            for &(n, copy) in &order {
                let answer = app
                    .deliver(source, &body(source, &said[n], n, copy, &shuffled))
                    .await;
                prop_assert_eq!(answer.status, 200);
                // A resend under a seen id is deduped; under a new id it is new.
                let replayed = answer.header("Idempotent-Replayed") == Some("true");
                prop_assert_eq!(replayed, !seen.insert((n, copy)), "{:?}", (n, copy));
            }
            // Each distinct event was stored and applied once, whatever its id.
            let applied = app
                .query(
                    "SELECT count(*), count(*) FILTER (WHERE status = 'processed' AND attempts = 1)
                     FROM webhook_events WHERE payment_id = $1",
                    &[&shuffled],
                )
                .await;
            let (stored, processed): (i64, i64) = (applied[0].get(0), applied[0].get(1));
            prop_assert_eq!((stored, processed), (seen.len() as i64, seen.len() as i64));
            let canonical_row = payment_row(&app, source, &canonical).await;
            let shuffled_row = payment_row(&app, source, &shuffled).await;
            prop_assert_eq!(&shuffled_row, &canonical_row);
            prop_assert_eq!(&shuffled_row, &expected(&said));
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn the_oracle_matches_the_contract_on_examples() {
    // Guards the test's own model of the payment rules.
    let said = |fact: Fact, currency: Option<&'static str>, customer: Option<&'static str>| Said {
        fact,
        amount: 1000,
        currency,
        customer,
    };
    let s = |facts: &[Fact]| {
        let all: Vec<Said> = facts
            .iter()
            .map(|f| said(f.clone(), Some("eur"), None))
            .collect();
        expected(&all).status
    };
    assert_eq!(s(&[Fact::Failed]), "failed");
    assert_eq!(s(&[Fact::Failed, Fact::Succeeded]), "succeeded");
    assert_eq!(
        s(&[Fact::Succeeded, Fact::Refunded(10)]),
        "partially_refunded"
    );
    assert_eq!(s(&[Fact::Refunded(1000)]), "refunded");
    assert_eq!(s(&[Fact::Refunded(1000), Fact::Disputed]), "disputed");
    let refunded = |facts: &[Fact]| {
        let all: Vec<Said> = facts.iter().map(|f| said(f.clone(), None, None)).collect();
        expected(&all).amount_refunded
    };
    // Refunds add up, each id once (its largest amount), and the greater of that
    // sum and the largest total stands.
    assert_eq!(refunded(&[Fact::Refund(0, 300), Fact::Refund(1, 200)]), 500);
    assert_eq!(refunded(&[Fact::Refund(0, 300), Fact::Refund(0, 900)]), 900);
    assert_eq!(refunded(&[Fact::Refund(0, 900), Fact::Refund(0, 300)]), 900);
    assert_eq!(refunded(&[Fact::Refunded(600), Fact::Refund(0, 300)]), 600);
    assert_eq!(
        refunded(&[
            Fact::Refunded(400),
            Fact::Refund(0, 300),
            Fact::Refund(1, 200)
        ]),
        500
    );
    // Disagreements: the greatest stated value stands, an unstated one erases nothing.
    let row = expected(&[
        said(Fact::Succeeded, Some("usd"), Some("cus_a")),
        said(Fact::Refunded(5), None, Some("cus_c")),
        Said {
            amount: 4000,
            ..said(Fact::Failed, Some("eur"), None)
        },
        said(Fact::Disputed, Some("gbp"), Some("cus_b")),
    ]);
    assert_eq!(
        (
            row.amount,
            row.currency.as_deref(),
            row.customer_id.as_deref()
        ),
        (4000, Some("usd"), Some("cus_c"))
    );
    assert_eq!(expected(&[]).status, "pending");
}

#[tokio::test]
async fn a_late_failure_never_undoes_a_success() {
    let app = spawn_app().await;
    for (n, fact) in [Fact::Succeeded, Fact::Failed].into_iter().enumerate() {
        let said = Said {
            fact,
            amount: 900,
            currency: Some("eur"),
            customer: Some("cus_a"),
        };
        app.deliver_ok("stripe", &body("stripe", &said, n, 0, "pi_late"))
            .await;
    }
    let row = payment_row(&app, "stripe", "pi_late").await;
    assert_eq!(
        (row.succeeded, row.failed, row.status.as_str()),
        (true, true, "succeeded")
    );
}

/// A neutral-shape event.
fn event(id: &str, event_type: &str, data: Value) -> Value {
    json!({"id": id, "type": event_type, "created": 1, "data": data})
}

#[tokio::test]
async fn the_neutral_shape_feeds_the_same_handlers() {
    let app = spawn_app().await;
    let deliveries = [
        (
            "standard",
            event(
                "msg_n1",
                "payment.succeeded",
                json!({"payment_id": "p_n", "amount": 700, "currency": "usd", "customer_id": "c_n"}),
            ),
        ),
        (
            "standard",
            event(
                "msg_n2",
                "payment_refunded",
                json!({"payment_id": "p_n", "amount_refunded": 700}),
            ),
        ),
    ];
    for (source, body) in deliveries {
        assert_eq!(app.deliver(source, &body).await.status, 200);
    }
    let row = &app
        .query("SELECT status, amount, customer_id FROM payments WHERE source = 'standard' AND payment_id = 'p_n'", &[])
        .await[0];
    assert_eq!(row.get::<_, String>(0), "refunded");
    assert_eq!(row.get::<_, i64>(1), 700);
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("c_n"));
}

/// Two instances on one database.
async fn two_instances() -> (TestApp, TestApp) {
    let first = spawn_app().await;
    let second = spawn(Spawn {
        db: first.db.clone(),
        ..Spawn::default()
    })
    .await;
    (first, second)
}

#[tokio::test]
async fn two_hundred_concurrent_deliveries_across_two_instances_apply_once() {
    let (first, second) = two_instances().await;
    let said = Said {
        fact: Fact::Succeeded,
        amount: 4200,
        currency: Some("eur"),
        customer: Some("cus_a"),
    };
    let event = body("stripe", &said, 0, 0, "pi_twice");
    let bytes = serde_json::to_vec(&event).expect("json");
    let headers = first.sign("stripe", &bytes, Default::default());
    let deliveries = (0..200).map(|i| {
        let app = if i % 2 == 0 { &first } else { &second };
        app.post("stripe", &headers, bytes.clone())
    });
    let answers = futures_util::future::join_all(deliveries).await;
    assert!(answers.iter().all(|a| a.status == 200));
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    let new = answers
        .iter()
        .filter(|a| a.header("Idempotent-Replayed").is_none())
        .count();
    assert_eq!(new, 1);
    let row = &first
        .query(
            "SELECT count(*) OVER (), deliveries, attempts, status FROM webhook_events",
            &[],
        )
        .await[0];
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, i32>(1), 200);
    assert_eq!(row.get::<_, i32>(2), 1, "the handler ran once");
    assert_eq!(row.get::<_, String>(3), "processed");
    assert_eq!(
        first
            .count("SELECT count(*) FROM webhook_event_attempts", &[])
            .await,
        1
    );
    assert_eq!(
        payment_row(&first, "stripe", "pi_twice").await.status,
        "succeeded"
    );
}

#[tokio::test]
async fn an_amount_that_is_not_a_non_negative_integer_makes_the_event_dead_not_a_5xx() {
    let app = spawn_app().await;
    let intent = |amount: Value| json!({"id": "pi_amount", "object": "payment_intent", "amount": amount, "currency": "usd"});
    let cases = [
        (
            stripe_event("evt_neg", "payment_intent.succeeded", intent(json!(-5))),
            "stripe",
            "data.object.amount is not a non-negative integer",
        ),
        (
            stripe_event("evt_frac", "payment_intent.succeeded", intent(json!(12.5))),
            "stripe",
            "data.object.amount is not a non-negative integer",
        ),
        (
            stripe_event(
                "evt_text",
                "payment_intent.succeeded",
                intent(json!("1200")),
            ),
            "stripe",
            "data.object.amount is not a non-negative integer",
        ),
        (
            stripe_event("evt_huge", "payment_intent.succeeded", intent(json!(1e20))),
            "stripe",
            "data.object.amount is not a non-negative integer",
        ),
        (
            stripe_event(
                "evt_refund_neg",
                "charge.refunded",
                json!({"id": "ch_amount", "payment_intent": "pi_amount", "amount": 100,
                       "amount_refunded": -1}),
            ),
            "stripe",
            "data.object.amount_refunded is not a non-negative integer",
        ),
        (
            json!({"id": "msg_neg", "type": "payment.succeeded", "created": 1,
                   "data": {"payment_id": "p_amount", "amount": -700}}),
            "standard",
            "data.amount is not a non-negative integer",
        ),
    ];
    for (event, source, reason) in &cases {
        let answer = app.deliver_ok(source, event).await;
        assert_eq!(answer.header("Idempotent-Replayed"), None);
        let row = &app
            .query(
                "SELECT status, attempts, last_error, next_attempt_at IS NULL
                 FROM webhook_events WHERE source = $1 AND event_id = $2",
                &[source, &event["id"].as_str().expect("id")],
            )
            .await[0];
        assert_eq!(
            (
                row.get::<_, String>(0),
                row.get::<_, i32>(1),
                row.get::<_, Option<String>>(2),
                row.get::<_, bool>(3)
            ),
            ("dead".to_string(), 1, Some(reason.to_string()), true),
            "{event}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM payments", &[]).await, 0);
    // Permanent: no retry is scheduled, and none runs.
    assert_eq!(app.run_due_retries().await, 0);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_event_attempts WHERE outcome = 'dead'",
            &[]
        )
        .await,
        cases.len() as i64
    );
}

/// `data` of a neutral `payment.refunded` stating one refund of `payment`.
fn refund(payment: &str, refund: &str, amount: i64) -> Value {
    json!({"payment_id": payment, "refund_id": refund, "refund_amount": amount})
}

/// The neutral source's row of `payment`: its status and refunded amount.
async fn refunded(app: &TestApp, payment: &str) -> (String, i64) {
    let row = payment_row(app, NEUTRAL, payment).await;
    (row.status, row.amount_refunded)
}

/// How many events about `payment` were applied.
async fn processed(app: &TestApp, payment: &str) -> i64 {
    app.count(
        "SELECT count(*) FROM webhook_events WHERE payment_id = $1 AND status = 'processed'",
        &[&payment],
    )
    .await
}

#[tokio::test]
async fn two_partial_refunds_add_up() {
    let app = spawn_app().await;
    let paid = json!({"payment_id": "p_two", "amount": 1000, "currency": "eur"});
    app.deliver_ok(NEUTRAL, &event("msg_paid", "payment.succeeded", paid))
        .await;
    for (id, refund_id, amount) in [("msg_r1", "re_1", 300), ("msg_r2", "re_2", 200)] {
        let body = event(id, "payment.refunded", refund("p_two", refund_id, amount));
        app.deliver_ok(NEUTRAL, &body).await;
    }
    assert_eq!(
        refunded(&app, "p_two").await,
        ("partially_refunded".into(), 500)
    );
    // The rest refunded: the payment is.
    let last = event("msg_r3", "payment.refunded", refund("p_two", "re_3", 500));
    app.deliver_ok(NEUTRAL, &last).await;
    assert_eq!(refunded(&app, "p_two").await, ("refunded".into(), 1000));
    let stored = app
        .count(
            "SELECT count(*) FROM payment_refunds WHERE source = 'standard' AND payment_id = 'p_two'",
            &[],
        )
        .await;
    assert_eq!(stored, 3);
}

#[tokio::test]
async fn a_refund_resent_counts_once_and_its_largest_amount_stands_whatever_the_order() {
    let app = spawn_app().await;
    let paid = json!({"payment_id": "p_once", "amount": 1000});
    app.deliver_ok(NEUTRAL, &event("msg_paid", "payment.succeeded", paid))
        .await;
    // The same refund under two event ids (both reach the handler), then once
    // more with a larger amount, and again with the first.
    for (id, amount) in [
        ("msg_a", 300),
        ("msg_b", 300),
        ("msg_c", 900),
        ("msg_d", 300),
    ] {
        let body = event(id, "payment.refunded", refund("p_once", "re_once", amount));
        let answer = app.deliver_ok(NEUTRAL, &body).await;
        assert_eq!(answer.header("Idempotent-Replayed"), None, "{id} is new");
    }
    assert_eq!(
        refunded(&app, "p_once").await,
        ("partially_refunded".into(), 900)
    );
    let stored = app
        .query(
            "SELECT payment_id, amount FROM payment_refunds WHERE refund_id = 're_once'",
            &[],
        )
        .await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get::<_, i64>(1), 900);
    assert_eq!(processed(&app, "p_once").await, 5, "every copy was applied");
}

#[tokio::test]
async fn refunds_before_the_payment_succeeded_give_the_same_row() {
    let app = spawn_app().await;
    let paid = |payment: &str| json!({"payment_id": payment, "amount": 1000, "currency": "eur"});
    for (payment, refunds_first) in [("p_after", false), ("p_before", true)] {
        let mut bodies = vec![
            event(
                &format!("{payment}_r1"),
                "payment.refunded",
                refund(payment, &format!("{payment}_re1"), 250),
            ),
            event(
                &format!("{payment}_r2"),
                "payment.refunded",
                refund(payment, &format!("{payment}_re2"), 150),
            ),
        ];
        let succeeded = event(&format!("{payment}_ok"), "payment.succeeded", paid(payment));
        if refunds_first {
            bodies.push(succeeded);
        } else {
            bodies.insert(0, succeeded);
        }
        for body in &bodies {
            app.deliver_ok(NEUTRAL, body).await;
        }
    }
    let before = payment_row(&app, NEUTRAL, "p_before").await;
    assert_eq!(before, payment_row(&app, NEUTRAL, "p_after").await);
    assert_eq!(
        (
            before.status.as_str(),
            before.amount,
            before.amount_refunded
        ),
        ("partially_refunded", 1000, 400)
    );
}

#[tokio::test]
async fn a_refunds_total_and_its_refunds_keep_the_greater() {
    let app = spawn_app().await;
    let bodies = [
        event(
            "msg_ok",
            "payment.succeeded",
            json!({"payment_id": "p_mix", "amount": 1000}),
        ),
        event(
            "msg_total",
            "payment.refunded",
            json!({"payment_id": "p_mix", "amount_refunded": 450}),
        ),
        event("msg_r1", "payment.refunded", refund("p_mix", "re_m1", 300)),
    ];
    for body in &bodies {
        app.deliver_ok(NEUTRAL, body).await;
    }
    assert_eq!(
        refunded(&app, "p_mix").await,
        ("partially_refunded".into(), 450)
    );
    let second = event("msg_r2", "payment.refunded", refund("p_mix", "re_m2", 300));
    app.deliver_ok(NEUTRAL, &second).await;
    assert_eq!(
        refunded(&app, "p_mix").await,
        ("partially_refunded".into(), 600)
    );
}

#[tokio::test]
async fn concurrent_refunds_of_one_payment_across_two_instances_all_count() {
    let (first, second) = two_instances().await;
    let paid = json!({"payment_id": "p_busy", "amount": 100_000});
    first
        .deliver_ok(NEUTRAL, &event("msg_paid", "payment.succeeded", paid))
        .await;
    // 40 refunds of 10 to 400, each sent twice under two event ids.
    let bodies: Vec<Value> = (0..80)
        .map(|i| {
            let n = i % 40;
            let data = refund("p_busy", &format!("re_busy_{n}"), 10 * (n + 1));
            event(&format!("msg_busy_{i}"), "payment.refunded", data)
        })
        .collect();
    let answers = futures_util::future::join_all(bodies.iter().enumerate().map(|(i, body)| {
        let app = if i % 2 == 0 { &first } else { &second };
        app.deliver(NEUTRAL, body)
    }))
    .await;
    assert!(answers.iter().all(|a| a.status == 200));
    assert_eq!(processed(&first, "p_busy").await, 81);
    let sum: i64 = (1..=40).map(|n| 10 * n).sum();
    assert_eq!(
        refunded(&first, "p_busy").await,
        ("partially_refunded".into(), sum)
    );
}

#[tokio::test]
async fn a_batch_of_refunds_merges_as_one_by_one() {
    use hookd::domain::{PaymentFacts, Refund};
    use hookd::store::payments::{PaymentUpdate, merge, merge_many};
    let app = spawn_app().await;
    let db = app.app.pool.get().await.expect("connection");
    let update = |payment: &str, refund: Option<(&str, i64)>, total: Option<i64>| PaymentUpdate {
        facts: PaymentFacts {
            payment_id: payment.into(),
            amount: Some(1000),
            amount_refunded: total,
            refund: refund.map(|(id, amount)| Refund {
                id: format!("{payment}_{id}"),
                amount,
            }),
            ..PaymentFacts::default()
        },
        succeeded: refund.is_none() && total.is_none(),
        ..PaymentUpdate::default()
    };
    // Copies of a refund (its largest amount standing), two payments, a total.
    let updates = |payment: &str, other: &str| {
        vec![
            update(payment, Some(("re_1", 300)), None),
            update(other, Some(("re_1", 70)), None),
            update(payment, Some(("re_1", 900)), None),
            update(payment, None, None),
            update(payment, Some(("re_2", 200)), None),
            update(other, None, Some(50)),
            update(payment, Some(("re_2", 200)), None),
        ]
    };
    let batch = updates("p_batch", "p_batch_other");
    let pairs: Vec<(&str, &PaymentUpdate)> = batch.iter().map(|u| ("shop", u)).collect();
    merge_many(&db, &pairs).await.expect("merge_many");
    for u in &updates("p_each", "p_each_other") {
        merge(&db, "shop", u).await.expect("merge");
    }
    let (batched, each) = (
        payment_row(&app, "shop", "p_batch").await,
        payment_row(&app, "shop", "p_each").await,
    );
    assert_eq!(
        (batched.amount_refunded, batched.status.as_str()),
        (1100, "refunded")
    );
    assert_eq!(batched, each);
    let (batched, each) = (
        payment_row(&app, "shop", "p_batch_other").await,
        payment_row(&app, "shop", "p_each_other").await,
    );
    assert_eq!(batched.amount_refunded, 70);
    assert_eq!(batched, each);
}

#[tokio::test]
async fn a_refund_event_without_a_total_or_a_refund_is_dead_with_the_reason() {
    let app = spawn_app().await;
    let cases = [
        (
            event(
                "msg_bare",
                "payment.refunded",
                json!({"payment_id": "p_bare"}),
            ),
            "a refund event must carry amount_refunded or a refund (refund_id and refund_amount)",
        ),
        (
            event(
                "msg_half",
                "payment.refunded",
                json!({"payment_id": "p_bare", "refund_id": "re_half"}),
            ),
            "data.refund_amount is missing (data.refund_id is given)",
        ),
    ];
    for (body, reason) in &cases {
        app.deliver_ok(NEUTRAL, body).await;
        let row = &app
            .query(
                "SELECT status, last_error FROM webhook_events WHERE event_id = $1",
                &[&body["id"].as_str().expect("id")],
            )
            .await[0];
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, Option<String>>(1)),
            ("dead".into(), Some(reason.to_string()))
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM payments", &[]).await, 0);
    assert_eq!(
        app.count("SELECT count(*) FROM payment_refunds", &[]).await,
        0
    );
}
