-- denpyo schema 7 for PostgreSQL: what the dashboard reads, served by indexes at
-- millions of rows.
--
-- 1. The needs-a-person queue: a partial index of the unresolved rows that wait for a
--    person whatever the clock says (rejected, exhausted, ambiguous). Rows enter it
--    when they settle so and leave it when a person resolves them, so it stays as
--    small as the queue however long the history. The other part of the queue, rows
--    whose lease ran out, is read from denpyo_submissions_in_doubt (schema 4).
-- 2. Outcomes per minute for the chart: folded from the events in bounded batches
--    (`outcome_fold_*`) by the workers' upkeep and by the dashboard, never on the
--    hot path. The cursor starts at the newest event: the chart of an upgraded
--    database begins empty and fills from now on.
CREATE INDEX denpyo_submissions_attention ON denpyo_submissions (id)
    WHERE resolution IS NULL
      AND (status = 'rejected'
           OR (status = 'failed' AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL)));

CREATE TABLE denpyo_outcome_minutes (
    minute  timestamptz NOT NULL,
    channel text        NOT NULL,
    outcome text        NOT NULL,
    n       bigint      NOT NULL,
    PRIMARY KEY (minute, channel, outcome)
);

CREATE TABLE denpyo_outcome_cursor (
    id            integer PRIMARY KEY CHECK (id = 1),
    last_event_id bigint  NOT NULL
);

INSERT INTO denpyo_outcome_cursor (id, last_event_id)
SELECT 1, COALESCE(MAX(id), 0) FROM denpyo_events;
