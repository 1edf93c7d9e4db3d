-- Where an event was first stored from: 'delivery' (the provider sent it, and
-- its signature proved it) or 'api' (`hookd reconcile` found it missing in the
-- provider's list of past events, asked over TLS with the source's key). A
-- later delivery of a recovered event counts as a delivery of it and leaves
-- its origin as it was.
--
-- The ingest statements store a recovered event with signed_with = -1 (no
-- secret of the source signed it); the trigger marks such a row 'api' as it is
-- inserted, in the same statement, so an event is never left half-recovered.
-- The default is a constant: adding the column rewrites no row.
ALTER TABLE webhook_events ADD COLUMN origin text NOT NULL DEFAULT 'delivery';

CREATE FUNCTION hookd_recovered_origin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.origin := 'api';
    RETURN NEW;
END
$$;

CREATE TRIGGER webhook_events_recovered_origin
    BEFORE INSERT ON webhook_events
    FOR EACH ROW WHEN (NEW.signed_with = -1)
    EXECUTE FUNCTION hookd_recovered_origin();

