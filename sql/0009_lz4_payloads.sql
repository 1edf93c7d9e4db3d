-- Payloads and bodies are compressed with lz4 instead of pglz when the server
-- has it (PostgreSQL 14+ built with lz4, as Debian's and most managed ones are):
-- several times cheaper on every insert of a webhook. Without lz4, nothing changes.
DO $$
BEGIN
    ALTER TABLE webhook_events
        ALTER COLUMN payload SET COMPRESSION lz4,
        ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR undefined_object THEN
    RAISE NOTICE 'lz4 is not available: payloads stay pglz-compressed';
END
$$;
