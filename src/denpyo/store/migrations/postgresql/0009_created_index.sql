-- denpyo schema 9 for PostgreSQL: the index on (status, created_at) becomes one on
-- created_at alone. Its one reader is `prune` (settled rows created before a cutoff,
-- oldest first), which a scan of created_at serves as well: the old rows are nearly
-- all settled. created_at never changes, so a settle no longer writes an entry
-- into it. Built without CONCURRENTLY (a migration is one transaction): writes
-- wait while it is built, about a second per million rows.
CREATE INDEX IF NOT EXISTS denpyo_submissions_created ON denpyo_submissions (created_at);

DROP INDEX IF EXISTS denpyo_submissions_status_created;
