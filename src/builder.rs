//! hookd as a library: a team's own `main.rs` registers its handlers and its
//! migrations, and gets the whole `hookd` command line with them.
//!
//! ```no_run
//! use async_trait::async_trait;
//! use hookd::{Event, Handler, HandlerError};
//!
//! struct InvoicePaid;
//!
//! #[async_trait]
//! impl Handler for InvoicePaid {
//!     async fn apply(
//!         &self,
//!         tx: &deadpool_postgres::Transaction<'_>,
//!         event: &Event<'_>,
//!     ) -> Result<(), HandlerError> {
//!         let invoice = event.text("/data/object/id")?;
//!         tx.execute("INSERT INTO paid_invoices (id) VALUES ($1) ON CONFLICT DO NOTHING", &[&invoice])
//!             .await?;
//!         Ok(())
//!     }
//! }
//!
//! const MIGRATIONS: &[hookd::Migration] = &[hookd::Migration {
//!     version: 1,
//!     name: "0001_paid_invoices.sql",
//!     sql: "CREATE TABLE paid_invoices (id text PRIMARY KEY)",
//! }];
//!
//! fn main() -> std::process::ExitCode {
//!     hookd::Hookd::new()
//!         .handler("invoice_paid", InvoicePaid)
//!         .migrations(MIGRATIONS)
//!         .main()
//! }
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use crate::cli::{self, Cli};
use crate::handlers::{Handler, Registry};
use crate::store::Migration;

/// A hookd with a team's handlers and migrations.
#[derive(Debug, Clone)]
pub struct Hookd {
    pub(crate) registry: Registry,
    pub(crate) migrations: &'static [Migration],
}

impl Default for Hookd {
    fn default() -> Self {
        Self::new()
    }
}

impl Hookd {
    /// hookd as it ships: the payment handlers, hookd's migrations.
    pub fn new() -> Self {
        Hookd {
            registry: Registry::builtin(),
            migrations: &[],
        }
    }

    /// Makes `handler` apply the events of `kind` (a kind a source's `event_types`
    /// maps provider types to; a built-in kind is replaced).
    pub fn handler(mut self, kind: &str, handler: impl Handler + 'static) -> Self {
        self.registry.register(kind, Arc::new(handler));
        self
    }

    /// The application's own migrations, applied after hookd's (under the same
    /// lock, with the same checks), at `serve` start and by `migrate`.
    pub fn migrations(mut self, migrations: &'static [Migration]) -> Self {
        self.migrations = migrations;
        self
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Parses the command line and runs it: the whole `hookd` CLI, with these
    /// handlers. Logs go to stderr (`RUST_LOG`, default `info`; the database
    /// driver stays at `info` unless named), as text or, with
    /// `HOOKD_LOG_FORMAT=json`, one JSON object per line. Spans go to an
    /// OpenTelemetry collector when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    pub fn main(self) -> ExitCode {
        let mut logger =
            env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
        let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        crate::logging::hold_back_driver(&mut logger, &spec);
        match std::env::var("HOOKD_LOG_FORMAT").as_deref() {
            Err(_) | Ok("" | "text") => {}
            Ok("json") => {
                logger.format(crate::logging::json_line);
            }
            Ok(other) => {
                eprintln!("hookd: HOOKD_LOG_FORMAT: {other:?} is not one of text, json");
                return ExitCode::from(cli::EX_CONFIG);
            }
        }
        let _ = logger.try_init();
        match crate::traces::Settings::from_env()
            .and_then(|t| t.map_or(Ok(()), crate::traces::install))
        {
            Ok(()) => {}
            Err(why) => {
                eprintln!("hookd: {why}");
                return ExitCode::from(cli::EX_CONFIG);
            }
        }
        let code = self.run(Cli::parse());
        crate::traces::shutdown();
        code
    }

    /// Runs an already parsed command line.
    pub fn run(self, cli: Cli) -> ExitCode {
        let extensions = cli::Extensions {
            registry: self.registry,
            migrations: self.migrations,
        };
        cli::run(cli, extensions)
    }
}
