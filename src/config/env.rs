//! The environment overlay: `DATABASE_URL` and the `HOOKD_*` variables (and
//! their `_FILE` forms) that replace or add to what the file says.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IntoDeserializer;

use super::load::{CREDENTIAL_KEYS, RawSettings, RawToken};
use super::{Role, reconcile};
use crate::config_keys::{Names, Problem};

pub(super) fn apply_env(
    raw: &mut RawSettings,
    env: &HashMap<String, String>,
) -> Result<(), Problem> {
    let set = |var: &str| env.get(var).filter(|v| !v.is_empty());
    if let Some(url) = set("DATABASE_URL") {
        raw.database_url = Some(url.clone());
    }
    if let Some(listen) = set("HOOKD_LISTEN") {
        raw.listen = Some(listen.clone());
    }
    if let Some(listen) = set("HOOKD_ADMIN_LISTEN") {
        raw.admin_listen = Some(listen.clone());
    }
    raw.gateway.apply_env(env);
    let mut files = Vec::new();
    if let Some(path) = set(TOKENS_FILE) {
        raw.admin.tokens = tokens_file(Path::new(path))?;
        files.push(PathBuf::from(path));
    }
    // Records each file a secret came from, for the permission check.
    let mut read = |var: &str| -> Result<Option<(String, String)>, Problem> {
        let found = secret_from_env(env, var)?;
        if let Some((from, _)) = &found
            && from != var
        {
            files.push(PathBuf::from(&env[from]));
        }
        Ok(found)
    };
    if let Some((var, token)) = read("HOOKD_METRICS_TOKEN")? {
        raw.metrics_token = Some(token);
        raw.metrics_token_env = Some(var);
    }
    if let Some((var, token)) = read("HOOKD_ADMIN_TOKEN")? {
        raw.admin.tokens.push(RawToken {
            name: "env".into(),
            token,
            role: Role::Operator,
            from_env: Some(var),
        });
    }
    for (var, upper) in named_vars(env, "HOOKD_SOURCE_", "_SECRETS") {
        let Some(source) = raw.sources.iter_mut().find(|s| env_name(&s.name) == upper) else {
            // Not fatal (one environment may serve several configurations), but
            // never silent: it may be a typo.
            log::warn!("{var}: no configured source is named {upper}; ignored");
            continue;
        };
        let Some((from, value)) = read(&format!("HOOKD_SOURCE_{upper}_SECRETS"))? else {
            continue;
        };
        source.secrets_env = Some(from);
        source.secrets = crate::config_keys::listed(&value);
    }
    for key in CREDENTIAL_KEYS.into_iter().chain(reconcile::KEYS) {
        let suffix = format!("_{}", key.to_ascii_uppercase());
        for (var, upper) in named_vars(env, "HOOKD_SOURCE_", &suffix) {
            let Some(source) = raw.sources.iter_mut().find(|s| env_name(&s.name) == upper) else {
                log::warn!("{var}: no configured source is named {upper}; ignored");
                continue;
            };
            let Some((from, value)) = read(&format!("HOOKD_SOURCE_{upper}{suffix}"))? else {
                continue;
            };
            source.keys_from_env.push((key, from));
            source
                .scheme_keys
                .insert(key.into(), toml::Value::String(value.trim().to_string()));
        }
    }
    for (var, upper) in named_vars(env, "HOOKD_FORWARD_", "_SECRET") {
        let Some(forward) = raw.forwards.iter_mut().find(|f| env_name(&f.name) == upper) else {
            log::warn!("{var}: no configured forward is named {upper}; ignored");
            continue;
        };
        let Some((from, value)) = read(&format!("HOOKD_FORWARD_{upper}_SECRET"))? else {
            continue;
        };
        forward.secret_env = Some(from);
        forward.secret = Some(value.trim().to_string());
    }
    raw.secret_files = files;
    Ok(())
}

/// The NAMEs of the set `PREFIX<NAME>SUFFIX` and `PREFIX<NAME>SUFFIX_FILE`
/// variables, each once (under the plain variable when both are set) and in name
/// order, so the first problem reported is always the same one.
fn named_vars(env: &HashMap<String, String>, prefix: &str, suffix: &str) -> Vec<(String, String)> {
    let file_suffix = format!("{suffix}_FILE");
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for (var, value) in env {
        let Some(upper) = var.strip_prefix(prefix).and_then(|rest| {
            rest.strip_suffix(suffix)
                .or_else(|| rest.strip_suffix(file_suffix.as_str()))
        }) else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        let plain = var.ends_with(suffix);
        let entry = found
            .entry(upper.to_string())
            .or_insert_with(|| var.clone());
        if plain {
            entry.clone_from(var);
        }
    }
    let mut names: Vec<(String, String)> = found.into_iter().map(|(u, v)| (v, u)).collect();
    names.sort();
    names
}

/// `HOOKD_ADMIN_TOKENS_FILE`: names a file of `name role token` lines, which
/// replace the configuration file's `[[admin.tokens]]`.
const TOKENS_FILE: &str = "HOOKD_ADMIN_TOKENS_FILE";

/// The tokens of a tokens file: one `name role token` a line; blank lines and
/// lines starting with `#` are skipped. A problem names the file and line, never
/// the token.
fn tokens_file(path: &Path) -> Result<Vec<RawToken>, Problem> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        (
            TOKENS_FILE.to_string(),
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, role, token] = fields[..] else {
            return Err((
                at,
                format!(
                    "expected three fields, name role token ({} found)",
                    fields.len()
                ),
            ));
        };
        let role =
            Role::deserialize(role.into_deserializer()).map_err(|_: serde::de::value::Error| {
                (
                    at.clone(),
                    // Never the field itself: a line in the wrong order holds the token here.
                    format!("the second field (the role) is not one of {}", Role::NAMES),
                )
            })?;
        tokens.push(RawToken {
            name: name.to_string(),
            token: token.to_string(),
            role,
            from_env: Some(at),
        });
    }
    Ok(tokens)
}

/// A secret from the environment: `VAR` itself, or the contents of the file that
/// `VAR_FILE` names (a container secret, a systemd credential) without its
/// trailing newline. Returns the variable it came from; refuses both at once.
fn secret_from_env(
    env: &HashMap<String, String>,
    var: &str,
) -> Result<Option<(String, String)>, Problem> {
    let file_var = format!("{var}_FILE");
    let plain = env.get(var).filter(|v| !v.is_empty());
    let file = env.get(&file_var).filter(|v| !v.is_empty());
    match (plain, file) {
        (None, None) => Ok(None),
        (Some(value), None) => Ok(Some((var.to_string(), value.clone()))),
        (Some(_), Some(_)) => Err((
            file_var,
            format!("set either {var} or {var}_FILE, not both"),
        )),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| (file_var.clone(), format!("cannot read {path}: {e}")))?;
            let value = text.strip_suffix('\n').unwrap_or(&text);
            let value = value.strip_suffix('\r').unwrap_or(value);
            Ok(Some((file_var, value.to_string())))
        }
    }
}

/// The NAME in `HOOKD_SOURCE_<NAME>_SECRETS`: upper-cased, and any character that
/// cannot appear in an environment variable name becomes `_`.
pub fn env_name(source: &str) -> String {
    source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}
