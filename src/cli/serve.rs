//! `hookd serve`: everything at once, until SIGTERM or SIGINT; SIGHUP reloads
//! the configuration (`reload`). A stop goes in two phases: for `shutdown_delay`
//! `/readyz` answers 503 while everything is still served (balancers stop
//! sending), then the listeners close and in-flight work gets `shutdown_grace`
//! to finish. A second signal skips the rest of the delay.

use std::path::Path;

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{CliError, Schema, on_database, reload};
use crate::app::Parts;
use crate::config::Settings;
use crate::duration;

pub async fn serve(
    config: &Path,
    settings: Settings,
    hookd: super::Extensions,
) -> Result<(), CliError> {
    settings.check_exposure()?;
    settings.check_database()?;
    super::warn_about_exposure(&settings);
    if settings.uses_development_credentials() {
        log::warn!(
            "serving with the shipped development secrets or tokens; hookd accepts them on \
             loopback addresses only"
        );
    }
    let mut signals = Signals {
        terminate: signal(SignalKind::terminate())
            .map_err(|e| CliError::Other(format!("cannot watch SIGTERM: {e}")))?,
        interrupt: signal(SignalKind::interrupt())
            .map_err(|e| CliError::Other(format!("cannot watch SIGINT: {e}")))?,
    };
    // Watched from the start: SIGHUP's default action would end the process.
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| CliError::Other(format!("cannot watch SIGHUP: {e}")))?;
    let extensions = hookd.clone();
    // serve makes the embedded cluster when there is none yet.
    let database = crate::app::Database::open(&settings).await?;
    on_database(database, settings, hookd, Schema::Migrate, |app| async move {
        let running = app.start(Parts::ALL)?;
        log::info!("hookd listening on http://{}", running.addr);
        let first = loop {
            tokio::select! {
                name = signals.next() => break name,
                _ = hangup.recv() => reload::reload(config, &app, &extensions).await,
            }
        };
        running.announce_stop();
        let settings = app.settings.now();
        let (delay, grace) = (settings.shutdown_delay, settings.shutdown_grace);
        if !delay.is_zero() {
            log::info!(
                "{first}: /readyz answers 503; serving on for {} (shutdown_delay) so balancers \
                 stop sending; SIGTERM or SIGINT again skips the wait",
                duration::format(delay)
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                again = signals.next() => {
                    log::info!("{again} again: skipping the rest of shutdown_delay");
                }
            }
        }
        log::info!(
            "{first}: no longer accepting; finishing in-flight work (at most {}, shutdown_grace)",
            duration::format(grace)
        );
        running.stop().await;
        log::info!("hookd stopped");
        Ok(())
    })
    .await
}

/// The signals that stop `serve`.
struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    /// The next stop signal's name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
