//! The records behind the API's `Idempotency-Key`: claimed, renewed, answered
//! or released.

use super::Desk;
use crate::store::StoreError;
use crate::store::idempotency;
pub use crate::store::idempotency::{Claim, RENEW_EVERY};

impl Desk {
    /// Claims an `Idempotency-Key` of `token`'s for the request `fingerprint` names.
    pub async fn claim_key(
        &self,
        token: &str,
        key: &str,
        fingerprint: &[u8],
    ) -> Result<Claim, StoreError> {
        idempotency::claim(&self.client().await?, token, key, fingerprint).await
    }

    /// Keeps a running request's claim from being taken for an abandoned one.
    pub async fn renew_key(&self, token: &str, key: &str, claim: &[u8]) -> Result<(), StoreError> {
        idempotency::renew(&self.client().await?, token, key, claim).await
    }

    /// Stores the answer a repeat of the request gets.
    pub async fn complete_key(
        &self,
        token: &str,
        key: &str,
        claim: &[u8],
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        idempotency::complete(&self.client().await?, token, key, claim, status, body).await
    }

    /// Frees the key for a repeat to run (the answer was one that passes).
    pub async fn release_key(
        &self,
        token: &str,
        key: &str,
        claim: &[u8],
    ) -> Result<(), StoreError> {
        idempotency::release(&self.client().await?, token, key, claim).await
    }
}
