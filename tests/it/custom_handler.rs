//! `examples/custom_handler`: a team's own handlers (Stripe subscriptions) and
//! migrations through hookd, exactly once under duplicates and in any order.

#[path = "../../examples/custom_handler/subscriptions.rs"]
mod subscriptions;

use std::collections::BTreeMap;
use std::sync::Arc;

use hookd::handlers::Registry;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

use hookd::config::Settings;

use crate::support::{Spawn, TestApp, spawn};

const STATUSES: [&str; 5] = ["incomplete", "active", "past_due", "unpaid", "canceled"];

/// What one generated case sends: subscription updates (created, status, plan),
/// invoices (amount), and how each is delivered (copies, and how many distinct
/// event ids carry the same fact), in a shuffled order.
#[derive(Debug, Clone)]
struct Case {
    updates: Vec<(i64, usize, usize)>,
    invoices: Vec<i64>,
    /// (fact index, event-id variant) per delivery, in sending order.
    order: Vec<(usize, usize)>,
}

fn case() -> impl Strategy<Value = Case> {
    // Created times from a small range, so two updates often share a second.
    let updates = prop::collection::vec((0i64..4, 0..STATUSES.len(), 0usize..3), 1..5);
    let invoices = prop::collection::vec(1i64..5000, 0..3);
    (updates, invoices).prop_flat_map(|(updates, invoices)| {
        let facts = updates.len() + invoices.len();
        let deliveries = prop::collection::vec((0..facts, 0usize..2), facts..facts * 3);
        deliveries
            .prop_map(move |mut order| {
                // Every fact is delivered at least once.
                for fact in 0..facts {
                    order.push((fact, 0));
                }
                order
            })
            .prop_shuffle()
            .prop_map({
                let (updates, invoices) = (updates.clone(), invoices.clone());
                move |order| Case {
                    updates: updates.clone(),
                    invoices: invoices.clone(),
                    order,
                }
            })
    })
}

fn subscription_event(
    case: usize,
    fact: usize,
    variant: usize,
    update: (i64, usize, usize),
) -> Value {
    let (created, status, plan) = update;
    json!({
        "id": format!("evt_c{case}_u{fact}_v{variant}"),
        "object": "event",
        "type": "customer.subscription.updated",
        "created": 1_764_600_000 + created,
        "data": {"object": {
            "id": format!("sub_c{case}"), "object": "subscription", "customer": format!("cus_c{case}"),
            "status": STATUSES[status], "current_period_end": 1_767_278_400,
            "plan": {"id": format!("price_{plan}")}
        }}
    })
}

fn invoice_event(case: usize, fact: usize, variant: usize, n: usize, amount: i64) -> Value {
    json!({
        "id": format!("evt_c{case}_i{fact}_v{variant}"),
        "object": "event",
        "type": "invoice.paid",
        "created": 1_764_600_100,
        "data": {"object": {
            "id": format!("in_c{case}_{n}"), "object": "invoice",
            "subscription": format!("sub_c{case}"), "amount_paid": amount, "currency": "usd"
        }}
    })
}

/// The example's own `hookd.toml`, as `cargo run --example custom_handler -- serve
/// --config …` loads it (its type mapping included), on a free port.
async fn app() -> TestApp {
    const CONFIG: &str = include_str!("../../examples/custom_handler/hookd.toml");
    let mut settings = Settings::from_toml(
        "examples/custom_handler/hookd.toml",
        CONFIG,
        &Default::default(),
    )
    .unwrap_or_else(|e| panic!("the example's hookd.toml: {e}"));
    // What serve checks before it starts: its development secrets are allowed.
    settings
        .check_exposure()
        .unwrap_or_else(|e| panic!("the example's hookd.toml: {e}"));
    settings.listen = "127.0.0.1:0".parse().expect("loopback address");
    let mut registry = Registry::builtin();
    registry.register(
        "subscription_updated",
        Arc::new(subscriptions::SubscriptionUpdated),
    );
    registry.register("invoice_paid", Arc::new(subscriptions::InvoicePaid));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    let applied = hookd::store::migrate_with(&app.app.pool, subscriptions::MIGRATIONS)
        .await
        .expect("the example's migrations");
    assert_eq!(applied, 1, "only the example's own migration was pending");
    app
}

#[tokio::test]
async fn subscriptions_end_the_same_whatever_the_order_duplicates_and_resends() {
    let app = app().await;
    let mut runner = TestRunner::deterministic();
    let cases: Vec<Case> = (0..24)
        .map(|_| case().new_tree(&mut runner).expect("case").current())
        .collect();
    for (c, case) in cases.iter().enumerate() {
        for &(fact, variant) in &case.order {
            let event = if fact < case.updates.len() {
                subscription_event(c, fact, variant, case.updates[fact])
            } else {
                let n = fact - case.updates.len();
                invoice_event(c, fact, variant, n, case.invoices[n])
            };
            let answer = app.deliver("stripe", &event).await;
            assert_eq!(answer.status, 200, "{}", answer.text());
        }
    }
    let rows = app
        .query(
            "SELECT subscription_id, status, plan, event_id FROM subscriptions",
            &[],
        )
        .await;
    let got: BTreeMap<String, (String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
        .collect();
    let invoices = app
        .query(
            "SELECT subscription_id, count(*), sum(amount_paid)::bigint FROM subscription_invoices
             GROUP BY subscription_id",
            &[],
        )
        .await;
    let paid: BTreeMap<String, (i64, i64)> = invoices
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for (c, case) in cases.iter().enumerate() {
        // The oracle: the latest update wins (created, then event id), whatever
        // arrived when; each invoice counts once, whatever event carried it.
        let (fact, variant, update) = case
            .order
            .iter()
            .filter(|(fact, _)| *fact < case.updates.len())
            .map(|&(fact, variant)| (fact, variant, case.updates[fact]))
            .max_by_key(|(fact, variant, update)| {
                (update.0, format!("evt_c{c}_u{fact}_v{variant}"))
            })
            .expect("an update");
        let expected = (
            STATUSES[update.1].to_string(),
            format!("price_{}", update.2),
            format!("evt_c{c}_u{fact}_v{variant}"),
        );
        assert_eq!(
            got.get(&format!("sub_c{c}")),
            Some(&expected),
            "case {c}: {case:?}"
        );
        let invoiced = (
            case.invoices.len() as i64,
            case.invoices.iter().sum::<i64>(),
        );
        let stored = paid.get(&format!("sub_c{c}")).copied().unwrap_or((0, 0));
        assert_eq!(stored, invoiced, "case {c}: {case:?}");
    }
    // Every delivery is one stored event or a replay of one: nothing failed.
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE status <> 'processed'",
            &[]
        )
        .await,
        0
    );
}

#[tokio::test]
async fn an_older_update_arriving_late_never_overwrites_newer_state() {
    let app = app().await;
    let newer = subscription_event(90, 1, 0, (5, 1, 0));
    let older = subscription_event(90, 0, 0, (2, 4, 2));
    assert_eq!(app.deliver("stripe", &newer).await.status, 200);
    assert_eq!(app.deliver("stripe", &older).await.status, 200);
    let status = app
        .strings(
            "SELECT status FROM subscriptions WHERE subscription_id = 'sub_c90'",
            &[],
        )
        .await;
    assert_eq!(status, ["active"]);
    // A malformed subscription event is dead with the reason, not a 5xx.
    let broken = json!({"id": "evt_broken", "type": "customer.subscription.updated",
                        "created": 1, "data": {"object": {"id": 7}}});
    assert_eq!(app.deliver("stripe", &broken).await.status, 200);
    let row = app
        .query(
            "SELECT status, last_error FROM webhook_events WHERE event_id = 'evt_broken'",
            &[],
        )
        .await;
    assert_eq!(row[0].get::<_, String>(0), "dead");
    assert!(
        row[0].get::<_, String>(1).contains("/data/object"),
        "{:?}",
        row[0].get::<_, String>(1)
    );
}
