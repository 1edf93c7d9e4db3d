-- Items of a several-event request (Adyen's batches) that reused a stored
-- event's id with another payload. Such a request is acknowledged (refusing it
-- would hold back its other items for the provider's whole retry window), so
-- each refused item is kept here for support staff, with both fingerprints.
-- Purged with the event it conflicts with.
CREATE TABLE event_conflicts (
    id               bigserial   PRIMARY KEY,
    webhook_event_id bigint      NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    received_at      timestamptz NOT NULL DEFAULT now(),
    stored_sha256    bytea       NOT NULL,   -- the stored event's payload_sha256
    offered_sha256   bytea       NOT NULL,   -- the refused item's
    offered_payload  jsonb       NOT NULL
);
CREATE INDEX event_conflicts_event_idx ON event_conflicts (webhook_event_id, received_at);
