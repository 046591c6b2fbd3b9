-- denpyo schema 1 for SQLite. Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' from the
-- database clock, so they sort and compare as text and strftime() groups them.
CREATE TABLE denpyo_submissions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    payload         TEXT    NOT NULL CHECK (json_valid(payload)),
    status          TEXT    NOT NULL CHECK (status IN ('requesting', 'synced', 'failed', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    locked_by       TEXT,
    locked_until    TEXT,
    remote_id       TEXT,
    last_error      TEXT,
    error_kind      TEXT    CHECK (error_kind IN ('transient', 'ambiguous', 'rejected')),
    ordering_key    TEXT,
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    synced_at       TEXT,
    resolution      TEXT,
    supersedes      INTEGER REFERENCES denpyo_submissions (id) ON DELETE SET NULL,
    UNIQUE (channel, key),
    UNIQUE (idempotency_key)
);

-- Claiming: only rows with a next step are in this index, so it stays small
-- however many settled rows the table holds.
CREATE INDEX denpyo_submissions_due ON denpyo_submissions (channel, next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

-- Ordering keys: "is an earlier row with my ordering key still open?"
CREATE INDEX denpyo_submissions_ordering ON denpyo_submissions (channel, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('requesting', 'failed');

-- Lists and counts by status and time ("what failed since Monday", counts by month).
CREATE INDEX denpyo_submissions_status_created ON denpyo_submissions (status, created_at);

CREATE TABLE denpyo_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    submission_id INTEGER NOT NULL REFERENCES denpyo_submissions (id) ON DELETE CASCADE,
    at            TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    kind          TEXT    NOT NULL,
    from_status   TEXT,
    to_status     TEXT,
    attempt       INTEGER NOT NULL DEFAULT 0,
    actor         TEXT    NOT NULL,
    detail        TEXT,
    duration_ms   INTEGER
);

CREATE INDEX denpyo_events_submission ON denpyo_events (submission_id, id);
