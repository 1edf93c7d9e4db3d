-- The fingerprint without the fields a provider may change between deliveries of
-- one event (a source's fingerprint_ignore; for Stripe `pending_webhooks` and
-- `request`). A delivery is the same event when either fingerprint matches.
-- NULL for events stored before: hookd compares those from their stored body.
ALTER TABLE webhook_events ADD COLUMN stable_sha256 bytea;
