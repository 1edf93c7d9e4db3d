//! What `hookd sign`, `hookd replay`, the tests and the load generator need of
//! a provider, apart from what serving needs: signing as it signs, and the ids
//! and secrets it makes.

use serde_json::Value;

use super::Body;
use super::errors::{Signing, SigningError};
use crate::signature::{Envelope, Secret, Signed};

/// What `hookd sign`, `hookd replay` and the tests need of a provider:
/// signing as it signs, and the ids and secrets it makes. Serving never calls
/// these.
pub trait Simulator {
    /// What the provider would send with `body`, signed with `key`.
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed>;

    /// A fresh random secret in the format the provider's dashboards use: 64 hex
    /// digits for providers that prescribe none.
    fn new_secret(&self) -> Secret {
        Secret::new(hex::encode(rand::random::<[u8; 32]>()))
    }

    /// Whether events are named by their file name when signing a file
    /// (`push.json` → `push`): the provider sends the type beside the body.
    fn names_events_by_file(&self) -> bool {
        false
    }

    /// The id the provider would send with `body` when the caller names none
    /// (`hookd sign`, `hookd replay`, the tests).
    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError>;

    /// The type the provider would send with `body` when the caller names none.
    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("type", "the body")
    }

    /// A fresh event id for `--new-ids` from random bytes, and the JSON pointer of
    /// the body member that carries it (none when it travels in a header).
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>);

    /// Gives a body a fresh event id for `--new-ids` (every event of it, for a
    /// provider that sends several): the new id, and whether the body carries it.
    fn renew_ids(&self, body: &mut Value, random: &[u8; 16]) -> (String, bool) {
        let (id, field) = self.new_id(random);
        let placed = field
            .and_then(|p| body.pointer_mut(&p))
            .map(|slot| *slot = Value::String(id.clone()))
            .is_some();
        (id, placed)
    }
}
