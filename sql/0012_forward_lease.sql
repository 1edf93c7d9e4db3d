-- Forwards are sent with no transaction open. The run that sends them first
-- commits a lease on the event: `lease_until` says until when it is that run's,
-- and `next_attempt_at` is pushed to the same time, so no dispatcher claims the
-- event meanwhile. The answer is recorded in a new transaction that ends the
-- lease; if the sender dies, the lease runs out and the event is claimed again.
ALTER TABLE webhook_events ADD COLUMN lease_until timestamptz;
