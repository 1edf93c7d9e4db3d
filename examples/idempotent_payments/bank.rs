//! A bank stub: it charges once per operation id (`Idempotency-Key`, as real
//! acquirers and Stripe dedupe), counts the charges it made and the calls it
//! got, and can be told to fail or to answer late (after charging), so the
//! cases the payment endpoint must survive can be played.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde::Deserialize;
use serde_json::json;

/// What the bank was asked and did.
#[derive(Default)]
pub struct Ledger {
    /// Charges by operation id: (charge id, amount).
    charges: Mutex<HashMap<String, (String, i64)>>,
    calls: AtomicUsize,
    /// The next calls answered 503 without charging.
    fail_next: AtomicUsize,
    /// How long the bank waits after charging before it answers.
    delay: Mutex<Duration>,
}

impl Ledger {
    /// Charges made (one per operation id).
    pub fn charges(&self) -> usize {
        self.charges.lock().map_or(0, |c| c.len())
    }

    /// Calls received, repeated operations and failures included.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The operation ids charged.
    pub fn operations(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .charges
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    pub fn fail_next(&self, calls: usize) {
        self.fail_next.store(calls, Ordering::SeqCst);
    }

    pub fn answer_after(&self, delay: Duration) {
        if let Ok(mut d) = self.delay.lock() {
            *d = delay;
        }
    }
}

#[derive(Deserialize)]
struct ChargeRequest {
    amount: i64,
    currency: String,
}

async fn charge(
    ledger: web::Data<Ledger>,
    request: HttpRequest,
    body: web::Json<ChargeRequest>,
) -> HttpResponse {
    ledger.calls.fetch_add(1, Ordering::SeqCst);
    let Some(operation) = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
    else {
        return HttpResponse::BadRequest().json(json!({"error": "idempotency_key_missing"}));
    };
    let failing = ledger
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    if failing.is_ok() {
        return HttpResponse::ServiceUnavailable().json(json!({"error": "try_again"}));
    }
    let (id, amount) = {
        let Ok(mut charges) = ledger.charges.lock() else {
            return HttpResponse::InternalServerError().finish();
        };
        let next = charges.len() + 1;
        charges
            .entry(operation.to_string())
            .or_insert_with(|| (format!("ch_{next}"), body.amount))
            .clone()
    };
    // Charged: an answer that comes too late is lost, the charge is not.
    let delay = ledger.delay.lock().map(|d| *d).unwrap_or_default();
    tokio::time::sleep(delay).await;
    HttpResponse::Ok().json(json!({"id": id, "amount": amount, "currency": body.currency}))
}

async fn summary(ledger: web::Data<Ledger>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "charges": ledger.charges(), "calls": ledger.calls(), "operations": ledger.operations(),
    }))
}

#[derive(Deserialize)]
struct Trouble {
    /// The next calls to answer 503 without charging.
    fail_next: Option<usize>,
    /// How long to wait after charging before answering.
    answer_after_ms: Option<u64>,
}

/// `POST /trouble?fail_next=1` or `?answer_after_ms=40000`: plays a bank that
/// fails, or whose answer comes too late.
async fn trouble(ledger: web::Data<Ledger>, query: web::Query<Trouble>) -> HttpResponse {
    if let Some(calls) = query.fail_next {
        ledger.fail_next(calls);
    }
    if let Some(ms) = query.answer_after_ms {
        ledger.answer_after(Duration::from_millis(ms));
    }
    HttpResponse::NoContent().finish()
}

/// A running bank stub: its base URL and its ledger.
pub struct Bank {
    pub url: String,
    /// What the bank did, for a test to read.
    #[allow(dead_code)]
    pub ledger: Arc<Ledger>,
}

/// Starts the bank stub on `addr` (port 0: any free port).
pub fn start(addr: SocketAddr) -> std::io::Result<Bank> {
    let ledger = web::Data::new(Ledger::default());
    let data = ledger.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/charges", web::post().to(charge))
            .route("/charges", web::get().to(summary))
            .route("/trouble", web::post().to(trouble))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?;
    let bound = server.addrs()[0];
    tokio::spawn(server.run());
    Ok(Bank {
        url: format!("http://{bound}"),
        ledger: ledger.into_inner(),
    })
}
