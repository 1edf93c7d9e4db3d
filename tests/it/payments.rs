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

fn body(fact: &Fact, n: usize, payment: &str, amount: i64) -> Value {
    let id = format!("evt_{payment}_{n}");
    let intent = |status: &str| {
        json!({"id": payment, "object": "payment_intent", "amount": amount, "currency": "eur",
               "customer": "cus_prop", "status": status})
    };
    match fact {
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
                   "amount": amount, "amount_refunded": refunded, "currency": "eur",
                   "customer": null, "refunded": *refunded == amount}),
        ),
        Fact::Disputed => stripe_event(
            &id,
            "charge.dispute.created",
            json!({"id": format!("dp_{payment}"), "object": "dispute", "payment_intent": payment,
                   "charge": format!("ch_{payment}"), "amount": amount.min(100), "currency": "eur"}),
        ),
    }
}

/// The payment rules (which facts give which status), computed independently of hookd.
fn expected(facts: &[Fact], intent_amount: i64) -> PaymentRow {
    let succeeded = facts.iter().any(|f| matches!(f, Fact::Succeeded));
    let failed = facts.iter().any(|f| matches!(f, Fact::Failed));
    let disputed = facts.iter().any(|f| matches!(f, Fact::Disputed));
    let refunded = facts
        .iter()
        .filter_map(|f| match f {
            Fact::Refunded(r) => Some(*r),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // Every event carries an amount (a dispute, the disputed part); the largest stays.
    let amount = facts
        .iter()
        .map(|f| match f {
            Fact::Disputed => intent_amount.min(100),
            _ => intent_amount,
        })
        .max()
        .unwrap_or(0);
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
    // Only the payment intent events name the customer; charges here say null.
    let customer_seen = facts
        .iter()
        .any(|f| matches!(f, Fact::Succeeded | Fact::Failed));
    PaymentRow {
        succeeded,
        failed,
        disputed,
        amount,
        amount_refunded: refunded,
        currency: Some("eur".into()),
        customer_id: customer_seen.then(|| "cus_prop".into()),
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

/// A payment's events: some facts, and a delivery order with repeats.
fn scenario() -> impl Strategy<Value = (i64, Vec<Fact>, Vec<usize>)> {
    (1_000i64..100_000).prop_flat_map(|amount| {
        let refunds = proptest::collection::vec(1..=amount, 0..3).prop_map(move |mut r| {
            r.sort_unstable();
            r.dedup();
            // Sometimes the last refund is the whole amount.
            r.into_iter().map(Fact::Refunded).collect::<Vec<_>>()
        });
        let full = any::<bool>();
        (
            Just(amount),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            refunds,
            full,
        )
            .prop_map(|(amount, succeeded, failed, disputed, mut refunds, full)| {
                let mut facts = Vec::new();
                if succeeded || !refunds.is_empty() || full {
                    facts.push(Fact::Succeeded);
                }
                if failed {
                    facts.push(Fact::Failed);
                }
                if full {
                    refunds.push(Fact::Refunded(amount));
                }
                facts.extend(refunds);
                if disputed || facts.is_empty() {
                    facts.push(Fact::Disputed);
                }
                (amount, facts)
            })
            .prop_flat_map(|(amount, facts)| {
                let n = facts.len();
                // Every event at least once, some up to three times, in any order.
                let order = proptest::collection::vec(0..n, n..n * 3 + 1)
                    .prop_map(move |extra| {
                        let mut order: Vec<usize> = (0..n).collect();
                        order.extend(extra);
                        order
                    })
                    .prop_shuffle();
                (Just(amount), Just(facts), order)
            })
    })
}

#[test]
fn any_order_and_repetition_of_events_gives_the_same_payment() {
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
    let result = runner.run(&scenario(), |(amount, facts, order)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let canonical = format!("pi_canon_{case}");
        let shuffled = format!("pi_shuf_{case}");
        rt.block_on(async {
            for (n, fact) in facts.iter().enumerate() {
                let answer = app
                    .deliver("stripe", &body(fact, n, &canonical, amount))
                    .await;
                assert_eq!(answer.status, 200);
            }
            for &n in &order {
                let answer = app
                    .deliver("stripe", &body(&facts[n], n, &shuffled, amount))
                    .await;
                assert_eq!(answer.status, 200);
            }
            let canonical_row = payment_row(&app, &canonical).await;
            let shuffled_row = payment_row(&app, &shuffled).await;
            prop_assert_eq!(&shuffled_row, &canonical_row);
            prop_assert_eq!(&shuffled_row, &expected(&facts, amount));
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
    let s = |facts: &[Fact]| expected(facts, 1000).status;
    assert_eq!(s(&[]), "pending");
    assert_eq!(s(&[Fact::Failed]), "failed");
    assert_eq!(s(&[Fact::Failed, Fact::Succeeded]), "succeeded");
    assert_eq!(
        s(&[Fact::Succeeded, Fact::Refunded(10)]),
        "partially_refunded"
    );
    assert_eq!(s(&[Fact::Refunded(1000)]), "refunded");
    assert_eq!(s(&[Fact::Refunded(1000), Fact::Disputed]), "disputed");
}

#[tokio::test]
async fn a_late_failure_never_undoes_a_success() {
    let app = spawn_app().await;
    for (n, fact) in [Fact::Succeeded, Fact::Failed].iter().enumerate() {
        app.deliver_ok("stripe", &body(fact, n, "pi_late", 900))
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
    let event = body(&Fact::Succeeded, 0, "pi_twice", 4200);
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
