-- denpyo schema 3 for PostgreSQL: counts by channel and status that stay cheap at
-- ten million rows. Every statement that inserts, updates or deletes submissions
-- appends its net change per (channel, status) to denpyo_status_counts, in the
-- same transaction (statement-level triggers over the transition tables, so a
-- batch of a thousand settles adds a row or two, not a thousand). Reading the
-- counts sums a small table; `submission_counts_compact` folds it back from time
-- to time. The triggers see every write, the application's own SQL included.
-- Migrations run in one transaction and CREATE TRIGGER locks the table against
-- writes, so the backfill below and the triggers agree exactly.
CREATE TABLE denpyo_status_counts (
    channel text   NOT NULL,
    status  text   NOT NULL,
    n       bigint NOT NULL
);

CREATE INDEX denpyo_status_counts_channel ON denpyo_status_counts (channel, status);

CREATE FUNCTION denpyo_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, n)
    SELECT channel, status, COUNT(*) FROM new_rows GROUP BY channel, status;
    RETURN NULL;
END $$;

CREATE FUNCTION denpyo_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, n)
    SELECT channel, status, -COUNT(*) FROM old_rows GROUP BY channel, status;
    RETURN NULL;
END $$;

CREATE FUNCTION denpyo_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO denpyo_status_counts (channel, status, n)
    SELECT channel, status, SUM(d) FROM (
        SELECT channel, status, 1 AS d FROM new_rows
        UNION ALL
        SELECT channel, status, -1 AS d FROM old_rows
    ) AS change
    GROUP BY channel, status
    HAVING SUM(d) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER denpyo_count_inserted AFTER INSERT ON denpyo_submissions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION denpyo_count_inserted();

CREATE TRIGGER denpyo_count_deleted AFTER DELETE ON denpyo_submissions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION denpyo_count_deleted();

CREATE TRIGGER denpyo_count_updated AFTER UPDATE ON denpyo_submissions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION denpyo_count_updated();

INSERT INTO denpyo_status_counts (channel, status, n)
SELECT channel, status, COUNT(*) FROM denpyo_submissions GROUP BY channel, status;
