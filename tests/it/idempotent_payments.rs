//! `examples/idempotent_payments`: the seeds' `POST /payments` behind
//! `hookd::idempotency::Idempotent`, under the gateway's cases — through real
//! HTTP, a real PostgreSQL and the example's bank stub, which counts the
//! charges it makes and the operation ids it is passed.

#[path = "../../examples/idempotent_payments/bank.rs"]
mod bank;
#[path = "../../examples/idempotent_payments/payments.rs"]
mod payments;

use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use hookd::idempotency::{Idempotent, Rules};
use serde_json::Value;

use crate::support::{Answer, TestApp, spawn_app};

const ORDER: &str = r#"{"amount": 4200, "currency": "EUR"}"#;
const SHOP: &str = "Bearer shop-1";

/// The example's endpoint over the test's database, and its bank.
struct Shop {
    app: TestApp,
    bank: Arc<bank::Ledger>,
    /// Base URLs of the endpoint's instances (each its own server, one database).
    bases: Vec<String>,
}

impl Shop {
    async fn start(rules: Rules) -> Shop {
        Shop::start_many(rules, 1).await
    }

    async fn start_many(rules: Rules, instances: usize) -> Shop {
        let app = spawn_app().await;
        hookd::store::migrate_with(&app.app.pool, payments::MIGRATIONS)
            .await
            .expect("the example's migrations");
        let bank = bank::start("127.0.0.1:0".parse().expect("address")).expect("bank stub");
        let mut bases = Vec::new();
        for _ in 0..instances {
            let idempotent = web::Data::new(Idempotent::new(app.app.pool.clone(), rules.clone()));
            let client =
                web::Data::new(payments::BankClient::new(bank.url.clone()).expect("client"));
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(idempotent.clone())
                    .app_data(client.clone())
                    .configure(payments::routes)
            })
            .workers(2)
            .disable_signals()
            .bind("127.0.0.1:0")
            .expect("bind");
            bases.push(format!("http://{}", server.addrs()[0]));
            tokio::spawn(server.run());
        }
        Shop {
            app,
            bank: bank.ledger,
            bases,
        }
    }

    async fn pay(&self, key: Option<&str>, auth: Option<&str>, body: &str) -> Answer {
        self.pay_at(0, key, auth, body).await
    }

    async fn pay_at(&self, at: usize, key: Option<&str>, auth: Option<&str>, body: &str) -> Answer {
        let mut request = self
            .app
            .http
            .post(format!("{}/payments", self.bases[at]))
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(auth) = auth {
            request = request.header("Authorization", auth);
        }
        Answer::read(request.send().await.expect("request")).await
    }

    async fn state_of(&self, key: &str) -> String {
        self.app
            .strings(
                "SELECT state FROM api_idempotency_keys WHERE idempotency_key = $1",
                &[&key],
            )
            .await
            .pop()
            .unwrap_or_else(|| "none".into())
    }

    async fn payments(&self) -> Vec<String> {
        self.app
            .strings("SELECT operation FROM example_payments ORDER BY id", &[])
            .await
    }
}

fn error_of(answer: &Answer) -> String {
    answer.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn rules(timeout: Duration) -> Rules {
    Rules {
        timeout,
        ..Rules::new("payments")
    }
}

#[tokio::test]
async fn the_same_key_twice_charges_once_and_the_copy_gets_the_answer_byte_for_byte() {
    let shop = Shop::start(Rules::new("payments")).await;
    let first = shop.pay(Some("order-1"), Some(SHOP), ORDER).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let operation = first
        .header("idempotency-operation")
        .expect("operation")
        .to_string();
    assert!(operation.starts_with("op_"), "{operation}");
    assert_eq!(first.json()["operation"], operation.as_str());
    assert_eq!(first.header("idempotent-replayed"), None);

    let copy = shop.pay(Some("order-1"), Some(SHOP), ORDER).await;
    assert_eq!(copy.status, 201);
    assert_eq!(copy.body, first.body, "byte for byte");
    assert_eq!(copy.header("location"), first.header("location"));
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        copy.header("idempotency-operation"),
        Some(operation.as_str())
    );
    // The bank was passed the key's operation id, and charged once.
    assert_eq!((shop.bank.charges(), shop.bank.calls()), (1, 1));
    assert_eq!(shop.bank.operations(), std::slice::from_ref(&operation));
    assert_eq!(shop.payments().await, [operation]);
    assert_eq!(shop.state_of("order-1").await, "completed");
}

#[tokio::test]
async fn the_same_key_with_other_data_is_422_and_nothing_runs() {
    let shop = Shop::start(Rules::new("payments")).await;
    let first = shop.pay(Some("order-2"), Some(SHOP), ORDER).await;
    assert_eq!(first.status, 201);
    let other = shop
        .pay(
            Some("order-2"),
            Some(SHOP),
            r#"{"amount": 9900, "currency": "EUR"}"#,
        )
        .await;
    assert_eq!(other.status, 422);
    assert_eq!(error_of(&other), "idempotency_key_reused");
    // The refusal names the key's operation, as every answer with a key does.
    assert!(first.header("idempotency-operation").is_some());
    assert_eq!(
        other.header("idempotency-operation"),
        first.header("idempotency-operation")
    );
    // Key order and spaces are not another request.
    let same = shop
        .pay(
            Some("order-2"),
            Some(SHOP),
            r#"{ "currency":"EUR","amount":4200 }"#,
        )
        .await;
    assert_eq!(
        (same.status, same.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(shop.bank.calls(), 1);
}

#[tokio::test]
async fn a_missing_or_invalid_key_or_scope_is_400_and_the_bank_is_not_called() {
    let shop = Shop::start(Rules::new("payments")).await;
    let missing = shop.pay(None, Some(SHOP), ORDER).await;
    assert_eq!(
        (missing.status, error_of(&missing)),
        (400, "idempotency_key_missing".into())
    );
    let long = "k".repeat(256);
    for key in ["", long.as_str(), "caf\u{e9}"] {
        let invalid = shop.pay(Some(key), Some(SHOP), ORDER).await;
        assert_eq!(
            (invalid.status, error_of(&invalid)),
            (400, "idempotency_key_invalid".into()),
            "{key:?}"
        );
    }
    let unscoped = shop.pay(Some("order-3"), None, ORDER).await;
    assert_eq!(
        (unscoped.status, error_of(&unscoped)),
        (400, "scope_missing".into())
    );
    assert_eq!(shop.bank.calls(), 0);
}

#[tokio::test]
async fn a_failing_bank_releases_the_key_so_a_retry_charges_once() {
    let shop = Shop::start(Rules::new("payments")).await;
    shop.bank.fail_next(1);
    let failed = shop.pay(Some("order-4"), Some(SHOP), ORDER).await;
    assert_eq!(
        (failed.status, error_of(&failed)),
        (503, "bank_unavailable".into())
    );
    assert_eq!(shop.state_of("order-4").await, "released");
    let retried = shop.pay(Some("order-4"), Some(SHOP), ORDER).await;
    assert_eq!(retried.status, 201, "{}", retried.text());
    assert_eq!(retried.header("idempotent-replayed"), None);
    assert_eq!((shop.bank.charges(), shop.bank.calls()), (1, 2));
    assert_eq!(shop.payments().await.len(), 1);
    // Released keys run again under the same operation id.
    assert_eq!(
        retried.header("idempotency-operation"),
        failed.header("idempotency-operation")
    );
}

#[tokio::test]
async fn a_copy_while_the_first_runs_is_409_with_retry_after() {
    let shop = Arc::new(Shop::start(Rules::new("payments")).await);
    // Long enough for the copy below to be answered while the first waits,
    // however loaded the machine.
    shop.bank.answer_after(Duration::from_secs(5));
    let first = tokio::spawn({
        let shop = shop.clone();
        async move { shop.pay(Some("order-5"), Some(SHOP), ORDER).await }
    });
    // The first has claimed the key once the bank has its call.
    while shop.bank.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let copy = shop.pay(Some("order-5"), Some(SHOP), ORDER).await;
    assert_eq!(
        (copy.status, error_of(&copy)),
        (409, "request_in_progress".into())
    );
    assert!(copy.header("retry-after").is_some());
    let first = first.await.expect("first");
    assert_eq!(first.status, 201);
    assert_eq!(shop.bank.calls(), 1);
    // The refusal named the operation the first was running.
    assert!(first.header("idempotency-operation").is_some());
    assert_eq!(
        copy.header("idempotency-operation"),
        first.header("idempotency-operation")
    );
}

#[tokio::test]
async fn an_answer_lost_after_the_charge_is_unknown_and_the_copy_runs_again_with_the_same_operation()
 {
    let shop = Shop::start(rules(Duration::from_secs(1))).await;
    // The bank charges, then answers after the handler's time is up.
    shop.bank.answer_after(Duration::from_secs(3));
    let lost = shop.pay(Some("order-6"), Some(SHOP), ORDER).await;
    assert_eq!(
        (lost.status, error_of(&lost)),
        (502, "upstream_outcome_unknown".into())
    );
    assert_eq!(shop.state_of("order-6").await, "unknown");
    assert!(
        shop.payments().await.is_empty(),
        "its transaction never committed"
    );

    shop.bank.answer_after(Duration::ZERO);
    let resent = shop.pay(Some("order-6"), Some(SHOP), ORDER).await;
    assert_eq!(resent.status, 201, "{}", resent.text());
    let operation = resent.header("idempotency-operation").expect("operation");
    assert_eq!(lost.header("idempotency-operation"), Some(operation));
    // Two calls, one charge: the bank deduped on the operation id.
    assert_eq!((shop.bank.charges(), shop.bank.calls()), (1, 2));
    assert_eq!(shop.payments().await, [operation.to_string()]);
    assert_eq!(shop.state_of("order-6").await, "completed");
}

#[tokio::test]
async fn the_same_key_of_two_callers_is_two_payments() {
    let shop = Shop::start(Rules::new("payments")).await;
    let one = shop
        .pay(Some("order-7"), Some("Bearer shop-1"), ORDER)
        .await;
    let two = shop
        .pay(Some("order-7"), Some("Bearer shop-2"), ORDER)
        .await;
    assert_eq!((one.status, two.status), (201, 201));
    assert_ne!(
        one.header("idempotency-operation"),
        two.header("idempotency-operation")
    );
    assert_eq!(shop.bank.charges(), 2);
}

#[tokio::test]
async fn of_100_concurrent_copies_through_two_instances_the_bank_charges_once() {
    let shop = Arc::new(Shop::start_many(Rules::new("payments"), 2).await);
    shop.bank.answer_after(Duration::from_millis(200));
    let copies: Vec<_> = (0..100)
        .map(|n| {
            let shop = shop.clone();
            tokio::spawn(
                async move { shop.pay_at(n % 2, Some("order-8"), Some(SHOP), ORDER).await },
            )
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.expect("copy"));
    }
    let stored = shop
        .app
        .strings(
            "SELECT convert_from(response_body, 'UTF8') FROM api_idempotency_keys WHERE idempotency_key = 'order-8'",
            &[],
        )
        .await;
    let stored: Value = serde_json::from_str(&stored[0]).expect("stored answer");
    for answer in &answers {
        match answer.status {
            201 => assert_eq!(answer.json(), stored),
            409 => assert_eq!(error_of(answer), "request_in_progress"),
            other => panic!("{other}: {}", answer.text()),
        }
    }
    assert_eq!((shop.bank.charges(), shop.bank.calls()), (1, 1));
    assert_eq!(shop.payments().await.len(), 1);
}

#[tokio::test]
async fn a_finished_key_expires_through_the_purge_and_a_copy_after_is_a_new_payment() {
    let shop = Shop::start(Rules::new("payments")).await;
    let first = shop.pay(Some("order-9"), Some(SHOP), ORDER).await;
    assert_eq!(first.status, 201);
    shop.app
        .execute(
            "UPDATE api_idempotency_keys SET expires_at = now() - interval '1 second'
             WHERE idempotency_key = 'order-9'",
            &[],
        )
        .await;
    let outcome = shop.app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(outcome.api_idempotency_keys_deleted, 1);
    let after = shop.pay(Some("order-9"), Some(SHOP), ORDER).await;
    assert_eq!(after.status, 201);
    assert_eq!(after.header("idempotent-replayed"), None);
    // After retention a copy is a new payment: why the retention must outlast
    // the clients' retries.
    assert_eq!(shop.bank.charges(), 2);
}

#[tokio::test]
async fn a_run_that_outlived_its_lock_yields_to_the_one_that_took_over_and_names_its_operation() {
    let shop = Arc::new(Shop::start(Rules::new("payments")).await);
    // Long enough for the copy to take the key over while the first waits,
    // however loaded the machine.
    shop.bank.answer_after(Duration::from_secs(5));
    let first = tokio::spawn({
        let shop = shop.clone();
        async move { shop.pay(Some("order-t"), Some(SHOP), ORDER).await }
    });
    while shop.bank.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The first run's instance is taken for dead: its lock is over (brought
    // forward, not waited out), and a copy takes the key over.
    shop.app
        .execute(
            "UPDATE api_idempotency_keys SET locked_until = now() - interval '1 second'
             WHERE idempotency_key = 'order-t'",
            &[],
        )
        .await;
    let copy = shop.pay(Some("order-t"), Some(SHOP), ORDER).await;
    let first = first.await.expect("first");
    // The run that took over stands; the first, which lost its claim, is
    // refused, naming the operation both ran under.
    assert_eq!(copy.status, 201, "{}", copy.text());
    assert_eq!(
        (first.status, error_of(&first)),
        (409, "request_in_progress".into())
    );
    let operation = copy.header("idempotency-operation").expect("operation");
    assert_eq!(first.header("idempotency-operation"), Some(operation));
    assert_eq!(shop.payments().await, [operation.to_string()]);
    assert_eq!(shop.state_of("order-t").await, "completed");
}
