-- Where each forward stands, shared by every instance's lane for it: its
-- circuit breaker (consecutive failed sends; open since when, and when the next
-- probe may go) and an operator's pause. A forward with no row is closed and
-- running.
CREATE TABLE forward_states (
    forward              text PRIMARY KEY,
    consecutive_failures integer NOT NULL DEFAULT 0,
    opened_at            timestamptz,
    probe_at             timestamptz,
    last_error           text,
    paused_at            timestamptz,
    paused_by            text,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
