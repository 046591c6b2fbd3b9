-- denpyo schema 7 for MariaDB: what the dashboard reads, served by indexes at
-- millions of rows.
--
-- 1. The needs-a-person queue. MariaDB has no partial indexes: a virtual column is 1
--    for the unresolved rows that wait for a person whatever the clock says
--    (rejected, exhausted, ambiguous) and NULL otherwise, and (needs_person, id)
--    indexes it. The value changes only when a row enters or leaves the queue, so a
--    claim or a settle that ends synced leaves this index alone. Rows whose lease
--    ran out are read through denpyo_submissions_status_created (schema 1).
-- 2. Outcomes per minute for the chart, folded from the events in bounded batches
--    (`outcome_fold_*`) by the workers' upkeep and by the dashboard. The cursor
--    starts at the newest event: the chart of an upgraded database fills from now on.
--
-- MariaDB commits each statement here on its own; each is written to be run again
-- after a crash half-way (IF NOT EXISTS, INSERT IGNORE).
ALTER TABLE denpyo_submissions
    ADD COLUMN IF NOT EXISTS needs_person TINYINT AS (
        CASE WHEN resolution IS NULL
              AND (status = 'rejected'
                   OR (status = 'failed'
                       AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL)))
             THEN 1 END) VIRTUAL,
    ADD INDEX IF NOT EXISTS denpyo_submissions_attention (needs_person, id);

CREATE TABLE IF NOT EXISTS denpyo_outcome_minutes (
    minute  DATETIME     NOT NULL,
    channel VARCHAR(100) NOT NULL,
    outcome VARCHAR(16)  NOT NULL,
    n       BIGINT       NOT NULL,
    PRIMARY KEY (minute, channel, outcome)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS denpyo_outcome_cursor (
    id            INT    NOT NULL PRIMARY KEY,
    last_event_id BIGINT NOT NULL
) ENGINE = InnoDB;

INSERT IGNORE INTO denpyo_outcome_cursor (id, last_event_id)
SELECT 1, COALESCE(MAX(id), 0) FROM denpyo_events;
