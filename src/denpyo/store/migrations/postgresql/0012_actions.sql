-- denpyo schema 12 for PostgreSQL: what people did, and what waits for a second person.
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
    id            bigserial PRIMARY KEY,
    kind          text        NOT NULL,
    scope         text        NOT NULL,
    target        text        NOT NULL,
    params        text        NOT NULL DEFAULT '{}',
    plan          text,
    state         text        NOT NULL,
    actor         text        NOT NULL,
    note          text        NOT NULL,
    approver      text,
    decision_note text,
    decided_at    timestamptz,
    expires_at    timestamptz,
    total         bigint      NOT NULL DEFAULT 0,
    done          bigint      NOT NULL DEFAULT 0,
    skipped       bigint      NOT NULL DEFAULT 0,
    locked_by     text,
    locked_until  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

CREATE INDEX denpyo_actions_open ON denpyo_actions (state, id)
    WHERE state IN ('requested', 'running', 'paused');

CREATE TABLE denpyo_action_rows (
    action_id     bigint NOT NULL,
    submission_id bigint NOT NULL,
    outcome       text,
    reason        text,
    PRIMARY KEY (action_id, submission_id)
);
