-- A customer's payments, newest first, keyset-paginated (replaces the plain
-- customer index).
DROP INDEX payments_customer_idx;
CREATE INDEX payments_customer_created_idx
    ON payments (customer_id, created_at DESC, source DESC, payment_id DESC)
    WHERE customer_id IS NOT NULL;

-- When each secret position of a source last signed an event: the dashboard
-- reads it per position in a few index probes, at any history size.
CREATE INDEX webhook_events_signed_with_idx
    ON webhook_events (source, signed_with, received_at DESC);

-- Who viewed which payload, and who retried what. Purged with the event records
-- (after `retention`).
CREATE TABLE admin_audit (
    id               bigserial   PRIMARY KEY,
    at               timestamptz NOT NULL DEFAULT now(),
    who              text        NOT NULL,   -- the token's name, or cli:USER
    action           text        NOT NULL,   -- viewed_event, viewed_payment, retried, bulk_retried
    webhook_event_id bigint,                 -- the event concerned, if one
    source           text,
    payment_id       text,
    detail           jsonb
);
CREATE INDEX admin_audit_at_idx ON admin_audit (at DESC, id DESC);
