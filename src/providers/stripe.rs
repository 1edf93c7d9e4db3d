//! Stripe: the id and type are in the signed body, payment facts in `data.object`,
//! secrets are `whsec_` and 32 letters and digits. The MAC is
//! `crate::signature`'s (`Stripe-Signature`).

use std::collections::HashMap;

use rand::RngExt;
use serde_json::Value;

use super::shape::PaymentShape;
use super::{Body, Missing, Provider, body_member};
use crate::domain::PaymentKind;
use crate::signature::{Headers, Secret};

pub struct Stripe;

/// Stripe's types for the built-in kinds: every Stripe source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 4] = [
    ("payment_intent.succeeded", PaymentKind::Succeeded),
    ("payment_intent.payment_failed", PaymentKind::Failed),
    ("charge.refunded", PaymentKind::Refunded),
    ("charge.dispute.created", PaymentKind::DisputeOpened),
];

/// Parts of a Stripe event that may differ between two deliveries of it.
const VOLATILE_FIELDS: [&str; 2] = ["/pending_webhooks", "/request"];

impl Provider for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    /// `whsec_` and 32 letters and digits (the whole string is the key).
    fn new_secret(&self) -> Secret {
        let tail: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        Secret::new(format!("whsec_{tail}"))
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        let id = body_member(payload, "id").ok_or_else(|| Missing::Id("body.id".into()))?;
        let ty = body_member(payload, "type").ok_or_else(|| Missing::Type("body.type".into()))?;
        Ok((id, ty))
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        EVENT_TYPES
            .iter()
            .map(|(provider, kind)| (provider.to_string(), kind.as_str().to_string()))
            .collect()
    }

    fn default_fingerprint_ignore(&self) -> Vec<String> {
        VOLATILE_FIELDS.map(String::from).to_vec()
    }

    fn payment_shape(&self) -> PaymentShape {
        PaymentShape::Stripe
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, String> {
        body.text("id")
            .ok_or_else(|| "a Stripe body needs an \"id\"".into())
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("evt_{}", hex::encode(&random[..12])),
            Some("/id".into()),
        )
    }
}
