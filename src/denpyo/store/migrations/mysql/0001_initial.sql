-- denpyo schema 1 for MariaDB (10.6 or later). Times are DATETIME(6) in UTC, always
-- taken from the database clock with UTC_TIMESTAMP(6), never from the session time zone.
--
-- MariaDB commits DDL implicitly: each CREATE TABLE below commits on its own, so a
-- migration is not one transaction as it is on PostgreSQL and SQLite. It is safe because
-- MysqlStore.migrate holds the session lock GET_LOCK('denpyo_migrate:<database>') for the whole run
-- (one migrator at a time), the version row is written only after the script ran, and
-- every statement here is `IF NOT EXISTS` with its indexes inside the CREATE TABLE: a
-- crash half-way leaves whole tables, and the next `migrate` re-runs this script to the end.
--
-- Text columns use utf8mb4_nopad_bin, so keys compare byte for byte as on the other
-- databases: the default collation would make 'order:42', 'ORDER:42' and 'order:42 '
-- one and the same key.
--
-- MariaDB has no partial indexes; the plain indexes below serve the same queries:
-- * denpyo_submissions_due (channel, next_attempt_at): settled rows have next_attempt_at
--   NULL, and the claim's range `next_attempt_at <= now` starts after the NULLs, so a
--   claim reads only rows with a next step (InnoDB appends id, which serves the
--   ORDER BY next_attempt_at, id without a sort).
-- * denpyo_submissions_ordering (channel, ordering_key, status, id): "is an earlier row
--   with my ordering key still open?" probes only the open statuses of one ordering key,
--   however many settled rows that key has behind it.
CREATE TABLE IF NOT EXISTS denpyo_submissions (
    id              BIGINT       NOT NULL AUTO_INCREMENT,
    channel         VARCHAR(100) NOT NULL,
    `key`           VARCHAR(255) NOT NULL,
    idempotency_key VARCHAR(64)  NOT NULL,
    payload         JSON         NOT NULL,
    status          VARCHAR(16)  NOT NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6)  NULL,
    locked_by       TEXT         NULL,
    locked_until    DATETIME(6)  NULL,
    remote_id       TEXT         NULL,
    last_error      TEXT         NULL,
    error_kind      VARCHAR(16)  NULL,
    ordering_key    VARCHAR(255) NULL,
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    synced_at       DATETIME(6)  NULL,
    resolution      TEXT         NULL,
    supersedes      BIGINT       NULL,
    PRIMARY KEY (id),
    CONSTRAINT denpyo_submissions_status_check
        CHECK (status IN ('requesting', 'synced', 'failed', 'rejected')),
    CONSTRAINT denpyo_submissions_error_kind_check
        CHECK (error_kind IN ('transient', 'ambiguous', 'rejected')),
    CONSTRAINT denpyo_submissions_channel_key UNIQUE KEY (channel, `key`),
    CONSTRAINT denpyo_submissions_idempotency_key UNIQUE KEY (idempotency_key),
    KEY denpyo_submissions_due (channel, next_attempt_at),
    KEY denpyo_submissions_ordering (channel, ordering_key, status, id),
    -- Lists and counts by status and time ("what failed since Monday", counts by month).
    KEY denpyo_submissions_status_created (status, created_at),
    KEY denpyo_submissions_supersedes (supersedes),
    CONSTRAINT denpyo_submissions_supersedes_fk FOREIGN KEY (supersedes)
        REFERENCES denpyo_submissions (id) ON DELETE SET NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS denpyo_events (
    id            BIGINT      NOT NULL AUTO_INCREMENT,
    submission_id BIGINT      NOT NULL,
    at            DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    kind          VARCHAR(64) NOT NULL,
    from_status   VARCHAR(16) NULL,
    to_status     VARCHAR(16) NULL,
    attempt       INT         NOT NULL DEFAULT 0,
    actor         TEXT        NOT NULL,
    detail        TEXT        NULL,
    duration_ms   INT         NULL,
    PRIMARY KEY (id),
    KEY denpyo_events_submission (submission_id, id),
    CONSTRAINT denpyo_events_submission_fk FOREIGN KEY (submission_id)
        REFERENCES denpyo_submissions (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
