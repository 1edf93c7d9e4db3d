-- At most a few conflicting items are kept per event (event_conflicts): an item
-- whose signature covers only some of its fields (Adyen's) can be sent again
-- and again with another unsigned field, each copy a new item. Past the cap a
-- conflicting item is counted here, not kept.
ALTER TABLE webhook_events ADD COLUMN conflicts_not_kept integer NOT NULL DEFAULT 0;
