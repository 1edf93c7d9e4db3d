//! The configuration in force while `serve` runs. A reload (SIGHUP) replaces it
//! whole; each request or run reads it once and keeps that copy to its end, so it
//! never sees half of one configuration and half of another, and no lock is held
//! while it works.

use std::sync::{Arc, PoisonError, RwLock};

use super::Settings;

/// The settings in force, shared by every part of an instance; cheap to clone.
#[derive(Debug, Clone)]
pub struct LiveSettings(Arc<RwLock<Arc<Settings>>>);

impl LiveSettings {
    pub fn new(settings: Settings) -> Self {
        LiveSettings(Arc::new(RwLock::new(Arc::new(settings))))
    }

    /// The settings in force now; a later reload leaves this copy as it is.
    pub fn now(&self) -> Arc<Settings> {
        // Settings are replaced whole, never written in place: a poisoned lock
        // still holds a complete configuration.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `settings` in force for every request and run that starts after.
    pub fn replace(&self, settings: Settings) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(settings);
    }
}

impl Settings {
    /// The keys only a restart can apply (the listeners bound, the pool opened,
    /// the loops started, the limits and proxies fixed at start): where this
    /// reloaded configuration changes one, it takes the `running` value back, so
    /// what is in force stays one consistent configuration. Returns the keys
    /// that changed.
    pub fn keep_restart_only(&mut self, running: &Settings) -> Vec<&'static str> {
        let mut changed = Vec::new();
        keep("listen", &mut self.listen, &running.listen, &mut changed);
        keep(
            "admin_listen",
            &mut self.admin_listen,
            &running.admin_listen,
            &mut changed,
        );
        keep(
            "DATABASE_URL",
            &mut self.database_url,
            &running.database_url,
            &mut changed,
        );
        keep(
            "pool_size",
            &mut self.pool_size,
            &running.pool_size,
            &mut changed,
        );
        keep(
            "dispatchers",
            &mut self.dispatchers,
            &running.dispatchers,
            &mut changed,
        );
        keep(
            "max_body_memory",
            &mut self.max_body_memory,
            &running.max_body_memory,
            &mut changed,
        );
        keep(
            "trusted_proxies",
            &mut self.trusted_proxies,
            &running.trusted_proxies,
            &mut changed,
        );
        changed
    }
}

fn keep<T: PartialEq + Clone>(
    key: &'static str,
    reloaded: &mut T,
    running: &T,
    changed: &mut Vec<&'static str>,
) {
    if reloaded != running {
        reloaded.clone_from(running);
        changed.push(key);
    }
}
