-- The payload purge now walks events in arrival order from a persisted watermark
-- instead of a partial index on unpurged rows. Dropping a payload then changes no
-- indexed column, so it can be a HOT update (no new index entries, far less WAL)
-- whenever the page has room, which the lower fillfactor keeps for new pages.
DROP INDEX webhook_events_purgeable_idx;
ALTER TABLE webhook_events SET (fillfactor = 85);

-- How far the payload purge has walked: every event at or before this point is
-- purged, or listed in hookd_purge_pending.
CREATE TABLE hookd_purge_watermark (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    received_at timestamptz NOT NULL,
    id          bigint      NOT NULL
);

-- Events the walk passed while they were still `failed`: purged once they finish.
CREATE TABLE hookd_purge_pending (
    webhook_event_id bigint PRIMARY KEY REFERENCES webhook_events (id) ON DELETE CASCADE
);
