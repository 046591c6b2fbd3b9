-- denpyo schema 8 for SQLite: `denpyo status`, the dashboard's overview and the
-- `denpyo_rows` gauge in constant time at millions of rows, as on PostgreSQL
-- (schema 3 and 4), instead of counting the table.
--
-- 1. Running counts: one row per channel, status, kind (for `failed` rows: retrying,
--    exhausted, ambiguous_due, ambiguous_held; otherwise empty) and resolution, kept
--    by row triggers in the writer's own transaction. SQLite has one writer at a
--    time, so each trigger adds to its row in place (an upsert on a table of a few
--    dozen rows): nothing to fold, and the counts commit or roll back with the write.
--    The update trigger fires only when a row may change group: settles and a
--    person's moves, not claims or lease renewals. The triggers see every write,
--    the application's own SQL included.
-- 2. The two claim indexes leave out failed rows with no next attempt (exhausted, or
--    held for a person), as PostgreSQL's do since schema 4: they hold only the rows
--    waiting or in flight, and the counts that depend on the clock (rows whose lease
--    ran out, the oldest pending row) are read from them.
--
-- A migration runs in one transaction under BEGIN IMMEDIATE, which holds the write
-- lock: the recount below and the triggers agree exactly.
CREATE TABLE denpyo_status_counts (
    channel  TEXT    NOT NULL,
    status   TEXT    NOT NULL,
    kind     TEXT    NOT NULL,
    resolved INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (channel, status, kind, resolved)
) WITHOUT ROWID;

-- No statement inside a trigger ends a line with its semicolon (store/queries.py
-- split_statements): each trigger is one statement of this script.
CREATE TRIGGER denpyo_count_inserted AFTER INSERT ON denpyo_submissions
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    VALUES (NEW.channel, NEW.status,
            CASE WHEN NEW.status <> 'failed' THEN ''
                 WHEN NEW.error_kind = 'ambiguous' AND NEW.next_attempt_at IS NOT NULL
                     THEN 'ambiguous_due'
                 WHEN NEW.error_kind = 'ambiguous' THEN 'ambiguous_held'
                 WHEN NEW.next_attempt_at IS NULL THEN 'exhausted'
                 ELSE 'retrying' END,
            NEW.resolution IS NOT NULL, 1)
    ON CONFLICT (channel, status, kind, resolved) DO UPDATE SET n = n + excluded.n; END;

CREATE TRIGGER denpyo_count_deleted AFTER DELETE ON denpyo_submissions
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    VALUES (OLD.channel, OLD.status,
            CASE WHEN OLD.status <> 'failed' THEN ''
                 WHEN OLD.error_kind = 'ambiguous' AND OLD.next_attempt_at IS NOT NULL
                     THEN 'ambiguous_due'
                 WHEN OLD.error_kind = 'ambiguous' THEN 'ambiguous_held'
                 WHEN OLD.next_attempt_at IS NULL THEN 'exhausted'
                 ELSE 'retrying' END,
            OLD.resolution IS NOT NULL, -1)
    ON CONFLICT (channel, status, kind, resolved) DO UPDATE SET n = n + excluded.n; END;

-- The group is (channel, status, kind, resolved), and kind follows from the status,
-- whether the error is ambiguous and whether a next attempt is set: when none of
-- these changed, neither did the group.
CREATE TRIGGER denpyo_count_updated
AFTER UPDATE OF channel, status, error_kind, next_attempt_at, resolution ON denpyo_submissions
WHEN OLD.channel IS NOT NEW.channel
  OR OLD.status IS NOT NEW.status
  OR (OLD.resolution IS NULL) <> (NEW.resolution IS NULL)
  OR (OLD.next_attempt_at IS NULL) <> (NEW.next_attempt_at IS NULL)
  OR (OLD.error_kind IS 'ambiguous') <> (NEW.error_kind IS 'ambiguous')
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    VALUES (OLD.channel, OLD.status,
            CASE WHEN OLD.status <> 'failed' THEN ''
                 WHEN OLD.error_kind = 'ambiguous' AND OLD.next_attempt_at IS NOT NULL
                     THEN 'ambiguous_due'
                 WHEN OLD.error_kind = 'ambiguous' THEN 'ambiguous_held'
                 WHEN OLD.next_attempt_at IS NULL THEN 'exhausted'
                 ELSE 'retrying' END,
            OLD.resolution IS NOT NULL, -1),
           (NEW.channel, NEW.status,
            CASE WHEN NEW.status <> 'failed' THEN ''
                 WHEN NEW.error_kind = 'ambiguous' AND NEW.next_attempt_at IS NOT NULL
                     THEN 'ambiguous_due'
                 WHEN NEW.error_kind = 'ambiguous' THEN 'ambiguous_held'
                 WHEN NEW.next_attempt_at IS NULL THEN 'exhausted'
                 ELSE 'retrying' END,
            NEW.resolution IS NOT NULL, 1)
    ON CONFLICT (channel, status, kind, resolved) DO UPDATE SET n = n + excluded.n; END;

INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
SELECT channel, status,
       CASE WHEN status <> 'failed' THEN ''
            WHEN error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL THEN 'ambiguous_due'
            WHEN error_kind = 'ambiguous' THEN 'ambiguous_held'
            WHEN next_attempt_at IS NULL THEN 'exhausted'
            ELSE 'retrying' END,
       resolution IS NOT NULL, COUNT(*)
FROM denpyo_submissions GROUP BY 1, 2, 3, 4;

DROP INDEX denpyo_submissions_ready;
CREATE INDEX denpyo_submissions_ready ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NULL)
       OR (status = 'failed' AND error_kind = 'transient' AND next_attempt_at IS NOT NULL);

DROP INDEX denpyo_submissions_in_doubt;
CREATE INDEX denpyo_submissions_in_doubt ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NOT NULL)
       OR (status = 'failed' AND error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL);
