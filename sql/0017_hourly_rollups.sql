-- Per-hour counts of the events, by source, kind and status, so the dashboard,
-- the stats and the charts read a few hundred rows whatever the history holds.
-- Triggers note every insert, status change and delete in the same transaction
-- as a row of `event_rollup_changes` (insert-only: concurrent deliveries never
-- wait on each other's counters); `hookd` folds those into `event_rollups` and
-- `event_status_totals` every few seconds and before each read.
CREATE TABLE event_rollups (
    hour   timestamptz NOT NULL,   -- the UTC hour the events were received in
    source text        NOT NULL,
    kind   text        NOT NULL,   -- 'none' for events without a kind
    status text        NOT NULL,
    events bigint      NOT NULL,
    PRIMARY KEY (hour, source, kind, status)
);

-- Every event by status, whenever received (the dashboard's "waiting" counts).
CREATE TABLE event_status_totals (
    status text   PRIMARY KEY,
    events bigint NOT NULL
);

-- Changes not yet folded: +n for events that arrived in a group, -n for those
-- that left it (a status change, a delete).
CREATE TABLE event_rollup_changes (
    hour   timestamptz NOT NULL,
    source text        NOT NULL,
    kind   text        NOT NULL,
    status text        NOT NULL,
    events bigint      NOT NULL
);

-- Signatures refused per UTC hour and source; no event is stored for them, so
-- each instance counts them as they happen and adds its counts here.
CREATE TABLE signature_rejections (
    hour     timestamptz NOT NULL,
    source   text        NOT NULL,
    rejected bigint      NOT NULL,
    PRIMARY KEY (hour, source)
);

CREATE FUNCTION hookd_rollup_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_rollup_changes
        SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'),
               status, count(*)
        FROM added GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END $$;

CREATE FUNCTION hookd_rollup_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_rollup_changes
        SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'),
               status, -count(*)
        FROM removed GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END $$;

CREATE FUNCTION hookd_rollup_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_rollup_changes VALUES
        (date_trunc('hour', OLD.received_at, 'UTC'), OLD.source, COALESCE(OLD.kind, 'none'),
         OLD.status, -1),
        (date_trunc('hour', NEW.received_at, 'UTC'), NEW.source, COALESCE(NEW.kind, 'none'),
         NEW.status, 1);
    RETURN NULL;
END $$;

-- Per statement: a batch of deliveries (or a purge batch) is one grouped insert.
CREATE TRIGGER webhook_events_rollup_insert AFTER INSERT ON webhook_events
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION hookd_rollup_inserted();
CREATE TRIGGER webhook_events_rollup_delete AFTER DELETE ON webhook_events
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION hookd_rollup_deleted();
-- Per row, and only when a counted column changed: a repeated delivery, a lease
-- or a purged payload costs nothing here.
CREATE TRIGGER webhook_events_rollup_update
    AFTER UPDATE OF status, kind, source, received_at ON webhook_events
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.source IS DISTINCT FROM NEW.source
          OR OLD.received_at IS DISTINCT FROM NEW.received_at)
    EXECUTE FUNCTION hookd_rollup_updated();

-- The history so far (the triggers above hold off writers until this commits).
INSERT INTO event_rollups (hour, source, kind, status, events)
    SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'), status,
           count(*)
    FROM webhook_events GROUP BY 1, 2, 3, 4;
INSERT INTO event_status_totals (status, events)
    SELECT status, count(*) FROM webhook_events GROUP BY 1;
