-- denpyo schema 10 for PostgreSQL: keys and counts outlive their rows.
--
-- 1. denpyo_keys: every (channel, key) whose row was removed (pruned, or archived
--    and then deleted), with the outcome it had: a key is sent at most once whether
--    its row is live or not. `submit` and `enqueue` of a remembered key insert
--    nothing (the insert asks this table) and return the remembered outcome. A
--    removal commits the keys first, waits until no transaction can still hold a
--    snapshot taken before them, and only then deletes the rows: an insert that
--    finds the row gone always finds its key (store/postgresql.py, `remove`).
-- 2. denpyo_removed_counts: how many rows were removed, per day of creation,
--    channel, status and error kind, added by the transaction that deletes them.
--    `denpyo report` adds them to the live rows' counts: a report is the same
--    before and after a prune.
CREATE TABLE denpyo_keys (
    channel         text        NOT NULL,
    key             text        NOT NULL,
    idempotency_key text        NOT NULL,
    submission_id   bigint      NOT NULL,
    status          text        NOT NULL,
    attempts        integer NOT NULL,
    error_kind      text,
    remote_id       text,
    resolution      text,
    supersedes      bigint,
    superseded_by   bigint,
    created_at      timestamptz NOT NULL,
    synced_at       timestamptz,
    removed_at      timestamptz NOT NULL DEFAULT now(),
    archived_to     text,
    CONSTRAINT denpyo_keys_pkey PRIMARY KEY (channel, key)
);

CREATE UNIQUE INDEX denpyo_keys_submission ON denpyo_keys (submission_id);
CREATE INDEX denpyo_keys_idempotency_key ON denpyo_keys (idempotency_key);
CREATE INDEX denpyo_keys_created ON denpyo_keys (created_at);
CREATE INDEX denpyo_keys_supersedes ON denpyo_keys (supersedes) WHERE supersedes IS NOT NULL;

CREATE TABLE denpyo_removed_counts (
    day        date   NOT NULL,
    channel    text   NOT NULL,
    status     text   NOT NULL,
    error_kind text   NOT NULL,
    n          bigint NOT NULL,
    CONSTRAINT denpyo_removed_counts_pkey PRIMARY KEY (day, channel, status, error_kind)
);
