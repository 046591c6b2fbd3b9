-- denpyo schema 12 for SQLite: what people did, and what waits for a second person.
--
-- 1. denpyo_actions: one row per action a person took or asked for (retry, abandon,
--    resend, mark_synced, pause, resume), on one row, on the rows they named, on
--    every row a filter found (a bulk action), or on a channel: who, when, why
--    (note), what it named (target, params: the ids' filter or the form's fields),
--    its dry run (plan), and where it stands (state: requested -> running -> done,
--    or requested -> rejected/expired; a bulk action may be paused or cancelled).
--    A two-person rule's request waits in state 'requested' until a second person
--    (approver) decides it. A bulk action is carried out in batches by one holder at
--    a time (locked_by, locked_until: its lease), counting done and skipped rows.
-- 2. denpyo_action_rows: the rows an action acts on, frozen when it is made, each
--    with what happened to it (outcome NULL: not yet; 'done'; 'skipped' and why).
CREATE TABLE denpyo_actions (
    id            INTEGER PRIMARY KEY,
    kind          TEXT    NOT NULL,
    scope         TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    params        TEXT    NOT NULL DEFAULT '{}',
    plan          TEXT,
    state         TEXT    NOT NULL,
    actor         TEXT    NOT NULL,
    note          TEXT    NOT NULL,
    approver      TEXT,
    decision_note TEXT,
    decided_at    TEXT,
    expires_at    TEXT,
    total         INTEGER NOT NULL DEFAULT 0,
    done          INTEGER NOT NULL DEFAULT 0,
    skipped       INTEGER NOT NULL DEFAULT 0,
    locked_by     TEXT,
    locked_until  TEXT,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    finished_at   TEXT
);

CREATE INDEX denpyo_actions_open ON denpyo_actions (state, id)
    WHERE state IN ('requested', 'running', 'paused');

CREATE TABLE denpyo_action_rows (
    action_id     INTEGER NOT NULL,
    submission_id INTEGER NOT NULL,
    outcome       TEXT,
    reason        TEXT,
    PRIMARY KEY (action_id, submission_id)
) WITHOUT ROWID;
