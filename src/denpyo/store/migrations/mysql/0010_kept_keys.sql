-- denpyo schema 10 for MariaDB: keys and counts outlive their rows.
--
-- 1. denpyo_keys: every (channel, key) whose row was removed (pruned, or archived
--    and then deleted), with the outcome it had: a key is sent at most once whether
--    its row is live or not. `submit` and `enqueue` of a remembered key insert
--    nothing (the insert asks this table) and return the remembered outcome. A
--    removal commits the keys first, waits until every transaction that began
--    before them has ended, and only then deletes the rows (store/mysql.py, `remove_in`).
-- 2. denpyo_removed_counts: how many rows were removed, per day of creation,
--    channel, status and error kind, added by the transaction that deletes them.
CREATE TABLE IF NOT EXISTS denpyo_keys (
    channel         VARCHAR(100) NOT NULL,
    `key`           VARCHAR(255) NOT NULL,
    idempotency_key VARCHAR(64)  NOT NULL,
    submission_id   BIGINT       NOT NULL,
    status          VARCHAR(16)  NOT NULL,
    attempts        INT          NOT NULL,
    error_kind      VARCHAR(16)  NULL,
    remote_id       TEXT         NULL,
    resolution      TEXT         NULL,
    supersedes      BIGINT       NULL,
    superseded_by   BIGINT       NULL,
    created_at      DATETIME(6)  NOT NULL,
    synced_at       DATETIME(6)  NULL,
    removed_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    archived_to     TEXT         NULL,
    PRIMARY KEY (channel, `key`),
    UNIQUE KEY denpyo_keys_submission (submission_id),
    KEY denpyo_keys_idempotency_key (idempotency_key),
    KEY denpyo_keys_created (created_at),
    KEY denpyo_keys_supersedes (supersedes)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS denpyo_removed_counts (
    day        DATE         NOT NULL,
    channel    VARCHAR(100) NOT NULL,
    status     VARCHAR(16)  NOT NULL,
    error_kind VARCHAR(16)  NOT NULL,
    n          BIGINT       NOT NULL,
    PRIMARY KEY (day, channel, status, error_kind)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
