-- Every delivery's event, stored once per (source, event_id).
CREATE TABLE webhook_events (
    id               bigserial PRIMARY KEY,
    source           text        NOT NULL,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    kind             text,
    status           text        NOT NULL
                     CHECK (status IN ('processed', 'ignored', 'failed', 'dead')),
    payload          jsonb,                       -- NULL once purged
    payload_sha256   bytea       NOT NULL,        -- SHA-256 of the canonical JSON
    signed_with      integer     NOT NULL,        -- 1-based position of the matching secret
    payment_id       text,
    customer_id      text,
    deliveries       integer     NOT NULL DEFAULT 1,
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    last_delivery_at timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    next_attempt_at  timestamptz,
    purged_at        timestamptz,
    CONSTRAINT webhook_events_source_event_id_key UNIQUE (source, event_id)
);

-- History, newest first, keyset-paginated on (received_at, id).
CREATE INDEX webhook_events_received_idx ON webhook_events (received_at DESC, id DESC);
CREATE INDEX webhook_events_payment_idx ON webhook_events (payment_id, received_at DESC)
    WHERE payment_id IS NOT NULL;
CREATE INDEX webhook_events_customer_idx ON webhook_events (customer_id, received_at DESC)
    WHERE customer_id IS NOT NULL;
CREATE INDEX webhook_events_event_id_idx ON webhook_events (event_id);
-- The retry queue: failed events by due time.
CREATE INDEX webhook_events_due_idx ON webhook_events (next_attempt_at)
    WHERE status = 'failed';

-- One row per handler run.
CREATE TABLE webhook_event_attempts (
    id               bigserial   PRIMARY KEY,
    webhook_event_id bigint      NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz NOT NULL,
    outcome          text        NOT NULL CHECK (outcome IN ('processed', 'failed', 'dead')),
    error            text
);
CREATE INDEX webhook_event_attempts_event_idx ON webhook_event_attempts (webhook_event_id, attempt);

-- Business state, merged from facts so that any order of events gives the same row:
-- booleans only become true, amounts only grow, non-null values are never erased.
CREATE TABLE payments (
    source          text        NOT NULL,
    payment_id      text        NOT NULL,
    succeeded       boolean     NOT NULL DEFAULT false,
    failed          boolean     NOT NULL DEFAULT false,
    disputed        boolean     NOT NULL DEFAULT false,
    amount          bigint      NOT NULL DEFAULT 0,
    amount_refunded bigint      NOT NULL DEFAULT 0,
    currency        text,
    customer_id     text,
    status          text        NOT NULL GENERATED ALWAYS AS (
        CASE
            WHEN disputed THEN 'disputed'
            WHEN amount > 0 AND amount_refunded >= amount THEN 'refunded'
            WHEN amount_refunded > 0 THEN 'partially_refunded'
            WHEN succeeded THEN 'succeeded'
            WHEN failed THEN 'failed'
            ELSE 'pending'
        END
    ) STORED,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, payment_id)
);
CREATE INDEX payments_customer_idx ON payments (customer_id) WHERE customer_id IS NOT NULL;

-- Admin API Idempotency-Key records, scoped to the token's name.
CREATE TABLE admin_idempotency_keys (
    token_name       text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_sha256   bytea       NOT NULL,
    response_status  smallint,                    -- NULL while the first request runs
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token_name, idempotency_key)
);
