-- Each forward an event goes to is a row of its own, planned when the event is
-- received (in the transaction that stores it), so the plan never depends on
-- the configuration of whichever instance retries it: an instance that does not
-- have a forward leaves its rows to one that has. Each forward is sent from a
-- lane of its own (claimed with SKIP LOCKED by forward, leased while it is sent
-- with no transaction open), so a slow or failing receiver delays only its own
-- events. `state`: pending (to send at next_attempt_at), delivered, dead.
CREATE TABLE event_forwards (
    webhook_event_id bigint NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    forward          text NOT NULL,
    state            text NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_until      timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (webhook_event_id, forward)
);

-- A lane's queue: its pending rows in the order their events came (a lane
-- takes the due ones; a backlog drains in order).
CREATE INDEX event_forwards_due ON event_forwards (forward, webhook_event_id)
    WHERE state = 'pending';

-- Events stored before this migration whose forwards were still to go: their
-- plan was never written down. A row named '*' stands for "the forwards the
-- configuration matches, less those already done", written out by the first
-- retry that claims the event.
INSERT INTO event_forwards (webhook_event_id, forward)
    SELECT id, '*' FROM webhook_events WHERE status = 'failed';
