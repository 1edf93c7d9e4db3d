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
        macro_rules! keep {
            ($($field:ident as $key:literal),* $(,)?) => {$(
                if self.$field != running.$field {
                    self.$field.clone_from(&running.$field);
                    changed.push($key);
                }
            )*};
        }
        keep!(
            listen as "listen",
            admin_listen as "admin_listen",
            database_url as "DATABASE_URL",
            pool_size as "pool_size",
            dispatchers as "dispatchers",
            http_workers as "http_workers",
            max_body_memory as "max_body_memory",
            trusted_proxies as "trusted_proxies",
            embedded_database as "embedded_database",
            shutdown_grace as "shutdown_grace",
        );
        if self.gateway.listen != running.gateway.listen {
            self.gateway.listen = running.gateway.listen;
            changed.push("gateway.listen");
        }
        changed
    }
}
