-- The example's business data: one row per Stripe subscription, written only by
-- an event newer than the one that wrote it last, and one row per paid invoice.
CREATE TABLE subscriptions (
    source          text        NOT NULL,
    subscription_id text        NOT NULL,
    customer_id     text,
    status          text        NOT NULL,
    plan            text,
    current_period_end timestamptz,
    -- The high-water mark: Stripe's `created` of the event that wrote the row
    -- (and its id, to order two events of the same second the same way always).
    event_created   timestamptz NOT NULL,
    event_id        text        NOT NULL,
    PRIMARY KEY (source, subscription_id)
);

CREATE TABLE subscription_invoices (
    source          text        NOT NULL,
    invoice_id      text        NOT NULL,
    subscription_id text        NOT NULL,
    amount_paid     bigint      NOT NULL,
    currency        text        NOT NULL,
    PRIMARY KEY (source, invoice_id)
);
CREATE INDEX subscription_invoices_subscription_idx
    ON subscription_invoices (source, subscription_id);
