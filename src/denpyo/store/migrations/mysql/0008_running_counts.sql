-- denpyo schema 8 for MariaDB: `denpyo status`, the dashboard's overview and the
-- `denpyo_rows` gauge in constant time at millions of rows, as on PostgreSQL
-- (schema 3 and 4), instead of counting the table.
--
-- Running counts by channel, status, kind (for `failed` rows: retrying, exhausted,
-- ambiguous_due, ambiguous_held; otherwise empty) and resolution, kept by row
-- triggers in the writer's own transaction; the triggers see every write, the
-- application's own SQL included. Several workers settle at once: a trigger that
-- updated one row per group in place would hold that row's lock until its writer
-- commits, and every other writer of the group would wait for it (two moving rows
-- in opposite directions could deadlock). So each change appends rows instead, +1
-- for the group a row enters and -1 for the one it leaves, which no writer waits
-- for; the workers' upkeep (and `denpyo status`) folds them into one row per group
-- (`submission_counts_take`, `_drop`, `_add`), passing over the rows of writers that
-- have not committed yet, and the counts sum this small table. MariaDB triggers have
-- no WHEN clause: the update trigger appends only when a row changed group (settles
-- and a person's moves, not claims or lease renewals).
--
-- Exactness: the triggers are created, and the counts recounted, under LOCK TABLES
-- ... WRITE, so no write to denpyo_submissions lands between the two; writers wait
-- meanwhile (the recount reads the table once: about a second per million rows).
-- Each DDL statement commits on its own; the script can run again after a crash
-- half-way (IF NOT EXISTS; the recount starts from an empty table, under the lock).
-- The migrating user needs the TRIGGER and LOCK TABLES privileges (and, with binary
-- logging on, SUPER or log_bin_trust_function_creators, as for any trigger).
-- No statement inside a trigger ends a line with its semicolon (store/queries.py
-- split_statements): each trigger is one statement of this script.
CREATE TABLE IF NOT EXISTS denpyo_status_counts (
    id       BIGINT       NOT NULL AUTO_INCREMENT,
    channel  VARCHAR(100) NOT NULL,
    status   VARCHAR(16)  NOT NULL,
    kind     VARCHAR(16)  NOT NULL,
    resolved TINYINT      NOT NULL,
    n        BIGINT       NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

LOCK TABLES denpyo_submissions WRITE, denpyo_status_counts WRITE;

CREATE TRIGGER IF NOT EXISTS denpyo_count_inserted
AFTER INSERT ON denpyo_submissions FOR EACH ROW
INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
VALUES (NEW.channel, NEW.status,
        CASE WHEN NEW.status <> 'failed' THEN ''
             WHEN NEW.error_kind = 'ambiguous' AND NEW.next_attempt_at IS NOT NULL
                 THEN 'ambiguous_due'
             WHEN NEW.error_kind = 'ambiguous' THEN 'ambiguous_held'
             WHEN NEW.next_attempt_at IS NULL THEN 'exhausted'
             ELSE 'retrying' END,
        NEW.resolution IS NOT NULL, 1);

CREATE TRIGGER IF NOT EXISTS denpyo_count_deleted
AFTER DELETE ON denpyo_submissions FOR EACH ROW
INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
VALUES (OLD.channel, OLD.status,
        CASE WHEN OLD.status <> 'failed' THEN ''
             WHEN OLD.error_kind = 'ambiguous' AND OLD.next_attempt_at IS NOT NULL
                 THEN 'ambiguous_due'
             WHEN OLD.error_kind = 'ambiguous' THEN 'ambiguous_held'
             WHEN OLD.next_attempt_at IS NULL THEN 'exhausted'
             ELSE 'retrying' END,
        OLD.resolution IS NOT NULL, -1);

-- The group is (channel, status, kind, resolved), and kind follows from the status,
-- whether the error is ambiguous and whether a next attempt is set: when none of
-- these changed, neither did the group.
CREATE TRIGGER IF NOT EXISTS denpyo_count_updated
AFTER UPDATE ON denpyo_submissions FOR EACH ROW
IF OLD.channel <> NEW.channel
   OR OLD.status <> NEW.status
   OR (OLD.resolution IS NULL) <> (NEW.resolution IS NULL)
   OR (OLD.next_attempt_at IS NULL) <> (NEW.next_attempt_at IS NULL)
   OR (OLD.error_kind <=> 'ambiguous') <> (NEW.error_kind <=> 'ambiguous') THEN
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
            NEW.resolution IS NOT NULL, 1); END IF;

DELETE FROM denpyo_status_counts;

INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
SELECT channel, status,
       CASE WHEN status <> 'failed' THEN ''
            WHEN error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL THEN 'ambiguous_due'
            WHEN error_kind = 'ambiguous' THEN 'ambiguous_held'
            WHEN next_attempt_at IS NULL THEN 'exhausted'
            ELSE 'retrying' END,
       resolution IS NOT NULL, COUNT(*)
FROM denpyo_submissions GROUP BY 1, 2, 3, 4;

UNLOCK TABLES;
