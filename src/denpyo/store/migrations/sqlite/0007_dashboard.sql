-- denpyo schema 7 for SQLite: what the dashboard reads, served by indexes at
-- millions of rows.
--
-- 1. The needs-a-person queue: a partial index of the unresolved rows that wait for a
--    person whatever the clock says (rejected, exhausted, ambiguous); it stays as
--    small as the queue however long the history. Rows whose lease ran out are read
--    from denpyo_submissions_in_doubt (schema 2).
-- 2. Outcomes per minute for the chart, folded from the events in bounded batches
--    (`outcome_fold_*`) by the workers' upkeep and by the dashboard. The cursor
--    starts at the newest event: the chart of an upgraded database fills from now on.
CREATE INDEX denpyo_submissions_attention ON denpyo_submissions (id)
    WHERE resolution IS NULL
      AND (status = 'rejected'
           OR (status = 'failed' AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL)));

CREATE TABLE denpyo_outcome_minutes (
    minute  TEXT    NOT NULL,
    channel TEXT    NOT NULL,
    outcome TEXT    NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (minute, channel, outcome)
);

CREATE TABLE denpyo_outcome_cursor (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    last_event_id INTEGER NOT NULL
);

INSERT INTO denpyo_outcome_cursor (id, last_event_id)
SELECT 1, COALESCE(MAX(id), 0) FROM denpyo_events;
