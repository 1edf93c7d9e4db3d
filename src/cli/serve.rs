//! `hookd serve`: everything at once, until SIGTERM or SIGINT.

use tokio::signal::unix::{SignalKind, signal};

use super::CliError;
use crate::app::{App, Database, Parts};
use crate::config::Settings;
use crate::handlers::Registry;
use crate::store;

pub async fn serve(settings: Settings) -> Result<(), CliError> {
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| CliError::Other(format!("cannot watch SIGTERM: {e}")))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| CliError::Other(format!("cannot watch SIGINT: {e}")))?;
    let database = Database::open(&settings).await?;
    let result = async {
        store::migrate(&database.pool).await?;
        let app = App::new(settings, database.pool.clone(), Registry::builtin());
        let running = app.start(Parts::ALL)?;
        log::info!("hookd listening on http://{}", running.addr);
        tokio::select! {
            _ = terminate.recv() => log::info!("SIGTERM: finishing in-flight work"),
            _ = interrupt.recv() => log::info!("SIGINT: finishing in-flight work"),
        }
        running.stop().await;
        log::info!("hookd stopped");
        Ok::<(), CliError>(())
    }
    .await;
    database.close().await;
    result
}
