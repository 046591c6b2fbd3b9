-- denpyo schema 16 for PostgreSQL: one word per concept in what is stored.
--
-- 1. denpyo_actions.state: a request waiting for a second person is
--    'awaiting_approval' (was 'requested', beside a row's 'requesting'); one the
--    second person turned down is 'declined' (was 'rejected', a row's status when
--    the provider refuses a call); one nobody decided in time is 'lapsed' (was
--    'expired': remembered keys expire); one whose rows are being carried out is
--    'in_progress' (was 'running': a worker process runs). expires_at: lapses_at.
-- 2. denpyo_channels: a channel the provider asked to wait (a Retry-After) is
--    throttled, not held (a holder holds a row): held_until, held_note become
--    throttled_until, throttled_note.
UPDATE denpyo_actions SET state = CASE state
    WHEN 'requested' THEN 'awaiting_approval'
    WHEN 'rejected' THEN 'declined'
    WHEN 'expired' THEN 'lapsed'
    WHEN 'running' THEN 'in_progress'
    ELSE state END
WHERE state IN ('requested', 'rejected', 'expired', 'running');

ALTER TABLE denpyo_actions RENAME COLUMN expires_at TO lapses_at;

DROP INDEX denpyo_actions_open;
CREATE INDEX denpyo_actions_open ON denpyo_actions (state, id)
    WHERE state IN ('awaiting_approval', 'in_progress', 'paused');

ALTER TABLE denpyo_channels RENAME COLUMN held_until TO throttled_until;
ALTER TABLE denpyo_channels RENAME COLUMN held_note TO throttled_note;
