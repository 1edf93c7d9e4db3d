-- Each event's body exactly as received, and the headers its signature depends
-- on, so its signature can be checked again later; `payload` stays the searchable
-- jsonb (NUL characters, which jsonb cannot hold, appear there as U+FFFD). Both go
-- with the payload at the retention purge.
ALTER TABLE webhook_events
    ADD COLUMN body bytea,
    ADD COLUMN signature_headers jsonb;
