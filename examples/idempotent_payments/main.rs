//! The seeds' payment endpoint with hookd's Idempotency-Key rules in the
//! service itself: `POST /payments` charges a bank stub (which counts charges
//! and is passed the key's operation id) once per key, whatever the client
//! resends.
//!
//! ```sh
//! DATABASE_URL=postgres://hookd@localhost/hookd \
//!     cargo run --example idempotent_payments
//! curl -i -X POST http://127.0.0.1:8091/payments -H 'Authorization: Bearer shop-1' \
//!     -H 'Idempotency-Key: order-42' -d '{"amount": 4200, "currency": "EUR"}'
//! ```
//!
//! `LISTEN` (default `127.0.0.1:8091`) is where it listens; `BANK_URL` a bank
//! to charge instead of the stub it starts. The stub's `GET /charges` counts
//! the charges and lists the operation ids it was passed; `POST
//! /trouble?fail_next=1` makes it fail once, `?answer_after_ms=40000` makes its
//! answer arrive after the 30 s the handler may take.

mod bank;
mod payments;

use std::net::SocketAddr;
use std::process::ExitCode;

use actix_web::{App, HttpServer, web};
use hookd::idempotency::{Idempotent, Rules};

#[actix_web::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idempotent_payments: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL".to_string())?;
    let config: tokio_postgres::Config = url.parse().map_err(|e| format!("DATABASE_URL: {e}"))?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(16)
        .build()
        .map_err(|e| e.to_string())?;
    hookd::migrate_with(&pool, payments::MIGRATIONS)
        .await
        .map_err(|e| format!("migrations: {e}"))?;
    let listen: SocketAddr = std::env::var("LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8091".into())
        .parse()
        .map_err(|e| format!("LISTEN: {e}"))?;
    let bank_url = match std::env::var("BANK_URL") {
        Ok(url) => url,
        Err(_) => {
            let bank = bank::start("127.0.0.1:0".parse().map_err(|e| format!("{e}"))?)
                .map_err(|e| format!("bank stub: {e}"))?;
            log::info!("bank stub at {} (GET /charges counts them)", bank.url);
            bank.url
        }
    };
    let bank = web::Data::new(payments::BankClient::new(bank_url)?);
    // The gateway's defaults: the caller's Authorization scopes its keys, a
    // key is required, kept 24 h, the work may take 30 s.
    let idempotent = web::Data::new(Idempotent::new(pool, Rules::new("payments")));
    log::info!("POST http://{listen}/payments");
    HttpServer::new(move || {
        App::new()
            .app_data(idempotent.clone())
            .app_data(bank.clone())
            .configure(payments::routes)
    })
    .bind(listen)
    .map_err(|e| format!("listen on {listen}: {e}"))?
    .run()
    .await
    .map_err(|e| e.to_string())
}
