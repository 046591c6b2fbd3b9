-- denpyo schema 6 for PostgreSQL: the audit pages through a channel's synced rows in
-- the order they were synced, so it reads only the rows of its window, however large
-- the table. Partial: only synced rows are in it.
CREATE INDEX IF NOT EXISTS denpyo_submissions_synced
    ON denpyo_submissions (channel, synced_at, id)
    WHERE status = 'synced';
