-- Retention purge: finished events whose payload is still there, oldest first.
-- Partial, so each batch starts at the first candidate instead of walking the
-- slim keys already purged.
CREATE INDEX webhook_events_purgeable_idx ON webhook_events (received_at)
    WHERE purged_at IS NULL AND status IN ('processed', 'ignored', 'dead');

-- Expired admin Idempotency-Key records go by age.
CREATE INDEX admin_idempotency_keys_created_idx ON admin_idempotency_keys (created_at);
