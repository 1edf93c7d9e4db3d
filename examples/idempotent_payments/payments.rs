//! `POST /payments`, behind hookd's Idempotency-Key rules: the handler runs
//! once per key, charges the bank with the key's operation id, and records the
//! payment in the transaction that stores its answer.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use hookd::Migration;
use hookd::idempotency::{Idempotent, Operation};
use serde::Deserialize;
use serde_json::json;

/// The example's schema, applied after hookd's (which holds `api_idempotency_keys`).
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_example_payments.sql",
    sql: include_str!("sql/0001_example_payments.sql"),
}];

/// What a client asks for.
#[derive(Debug, Deserialize)]
pub struct Order {
    amount: i64,
    currency: String,
}

/// How the endpoint reaches its bank.
#[derive(Clone)]
pub struct BankClient {
    pub url: String,
    pub http: reqwest::Client,
}

impl BankClient {
    pub fn new(url: String) -> Result<Self, String> {
        Ok(BankClient {
            url,
            http: hookd::outbound::client(Duration::from_secs(60)).map_err(|e| e.to_string())?,
        })
    }

    /// Charges `order` under `operation`: the bank charges once per operation,
    /// however often it is asked. `Err` is the bank's refusal or silence.
    async fn charge(&self, operation: &str, order: &Order) -> Result<String, String> {
        let answer = self
            .http
            .post(format!("{}/charges", self.url))
            .header("Idempotency-Key", operation)
            .json(&json!({"amount": order.amount, "currency": order.currency}))
            .send()
            .await
            .map_err(|e| format!("bank unreachable: {e}"))?;
        if !answer.status().is_success() {
            return Err(format!("bank answered {}", answer.status()));
        }
        let charge: serde_json::Value = answer.json().await.map_err(|e| e.to_string())?;
        charge["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "the bank's answer has no id".to_string())
    }
}

/// The routes: `POST /payments`.
pub fn routes(config: &mut web::ServiceConfig) {
    config.route("/payments", web::post().to(create_payment));
}

async fn create_payment(
    idempotent: web::Data<Idempotent>,
    bank: web::Data<BankClient>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let order = serde_json::from_slice::<Order>(&body);
    let bank = bank.get_ref().clone();
    idempotent
        .run(&request, body, move |op| Box::pin(pay(op, order, bank)))
        .await
}

/// One run of a key: a bad order is answered (and that answer kept), a bank
/// that fails is a 503 (the key is released, a retry charges), a charge is
/// recorded beside the key's answer.
async fn pay(
    op: &Operation<'_>,
    order: Result<Order, serde_json::Error>,
    bank: BankClient,
) -> HttpResponse {
    let order = match order {
        Ok(order) if order.amount > 0 => order,
        Ok(_) => return invalid("amount must be positive"),
        Err(error) => return invalid(&error.to_string()),
    };
    let charge = match bank.charge(op.id(), &order).await {
        Ok(charge) => charge,
        Err(error) => {
            log::warn!("payment {}: {error}", op.id());
            return HttpResponse::ServiceUnavailable().json(json!({"error": "bank_unavailable"}));
        }
    };
    let written = op
        .transaction()
        .query_one(
            "INSERT INTO example_payments (operation, amount, currency, charge)
             VALUES ($1, $2, $3, $4) RETURNING id",
            &[&op.id(), &order.amount, &order.currency, &charge],
        )
        .await;
    match written {
        Ok(row) => {
            let id: i64 = row.get(0);
            HttpResponse::Created()
                .insert_header(("Location", format!("/payments/{id}")))
                .json(json!({
                    "id": id, "amount": order.amount, "currency": order.currency,
                    "charge": charge, "operation": op.id(),
                }))
        }
        Err(error) => {
            log::error!("payment {}: {error}", op.id());
            HttpResponse::ServiceUnavailable().json(json!({"error": "database_unavailable"}))
        }
    }
}

fn invalid(why: &str) -> HttpResponse {
    HttpResponse::UnprocessableEntity().json(json!({"error": "invalid_order", "detail": why}))
}
