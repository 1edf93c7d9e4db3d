-- The server's own secret: with an admin token it keys that token's session
-- cookies, so a stolen cookie cannot be used to guess the token offline, and
-- replacing this secret (delete the row, restart) ends every session.
CREATE TABLE hookd_server_secret (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    secret     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Sessions ended by signing out, until they would have expired anyway.
CREATE TABLE admin_revoked_sessions (
    nonce      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX admin_revoked_sessions_expires_idx ON admin_revoked_sessions (expires_at);

-- Which request owns a running Idempotency-Key claim: only it may answer it.
ALTER TABLE admin_idempotency_keys ADD COLUMN claim_id bytea;
