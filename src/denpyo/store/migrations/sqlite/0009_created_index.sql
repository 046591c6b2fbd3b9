-- denpyo schema 9 for SQLite: the index on (status, created_at) becomes one on
-- created_at alone. Its one reader is `prune` (settled rows created before a cutoff,
-- oldest first), which a scan of created_at serves as well: the old rows are nearly
-- all settled. A row's status changes at every settle, so the old index had an entry
-- deleted and one inserted at each; created_at never changes, so the new one is
-- written once, at the insert. One page fewer in each settle's commit
-- (docs/performance.md, `submit()` on SQLite).
CREATE INDEX IF NOT EXISTS denpyo_submissions_created ON denpyo_submissions (created_at);

DROP INDEX IF EXISTS denpyo_submissions_status_created;
