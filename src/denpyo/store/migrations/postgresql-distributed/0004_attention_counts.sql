-- denpyo schema 4 under the distributed SQL profile: PostgreSQL's, without the
-- functions its triggers call (no triggers here, no plpgsql).
-- 1. The (empty) running counts take the same columns as PostgreSQL's.
-- 2. The two claim indexes leave out failed rows with no next attempt.
-- 3. Events lose their foreign key to the submission (denpyo writes each event in
--    the same statement as its row's change, and removes both together).
ALTER TABLE denpyo_status_counts
    ADD COLUMN kind text NOT NULL DEFAULT '',
    ADD COLUMN resolved boolean NOT NULL DEFAULT false;

DROP INDEX denpyo_submissions_ready;
CREATE INDEX denpyo_submissions_ready ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NULL)
       OR (status = 'failed' AND error_kind = 'transient' AND next_attempt_at IS NOT NULL);

DROP INDEX denpyo_submissions_in_doubt;
CREATE INDEX denpyo_submissions_in_doubt ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NOT NULL)
       OR (status = 'failed' AND error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL);

ALTER TABLE denpyo_events DROP CONSTRAINT denpyo_events_submission_id_fkey;
