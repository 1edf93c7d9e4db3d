//! Exposure policy: what `serve` refuses to run with beyond loopback (public
//! development credentials, short tokens, the embedded cluster) and the warning
//! about secret files others may read.

use std::os::unix::fs::PermissionsExt;

use super::{ConfigError, MIN_TOKEN_LEN, Settings, is_development_credential};
use crate::signature::Secret;

impl Settings {
    /// `serve` refuses public development credentials unless `development = true`
    /// says this is a development machine, and even then on an address other
    /// machines can reach: source secrets when the webhook listener is not loopback,
    /// admin tokens (and short ones) when the admin listener is not. The shipped
    /// `hookd.toml` says `development = true`, so it works out of the box on loopback.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        let refuse = |key: &str, problem: String| ConfigError {
            origin: self.origin.clone(),
            key: key.to_string(),
            problem,
        };
        let is_dev = |secret: &Secret| is_development_credential(secret.expose());
        let dev_secret = self.sources.iter().enumerate().find_map(|(i, source)| {
            match source.secrets.iter().position(is_dev) {
                Some(j) => Some((format!("{}[{j}]", source.secrets_key), source)),
                // PayPal's shipped certificate and signing key.
                None => source
                    .scheme
                    .provider()
                    .development_credential()
                    .map(|key| (format!("sources[{i}].{key}"), source)),
            }
        });
        if !self.development {
            let dev_token = self.admin_tokens.iter().find(|t| is_dev(&t.token));
            let found = dev_secret
                .as_ref()
                .map(|(key, source)| (key.clone(), "secret", source.scheme.name()))
                .or_else(|| dev_token.map(|t| (t.key.clone(), "token", "hmac")));
            if let Some((key, what, scheme)) = found {
                return Err(refuse(
                    &key,
                    format!(
                        "is a shipped development {what}, which only a configuration saying \
                         development = true may use: set your own (hookd secret --scheme \
                         {scheme} prints a fresh one)"
                    ),
                ));
            }
        }
        if let Some((key, source)) = dev_secret.filter(|_| !self.listen.ip().is_loopback()) {
            return Err(refuse(
                &key,
                format!(
                    "is a shipped development secret, and listen = {} reaches beyond \
                     this machine: set the provider's secret (hookd secret --scheme {} \
                     prints a fresh one)",
                    self.listen,
                    source.scheme.name()
                ),
            ));
        }
        let admin = self.admin_address();
        if !admin.ip().is_loopback() {
            for token in &self.admin_tokens {
                let problem = if is_dev(&token.token) {
                    "is a shipped development token"
                } else if token.token.expose().len() < MIN_TOKEN_LEN {
                    "is shorter than 16 characters"
                } else {
                    continue;
                };
                return Err(refuse(
                    &token.key,
                    format!(
                        "{problem}, and the admin pages listen on {admin}, beyond this machine: \
                         set a long random token (hookd secret --scheme hmac prints one)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `serve` refuses to keep acknowledged events only in the embedded cluster
    /// (one machine's disk, often a throwaway one: a container's, a VM's) once
    /// other machines reach it, unless `embedded_database = true` says that was
    /// the operator's choice.
    pub fn check_database(&self) -> Result<(), ConfigError> {
        if self.database_url.is_some() || self.embedded_database {
            return Ok(());
        }
        let Some((key, addr)) = [
            ("listen", Some(self.listen)),
            ("admin_listen", self.admin_listen),
            ("gateway.listen", self.gateway.listen),
        ]
        .into_iter()
        .find_map(|(key, addr)| addr.filter(|a| !a.ip().is_loopback()).map(|a| (key, a))) else {
            return Ok(());
        };
        Err(ConfigError {
            origin: self.origin.clone(),
            key: "DATABASE_URL".into(),
            problem: format!(
                "is unset and {key} = {addr} reaches beyond this machine: acknowledged events \
                 would live only in the embedded cluster on this machine's disk; set \
                 DATABASE_URL to a PostgreSQL that outlives it, or embedded_database = true \
                 if the embedded cluster is your choice"
            ),
        })
    }

    /// One warning line for each file holding secrets that its group or others may
    /// read (`serve` and `check-config` say it; neither refuses, since a shared
    /// group may be deliberate).
    pub fn warn_readable_secret_files(&self) {
        for path in &self.secret_files {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                log::warn!(
                    "{}: holds secrets but its group or others may read it (mode {mode:03o}): \
                     chmod 600 it",
                    path.display()
                );
            }
        }
    }
}
