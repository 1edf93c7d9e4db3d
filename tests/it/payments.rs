//! The payment handlers: exactly-once effects under concurrency, and the same final
//! state whatever the order and repetition of events (property-tested).

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use crate::support::{Spawn, TestApp, spawn, spawn_app, stripe_event};

/// One fact about a payment, as Stripe would send it.
#[derive(Debug, Clone)]
enum Fact {
    Succeeded,
    Failed,
    /// Cumulative refunded amount, as `charge.refunded` carries it.
    Refunded(i64),
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

/// The event stating fact `n` of `payment`; `copy` 0 is the provider's first
/// event id, others are the same fact resent under a new id.
fn body(said: &Said, n: usize, copy: usize, payment: &str) -> Value {
    let id = format!("evt_{payment}_{n}_{copy}");
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
    }
}

/// The payment rules (which facts give which row), computed independently of
/// hookd: every flag once stated stays, the largest amount and refund stand, and
/// of disagreeing currencies or customers the greatest stated one does.
fn expected(said: &[Said]) -> PaymentRow {
    let any = |f: fn(&Fact) -> bool| said.iter().any(|s| f(&s.fact));
    let succeeded = any(|f| matches!(f, Fact::Succeeded));
    let failed = any(|f| matches!(f, Fact::Failed));
    let disputed = any(|f| matches!(f, Fact::Disputed));
    let refunded = said
        .iter()
        .filter_map(|s| match s.fact {
            Fact::Refunded(r) => Some(r),
            _ => None,
        })
        .max()
        .unwrap_or(0);
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

async fn payment_row(app: &TestApp, payment: &str) -> PaymentRow {
    let row = &app
        .query(
            "SELECT succeeded, failed, disputed, amount, amount_refunded, currency, customer_id, status
             FROM payments WHERE source = 'stripe' AND payment_id = $1",
            &[&payment],
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

/// A payment's events, and their deliveries in order: `(fact, copy)`, where
/// each fact comes at least once under its first id, and some again under that
/// id (which the receiver dedupes) or under new ids (which reach the handlers).
fn scenario() -> impl Strategy<Value = (Vec<Said>, Vec<(usize, usize)>)> {
    let refunds = proptest::collection::vec(1i64..=5_000, 0..3);
    (any::<bool>(), any::<bool>(), any::<bool>(), refunds)
        .prop_flat_map(|(succeeded, failed, disputed, refunds)| {
            let mut facts = Vec::new();
            if succeeded || !refunds.is_empty() {
                facts.push(Fact::Succeeded);
            }
            if failed {
                facts.push(Fact::Failed);
            }
            facts.extend(refunds.into_iter().map(Fact::Refunded));
            if disputed || facts.is_empty() {
                facts.push(Fact::Disputed);
            }
            facts.into_iter().map(said_with).collect::<Vec<_>>()
        })
        .prop_flat_map(|said| {
            let n = said.len();
            let order = proptest::collection::vec((0..n, 0..3usize), 0..n * 3 + 1)
                .prop_map(move |extra| {
                    let mut order: Vec<(usize, usize)> = (0..n).map(|i| (i, 0)).collect();
                    order.extend(extra);
                    order
                })
                .prop_shuffle();
            (Just(said), order)
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
    let result = runner.run(&scenario(), |(said, order)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let canonical = format!("pi_canon_{case}");
        let shuffled = format!("pi_shuf_{case}");
        rt.block_on(async {
            for (n, fact) in said.iter().enumerate() {
                let answer = app.deliver("stripe", &body(fact, n, 0, &canonical)).await;
                prop_assert_eq!(answer.status, 200);
            }
            let mut seen = std::collections::HashSet::new();
            for &(n, copy) in &order {
                let answer = app
                    .deliver("stripe", &body(&said[n], n, copy, &shuffled))
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
            let canonical_row = payment_row(&app, &canonical).await;
            let shuffled_row = payment_row(&app, &shuffled).await;
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
        app.deliver_ok("stripe", &body(&said, n, 0, "pi_late"))
            .await;
    }
    let row = payment_row(&app, "pi_late").await;
    assert_eq!(
        (row.succeeded, row.failed, row.status.as_str()),
        (true, true, "succeeded")
    );
}

#[tokio::test]
async fn the_neutral_shape_feeds_the_same_handlers() {
    let app = spawn_app().await;
    let event =
        |id: &str, ty: &str, data: Value| json!({"id": id, "type": ty, "created": 1, "data": data});
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

#[tokio::test]
async fn two_hundred_concurrent_deliveries_across_two_instances_apply_once() {
    let first = spawn_app().await;
    let second = spawn(Spawn {
        db: first.db.clone(),
        ..Spawn::default()
    })
    .await;
    let said = Said {
        fact: Fact::Succeeded,
        amount: 4200,
        currency: Some("eur"),
        customer: Some("cus_a"),
    };
    let event = body(&said, 0, 0, "pi_twice");
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
    assert_eq!(payment_row(&first, "pi_twice").await.status, "succeeded");
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
