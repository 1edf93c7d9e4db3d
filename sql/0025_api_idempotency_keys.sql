-- Idempotency-Keys of the API gateway and of `hookd::idempotency` (a team's own
-- service): one row per (route, scope, key), claimed first in a statement of its
-- own, then settled. `scope` is SHA-256 of the caller's scope header (the value
-- is never stored), or empty for routes whose keys all callers share.
-- `state`: in_progress (claimed, `locked_until` bounds the claim), completed
-- (the answer is stored), released (nothing was done; the next copy runs
-- again), unknown (sent without an answer: never taken for new).
-- `operation_id` is made at the first claim and kept for every resend.
CREATE TABLE api_idempotency_keys (
    id               bigserial PRIMARY KEY,
    route            text        NOT NULL,
    scope            bytea       NOT NULL,
    idempotency_key  text        NOT NULL,
    fingerprint      bytea       NOT NULL,
    state            text        NOT NULL
        CHECK (state IN ('in_progress', 'completed', 'released', 'unknown')),
    operation_id     text        NOT NULL,
    -- This claim's own id: only it settles the key.
    claim_id         bytea       NOT NULL,
    -- Times the key was claimed to run (resends after released or unknown).
    runs             integer     NOT NULL DEFAULT 1,
    request_method   text        NOT NULL,
    request_target   text        NOT NULL,
    locked_until     timestamptz,
    -- How long the key is kept once finished (the route's retention).
    retention        interval    NOT NULL,
    response_status  smallint,
    -- [[name, value], …]: Content-Type, Location and the route's replay_headers.
    response_headers jsonb,
    response_body    bytea,
    -- The answer was over 1 MiB: its status and headers are kept, not its body.
    body_omitted     boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    expires_at       timestamptz,
    UNIQUE (route, scope, idempotency_key)
);

-- The desk's list, newest first, and its search by key or operation.
CREATE INDEX api_idempotency_keys_created ON api_idempotency_keys (created_at, id);
CREATE INDEX api_idempotency_keys_key ON api_idempotency_keys (idempotency_key);
CREATE INDEX api_idempotency_keys_operation ON api_idempotency_keys (operation_id);
-- What the purge removes: finished keys past their retention.
CREATE INDEX api_idempotency_keys_expiring ON api_idempotency_keys (expires_at)
    WHERE state IN ('completed', 'released');
-- What needs a person: unknown keys and claims still running.
CREATE INDEX api_idempotency_keys_open ON api_idempotency_keys (claimed_at)
    WHERE state IN ('unknown', 'in_progress');
