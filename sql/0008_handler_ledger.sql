-- An event may have several handlers: its kind's handler and the forwards that
-- match it. Each run is an attempt row naming its handler; a `processed` attempt,
-- written in the transaction of the handler's effects, is that handler's
-- completion, so a retry runs only the handlers not yet done. Forwards also
-- record the receiver's HTTP status and the first bytes of its answer.
ALTER TABLE webhook_event_attempts
    ADD COLUMN handler     text,     -- the kind, or forward:NAME (NULL: the kind's, before this column)
    ADD COLUMN http_status integer,
    ADD COLUMN response    text;
