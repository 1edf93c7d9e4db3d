-- Support look-ups by status (e.g. every dead event), newest first, keyset-paginated.
CREATE INDEX webhook_events_status_received_idx
    ON webhook_events (status, received_at DESC, id DESC);
