//! `hookd serve`: everything at once, until SIGTERM or SIGINT; SIGHUP reloads
//! the configuration (`reload`).

use std::path::Path;

use tokio::signal::unix::{SignalKind, signal};

use super::{CliError, reload, with_app};
use crate::app::Parts;
use crate::config::Settings;

pub async fn serve(
    config: &Path,
    settings: Settings,
    hookd: super::Extensions,
) -> Result<(), CliError> {
    settings.check_exposure()?;
    super::warn_about_exposure(&settings);
    if settings.uses_development_credentials() {
        log::warn!(
            "serving with the shipped development secrets or tokens; hookd accepts them on \
             loopback addresses only"
        );
    }
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| CliError::Other(format!("cannot watch SIGTERM: {e}")))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| CliError::Other(format!("cannot watch SIGINT: {e}")))?;
    // Watched from the start: SIGHUP's default action would end the process.
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| CliError::Other(format!("cannot watch SIGHUP: {e}")))?;
    let extensions = hookd.clone();
    with_app(settings, hookd, |app| async move {
        let running = app.start(Parts::ALL)?;
        log::info!("hookd listening on http://{}", running.addr);
        loop {
            tokio::select! {
                _ = terminate.recv() => {
                    log::info!("SIGTERM: finishing in-flight work");
                    break;
                }
                _ = interrupt.recv() => {
                    log::info!("SIGINT: finishing in-flight work");
                    break;
                }
                _ = hangup.recv() => reload::reload(config, &app, &extensions).await,
            }
        }
        running.stop().await;
        log::info!("hookd stopped");
        Ok(())
    })
    .await
}
