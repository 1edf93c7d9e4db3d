-- A conflicting item resent is one record, counted: the provider may send the
-- same batch many times, and each copy says nothing new. Copies recorded before
-- are folded into the first.
ALTER TABLE event_conflicts
    ADD COLUMN deliveries       integer     NOT NULL DEFAULT 1,
    ADD COLUMN last_delivery_at timestamptz NOT NULL DEFAULT now();
UPDATE event_conflicts c
   SET deliveries = d.n, last_delivery_at = d.last
  FROM (SELECT min(id) AS id, count(*) AS n, max(received_at) AS last
          FROM event_conflicts GROUP BY webhook_event_id, offered_sha256) d
 WHERE c.id = d.id;
DELETE FROM event_conflicts c
 WHERE EXISTS (SELECT 1 FROM event_conflicts f
                WHERE f.webhook_event_id = c.webhook_event_id
                  AND f.offered_sha256 = c.offered_sha256 AND f.id < c.id);
CREATE UNIQUE INDEX event_conflicts_offered_key
    ON event_conflicts (webhook_event_id, offered_sha256);
