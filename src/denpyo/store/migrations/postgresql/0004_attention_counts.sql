-- denpyo schema 4 for PostgreSQL: `denpyo status` in constant time at ten million rows.
--
-- 1. The running counts (schema 3) also say, for each channel and status, what kind
--    of row it is (`kind`) and whether a person resolved it (`resolved`), so the
--    counts of what needs a person (exhausted, ambiguous, rejected, resolved) sum
--    this small table instead of reading every such row ever recorded.
-- 2. The two claim indexes leave out failed rows with no next attempt (exhausted,
--    or held for a person): they stay small however many of those accumulate, and
--    the rows in flight (the only counts that depend on the clock) are read from them.
-- 3. Events lose their foreign key to the submission. Checking it locked the
--    submission's row once per event written, on every enqueue, claim and settle
--    (measured: a quarter of a bulk enqueue's time). denpyo writes each event in
--    the same statement as its row's change, and `prune` deletes both; an
--    application that deletes submissions with its own SQL deletes their events too.
CREATE FUNCTION denpyo_count_kind(status text, error_kind text, next_attempt_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN status <> 'failed' THEN ''
        WHEN error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL THEN 'ambiguous_due'
        WHEN error_kind = 'ambiguous' THEN 'ambiguous_held'
        WHEN next_attempt_at IS NULL THEN 'exhausted'
        ELSE 'retrying' END
$$;

ALTER TABLE denpyo_status_counts
    ADD COLUMN kind text NOT NULL DEFAULT '',
    ADD COLUMN resolved boolean NOT NULL DEFAULT false;

-- Workers fold the counts at each heartbeat (`submission_counts_compact`), so the
-- table stays small and is read whole; an index would only cost every write.
DROP INDEX denpyo_status_counts_channel;

CREATE OR REPLACE FUNCTION denpyo_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    SELECT channel, status, denpyo_count_kind(status, error_kind, next_attempt_at),
           resolution IS NOT NULL, COUNT(*)
    FROM new_rows GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION denpyo_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    SELECT channel, status, denpyo_count_kind(status, error_kind, next_attempt_at),
           resolution IS NOT NULL, -COUNT(*)
    FROM old_rows GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION denpyo_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    SELECT channel, status, kind, resolved, SUM(d) FROM (
        SELECT channel, status, denpyo_count_kind(status, error_kind, next_attempt_at) AS kind,
               resolution IS NOT NULL AS resolved, 1 AS d
        FROM new_rows
        UNION ALL
        SELECT channel, status, denpyo_count_kind(status, error_kind, next_attempt_at),
               resolution IS NOT NULL, -1
        FROM old_rows
    ) AS change
    GROUP BY 1, 2, 3, 4
    HAVING SUM(d) <> 0;
    RETURN NULL;
END $$;

-- The triggers are unchanged (they call the functions above by name). Migrations
-- run in one transaction holding the table's lock, so the recount is exact.
DELETE FROM denpyo_status_counts;
INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
SELECT channel, status, denpyo_count_kind(status, error_kind, next_attempt_at),
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

ALTER TABLE denpyo_events DROP CONSTRAINT denpyo_events_submission_id_fkey;
