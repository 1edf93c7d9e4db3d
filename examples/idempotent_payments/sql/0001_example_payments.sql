-- The example's own table: one row per payment, written in the same
-- transaction as the stored answer of its Idempotency-Key.
CREATE TABLE example_payments (
    id          bigserial PRIMARY KEY,
    -- The key's operation id: passed to the bank, the same on every resend.
    operation   text NOT NULL UNIQUE,
    amount      bigint NOT NULL CHECK (amount > 0),
    currency    text NOT NULL,
    charge      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
