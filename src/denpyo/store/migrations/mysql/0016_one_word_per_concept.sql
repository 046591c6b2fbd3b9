-- denpyo schema 16 for MariaDB: one word per concept in what is stored.
--
-- 1. denpyo_actions.state: a request waiting for a second person is
--    'awaiting_approval' (was 'requested', beside a row's 'requesting'); one the
--    second person turned down is 'declined' (was 'rejected', a row's status when
--    the provider refuses a call); one nobody decided in time is 'lapsed' (was
--    'expired': remembered keys expire); one whose rows are being carried out is
--    'in_progress' (was 'running': a worker process runs). expires_at: lapses_at.
--    The column widens first: 'awaiting_approval' is 17 characters.
-- 2. denpyo_channels: a channel the provider asked to wait (a Retry-After) is
--    throttled, not held (a holder holds a row): held_until, held_note become
--    throttled_until, throttled_note.
-- Each statement commits on its own; run again after a crash, each does nothing
-- more (IF EXISTS, and the UPDATE finds no old value).
ALTER TABLE denpyo_actions MODIFY state VARCHAR(32) NOT NULL;

UPDATE denpyo_actions SET state = CASE state
    WHEN 'requested' THEN 'awaiting_approval'
    WHEN 'rejected' THEN 'declined'
    WHEN 'expired' THEN 'lapsed'
    WHEN 'running' THEN 'in_progress'
    ELSE state END
WHERE state IN ('requested', 'rejected', 'expired', 'running');

ALTER TABLE denpyo_actions CHANGE COLUMN IF EXISTS expires_at lapses_at DATETIME(6) NULL;

ALTER TABLE denpyo_channels CHANGE COLUMN IF EXISTS held_until throttled_until DATETIME(6) NULL;
ALTER TABLE denpyo_channels CHANGE COLUMN IF EXISTS held_note throttled_note TEXT NULL;
