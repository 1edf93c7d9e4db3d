//! SIGHUP: the configuration file and every secret file read again, checked as
//! `serve` checks them at start, and put in force whole — or refused with one
//! line, the running configuration kept. A key only a restart can apply keeps
//! its running value and is named, so rotating a secret never needs a restart.

use std::path::Path;

use super::Extensions;
use crate::app::Instance;
use crate::config::{ConfigError, Settings};

/// Reloads the configuration at `path` into the running `app`.
pub async fn reload(path: &Path, app: &Instance, hookd: &Extensions) {
    let running = app.settings.now();
    let path = path.to_path_buf();
    // The files are read off the async workers: a secret may sit on a slow mount.
    let read = tokio::task::spawn_blocking(move || checked(&path, &running)).await;
    let (settings, kept) = match read {
        Ok(Ok(reloaded)) => reloaded,
        Ok(Err(error)) => return refused(app, &error.to_string()),
        Err(error) => return refused(app, &format!("reading it failed: {error}")),
    };
    for key in kept {
        log::warn!("SIGHUP: {key} changed, which needs a restart; its running value is kept");
    }
    super::warn_about_exposure(&settings);
    super::warn_unhandled_kinds(&settings, hookd);
    warn_about_credential_copies();
    let summary = format!(
        "{} source(s), {} forward(s), {} admin token(s)",
        settings.sources.len(),
        settings.forwards.len(),
        settings.admin_tokens.len()
    );
    app.settings.replace(settings);
    log::info!("SIGHUP: configuration reloaded: {summary}");
    // Counted last: once the counter moves, the new configuration is in force.
    app.metrics.config_reload(true);
}

/// The configuration as `serve` would start with it, with the keys only a
/// restart applies kept as `running` has them (and named).
fn checked(path: &Path, running: &Settings) -> Result<(Settings, Vec<&'static str>), ConfigError> {
    let mut settings = Settings::load(path)?;
    let kept = settings.keep_restart_only(running);
    settings.check_exposure()?;
    Ok((settings, kept))
}

/// systemd's `LoadCredential=` files are copies made when the service started:
/// a `_FILE` read from there gives the old value however the original changed.
fn warn_about_credential_copies() {
    let Some(copies) = std::env::var_os("CREDENTIALS_DIRECTORY") else {
        return;
    };
    let copies = Path::new(&copies);
    let stale: Vec<String> = std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            let read_there = name.starts_with("HOOKD_")
                && name.ends_with("_FILE")
                && Path::new(&value).starts_with(copies);
            read_there.then_some(name)
        })
        .collect();
    if !stale.is_empty() {
        log::warn!(
            "SIGHUP: {} read systemd's credential copies made at start: a file changed since \
             reaches hookd at the next restart (point them at files hookd reads directly to \
             rotate without one)",
            stale.join(", ")
        );
    }
}

fn refused(app: &Instance, problem: &str) {
    log::error!("SIGHUP: reload refused, the running configuration is kept: {problem}");
    app.metrics.config_reload(false);
}
