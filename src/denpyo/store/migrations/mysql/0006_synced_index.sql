-- denpyo schema 6 for MariaDB: the audit pages through a channel's synced rows in the
-- order they were synced, so it reads only the rows of its window, however large the
-- table. MariaDB has no partial indexes: rows not synced have synced_at NULL and sort
-- before the audit's range (InnoDB appends id, which serves the ORDER BY synced_at, id).
-- Adding a secondary index is an online operation in InnoDB: writes go on meanwhile.
CREATE INDEX IF NOT EXISTS denpyo_submissions_synced ON denpyo_submissions (channel, synced_at);
