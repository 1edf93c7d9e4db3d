-- When each source last had a delivery accepted (answered 2xx), kept by every
-- instance at most every few seconds, so `expect_events_within` can tell a
-- source that went silent (a deleted endpoint, a secret the provider no longer
-- matches, a provider outage) whichever instance its deliveries reach.
CREATE TABLE source_activity (
    source           text PRIMARY KEY,
    last_accepted_at timestamptz NOT NULL
);
