-- When an event's personal data was erased at a customer's request (hookd
-- forget): its payload, body and conflicting items no longer hold what was
-- received, so its signature cannot prove its origin any more. Its dedupe key
-- and fingerprints stay.
ALTER TABLE webhook_events ADD COLUMN redacted_at timestamptz;
