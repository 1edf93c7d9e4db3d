-- One row per job that one instance at a time may run (the purge pass): who
-- holds it and until when. Unlike a session's advisory lock, a lease needs no
-- server session of its own, so it also holds behind a transaction-mode pooler;
-- a holder that dies lets it run out.
CREATE TABLE hookd_job_leases (
    job        text PRIMARY KEY,
    holder     bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
