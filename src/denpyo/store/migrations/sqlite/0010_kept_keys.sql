-- denpyo schema 10 for SQLite: keys and counts outlive their rows.
--
-- 1. denpyo_keys: every (channel, key) whose row was removed (pruned, or archived
--    and then deleted), with the outcome it had: a key is sent at most once whether
--    its row is live or not. `submit` and `enqueue` of a remembered key insert
--    nothing (submission_insert asks this table) and return the remembered outcome.
--    Written by the removal itself, in its transaction: SQLite has one writer, so no
--    insert can pass between the row leaving and its key arriving.
-- 2. denpyo_removed_counts: how many rows were removed, per day of creation,
--    channel, status and error kind, added by the same transaction. `denpyo report`
--    adds them to the live rows' counts: a report is the same before and after a
--    prune.
CREATE TABLE denpyo_keys (
    channel         TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    submission_id   INTEGER NOT NULL,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL,
    error_kind      TEXT,
    remote_id       TEXT,
    resolution      TEXT,
    supersedes      INTEGER,
    superseded_by   INTEGER,
    created_at      TEXT    NOT NULL,
    synced_at       TEXT,
    removed_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    archived_to     TEXT,
    PRIMARY KEY (channel, key)
) WITHOUT ROWID;

CREATE UNIQUE INDEX denpyo_keys_submission ON denpyo_keys (submission_id);
CREATE INDEX denpyo_keys_idempotency_key ON denpyo_keys (idempotency_key);
CREATE INDEX denpyo_keys_created ON denpyo_keys (created_at);
CREATE INDEX denpyo_keys_supersedes ON denpyo_keys (supersedes) WHERE supersedes IS NOT NULL;

CREATE TABLE denpyo_removed_counts (
    day        TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    error_kind TEXT    NOT NULL,
    n          INTEGER NOT NULL,
    PRIMARY KEY (day, channel, status, error_kind)
) WITHOUT ROWID;
