-- Sources whose scheme signs only the body (github; hmac with the id or type in a
-- header) cannot trust the event id: a stored body resent under another id is
-- the same delivery. `body_sha256` is the body's key (its stable fingerprint),
-- set only for such sources' events, and this index makes one statement decide
-- on it. The purge keeps it with the slim key until key_retention.
ALTER TABLE webhook_events ADD COLUMN body_sha256 bytea;
CREATE UNIQUE INDEX webhook_events_source_body_key
    ON webhook_events (source, body_sha256) WHERE body_sha256 IS NOT NULL;
