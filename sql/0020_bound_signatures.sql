-- Signatures whose signed text covers only a checksum of the body (PayPal's
-- CRC32: another body with the same checksum would carry the same signature),
-- each bound to the body it was first accepted with: a delivery bringing it
-- with another body is refused. Claimed by the primary key, in a statement of
-- its own before the event is stored, so two deliveries racing with one
-- signature cannot both pass. Kept for `retention`, as the payloads: a claim's
-- own statement drops its source's older ones.
CREATE TABLE bound_signatures (
    source           text        NOT NULL,
    signature_sha256 bytea       NOT NULL,   -- SHA-256 of the signature's bytes
    body_sha256      bytea       NOT NULL,   -- SHA-256 of the raw body accepted with it
    event_id         text        NOT NULL,   -- the event it came with
    accepted_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, signature_sha256)
);
CREATE INDEX bound_signatures_age_idx ON bound_signatures (source, accepted_at);
