-- A request whose signature covers only the whole of it while it carries
-- several events (GoCardless's `events[]`) is kept once, here; each of its
-- events keeps its own item's bytes in `webhook_events.body` and points at the
-- request (`request_id`), which proves the item's origin. Events stored before
-- keep the whole request in their own `body` and point at none.
CREATE TABLE event_requests (
    id          bigserial   PRIMARY KEY,
    source      text        NOT NULL,
    body_sha256 bytea       NOT NULL,   -- SHA-256 of the body as received
    body        bytea,                  -- as received; NULL once purged
    received_at timestamptz NOT NULL DEFAULT now(),
    redacted_at timestamptz,            -- a customer in it was forgotten
    UNIQUE (source, body_sha256)
);
-- Compressed as the events' bodies are, where the server can.
DO $$
BEGIN
    ALTER TABLE event_requests ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR undefined_object THEN
    RAISE NOTICE 'lz4 is not available: request bodies stay pglz-compressed';
END
$$;
-- Every existing row has no request: NOT VALID skips checking them.
ALTER TABLE webhook_events
    ADD COLUMN request_id bigint,
    ADD CONSTRAINT webhook_events_request_fkey
        FOREIGN KEY (request_id) REFERENCES event_requests (id) NOT VALID;
CREATE INDEX webhook_events_request_idx ON webhook_events (request_id)
    WHERE request_id IS NOT NULL;
