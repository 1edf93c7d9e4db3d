//! A team's own hookd: the shipped payment handlers plus Stripe subscriptions
//! (`subscriptions.rs`), with its own migrations (`sql/`). It is the whole `hookd`
//! command line:
//!
//! ```sh
//! cargo run --example custom_handler -- serve --config examples/custom_handler/hookd.toml
//! cargo run --example custom_handler -- replay examples/custom_handler/fixtures \
//!     --source stripe --config examples/custom_handler/hookd.toml
//! ```

mod subscriptions;

use std::process::ExitCode;

fn main() -> ExitCode {
    hookd::Hookd::new()
        .handler("subscription_updated", subscriptions::SubscriptionUpdated)
        .handler("invoice_paid", subscriptions::InvoicePaid)
        .migrations(subscriptions::MIGRATIONS)
        .main()
}
