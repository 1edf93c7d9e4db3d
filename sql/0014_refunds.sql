-- Refunds as facts, for providers that state each refund rather than the running
-- total. A refund is keyed by its provider's id within the source, so a resent
-- refund is one row; the first amount stated for an id stands. A payment's
-- amount_refunded is never below the sum of its refunds here. Business data like
-- `payments`: the purge never deletes it.
CREATE TABLE payment_refunds (
    source      text        NOT NULL,
    refund_id   text        NOT NULL,
    payment_id  text        NOT NULL,
    amount      bigint      NOT NULL CHECK (amount >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, refund_id)
);
CREATE INDEX payment_refunds_payment_idx ON payment_refunds (source, payment_id);
