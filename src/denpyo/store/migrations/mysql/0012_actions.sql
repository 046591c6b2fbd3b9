-- denpyo schema 12 for MariaDB: what people did, and what waits for a second person.
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
CREATE TABLE IF NOT EXISTS denpyo_actions (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind          VARCHAR(16)  NOT NULL,
    scope         VARCHAR(16)  NOT NULL,
    target        TEXT         NOT NULL,
    params        MEDIUMTEXT   NOT NULL DEFAULT '{}',
    plan          MEDIUMTEXT   NULL,
    state         VARCHAR(16)  NOT NULL,
    actor         VARCHAR(200) NOT NULL,
    note          TEXT         NOT NULL,
    approver      VARCHAR(200) NULL,
    decision_note TEXT         NULL,
    decided_at    DATETIME(6)  NULL,
    expires_at    DATETIME(6)  NULL,
    total         BIGINT       NOT NULL DEFAULT 0,
    done          BIGINT       NOT NULL DEFAULT 0,
    skipped       BIGINT       NOT NULL DEFAULT 0,
    locked_by     VARCHAR(200) NULL,
    locked_until  DATETIME(6)  NULL,
    created_at    DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at    DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    finished_at   DATETIME(6)  NULL,
    KEY denpyo_actions_open (state, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS denpyo_action_rows (
    action_id     BIGINT      NOT NULL,
    submission_id BIGINT      NOT NULL,
    outcome       VARCHAR(16) NULL,
    reason        TEXT        NULL,
    PRIMARY KEY (action_id, submission_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
