-- Named queries for SQLite. Each query starts with a line `-- name: what it does`.
-- Times come from the database clock as UTC text; a lease of N seconds is
-- strftime(..., 'now', '+N seconds'). Writers run inside BEGIN IMMEDIATE.

-- @removable: retention lets the row go: synced, or rejected or failed and resolved by a person, created longer ago than its state's age (:synced, :rejected, :abandoned seconds; NULL: kept)
(($.status = 'synced' AND :synced IS NOT NULL
      AND $.created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :synced || ' seconds'))
  OR ($.status = 'rejected' AND $.resolution IS NOT NULL AND :rejected IS NOT NULL
      AND $.created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :rejected || ' seconds'))
  OR ($.status = 'failed' AND $.resolution IS NOT NULL AND $.next_attempt_at IS NULL
      AND :abandoned IS NOT NULL
      AND $.created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :abandoned || ' seconds')))

-- @in_doubt: the call may or may not have arrived: `requesting` with its lease run out, or an ambiguous failure
($.status = 'requesting' AND $.locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
OR ($.status = 'failed' AND $.error_kind = 'ambiguous')

-- @needs_person: in doubt, exhausted (`failed` with no next attempt) or rejected, and not resolved
$.resolution IS NULL
AND (($.status = 'requesting' AND $.locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
     OR ($.status = 'failed' AND ($.error_kind = 'ambiguous' OR $.next_attempt_at IS NULL))
     OR $.status = 'rejected')

-- @ready_index: the predicate of the index denpyo_submissions_ready, word for word (SQLite uses a partial index only for a query that repeats its predicate): rows a sender may take, never attempted or a transient failure with a next attempt
($.status = 'requesting' AND $.locked_until IS NULL)
OR ($.status = 'failed' AND $.error_kind = 'transient' AND $.next_attempt_at IS NOT NULL)

-- @in_doubt_index: the predicate of the index denpyo_submissions_in_doubt, word for word: rows held, or an ambiguous failure with a next attempt
($.status = 'requesting' AND $.locked_until IS NOT NULL)
OR ($.status = 'failed' AND $.error_kind = 'ambiguous' AND $.next_attempt_at IS NOT NULL)

-- @list_filter: an operator's filter (domain/filters.py), each optional condition written (param IS NULL OR condition) so that every value stays a bound parameter
(:all_statuses OR $.status IN (:status0, :status1, :status2, :status3))
AND (:channel IS NULL OR $.channel = :channel)
AND (:since IS NULL OR $.created_at >= strftime('%Y-%m-%d %H:%M:%f', :since))
AND (:until IS NULL OR $.created_at < strftime('%Y-%m-%d %H:%M:%f', :until))
AND (:key_prefix IS NULL OR substr($.key, 1, length(:key_prefix)) = :key_prefix)
AND (:error_text IS NULL OR instr($.last_error, :error_text) > 0)
AND (:in_doubt IS NULL OR :in_doubt = CASE WHEN {{in_doubt}} THEN 1 ELSE 0 END)
AND (:needs_person IS NULL OR :needs_person = CASE WHEN {{needs_person}} THEN 1 ELSE 0 END)
AND (:resolved IS NULL OR :resolved = CASE WHEN $.resolution IS NULL THEN 0 ELSE 1 END)

-- @attention_index: the predicate of the index denpyo_submissions_attention, word for word: unresolved rows that wait for a person whatever the clock says
$.resolution IS NULL
AND ($.status = 'rejected'
     OR ($.status = 'failed' AND ($.error_kind = 'ambiguous' OR $.next_attempt_at IS NULL)))

-- create_schema_version: the table that records which migrations ran
CREATE TABLE IF NOT EXISTS denpyo_schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- get_schema_version: the newest migration applied
SELECT COALESCE(MAX(version), 0) AS version FROM denpyo_schema_version;

-- add_schema_version: record one applied migration
INSERT INTO denpyo_schema_version (version) VALUES (:version);

-- lock_schema: serialise migrations; BEGIN IMMEDIATE already holds the write lock
SELECT 1;

-- get_database_identity: which database this connection works in: its main file
SELECT file FROM pragma_database_list WHERE name = 'main';

-- read_clock: the database clock
SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now;

-- insert_submission: record a new submission, back what the statement computed (its id and times); nothing when (channel, key) exists, or existed and is remembered (denpyo_keys)
-- traceparent, tracestate: the W3C trace context the row was written in (NULL: none).
INSERT INTO denpyo_submissions (
    channel, key, idempotency_key, payload, status, attempts, ordering_key, supersedes,
    locked_by, locked_until, next_attempt_at, traceparent, tracestate
) SELECT
    :channel, :key, :idempotency_key, :payload, 'requesting', 0, :ordering_key,
    :supersedes, :locked_by,
    CASE WHEN :lease IS NULL THEN NULL
         ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds') END,
    strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || COALESCE(:lease, 0) || ' seconds'),
    :traceparent, :tracestate
WHERE NOT EXISTS (SELECT 1 FROM denpyo_keys WHERE channel = :channel AND key = :key)
ON CONFLICT (channel, key) DO NOTHING
RETURNING id, created_at, updated_at, locked_until, next_attempt_at;

-- get_submission: one submission by id
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id = :id;

-- get_submissions_many: submissions by id (ids: a JSON array; the rows a batch of moves changed)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id IN (SELECT value FROM json_each(:ids));

-- get_submission_by_key: one submission by channel and business key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = :channel AND key = :key;

-- get_submission_existing: the row an insert found in its way, by channel and business key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = :channel AND key = :key;

-- find_submissions_ready: due rows of one channel that a sender may attempt now
SELECT s.id, s.status FROM denpyo_submissions s
WHERE s.channel = :channel
  AND s.next_attempt_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND {{ready_index s}}
  AND s.resolution IS NULL
  AND (s.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM denpyo_submissions h
        WHERE h.channel = s.channel AND h.ordering_key = s.ordering_key AND h.id < s.id
          AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL))
ORDER BY s.next_attempt_at, s.id
LIMIT :limit;

-- find_submissions_in_doubt: due in-doubt rows of one channel (lease run out, or ambiguous failure)
SELECT s.id, s.status FROM denpyo_submissions s
WHERE s.channel = :channel
  AND s.next_attempt_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND {{in_doubt_index s}}
  AND ({{in_doubt s}})
  AND s.resolution IS NULL
ORDER BY s.next_attempt_at, s.id
LIMIT :limit;

-- move_submission: compare-and-set one row from its expected status and holder to its next state, returning the row as moved (nothing: another holder won, or a person resolved the row: only a move that resolves it again applies then)
UPDATE denpyo_submissions SET
    status = :to_status,
    attempts = attempts + :attempt_delta,
    locked_by = :locked_by,
    locked_until = CASE WHEN :lease IS NULL THEN NULL
        ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds') END,
    next_attempt_at = CASE
        WHEN :lease > 0 THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds')
        WHEN :retry_in IS NOT NULL
            THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :retry_in || ' seconds')
        ELSE NULL END,
    remote_id = COALESCE(:remote_id, remote_id),
    last_error = CASE WHEN :keep_error THEN last_error ELSE :last_error END,
    error_kind = CASE WHEN :keep_error THEN error_kind ELSE :error_kind END,
    resolution = COALESCE(:resolution, resolution),
    synced_at = CASE WHEN :to_status = 'synced'
        THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE synced_at END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND status = :from_status
  AND (locked_by IS :holder
       OR (:holder IS NULL
           AND (locked_until IS NULL OR locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now'))))
  AND (:resolution IS NOT NULL OR resolution IS NULL)
RETURNING *,
    {{in_doubt}} AS in_doubt;

-- settle_submission: end an attempt its holder still holds (`requesting` to how it ended, its call counted), back only what the mover cannot know: move_submission's commonest move, lean
UPDATE denpyo_submissions SET
    status = :to_status,
    attempts = attempts + 1,
    locked_by = NULL,
    locked_until = NULL,
    next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :retry_in || ' seconds'),
    remote_id = COALESCE(:remote_id, remote_id),
    last_error = :last_error,
    error_kind = :error_kind,
    synced_at = CASE WHEN :to_status = 'synced'
        THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE synced_at END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND status = 'requesting' AND locked_by = :holder
RETURNING next_attempt_at, remote_id, updated_at, synced_at, resolution,
    {{in_doubt}} AS in_doubt;

-- insert_event: one line of a submission's history
INSERT INTO denpyo_events
    (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
VALUES (:submission_id, :kind, :from_status, :to_status, :attempt, :actor, :detail, :duration_ms);

-- insert_events_sent_inline: the created and first attempt events of a row an inline submit records, in one statement
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
VALUES (:submission_id, 'created', NULL, 'requesting', 0, :actor),
       (:submission_id, 'attempt', 'requesting', 'requesting', 1, :actor);

-- list_events: a submission's history, oldest first
SELECT * FROM denpyo_events WHERE submission_id = :submission_id ORDER BY id;

-- list_events_many: the histories of many submissions (ids: a JSON array; the archive's batch), oldest first
SELECT * FROM denpyo_events WHERE submission_id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- list_submissions: submissions matching an operator's filter, newest first
-- Operator queries (CLI, dashboard) from here on. Each optional filter is
-- written as (param IS NULL OR condition): every value stays a bound parameter.
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE {{list_filter}}
ORDER BY id DESC
LIMIT :limit;

-- count_submissions_by_status: how many rows each channel has in each status (from the running counts)
SELECT channel, status, SUM(n) AS n
FROM denpyo_status_counts
WHERE (:channel IS NULL OR channel = :channel)
GROUP BY channel, status
HAVING SUM(n) <> 0
ORDER BY channel, status;

-- count_submissions_needs_person: in-doubt, exhausted, open-rejected, needs-a-person and pending counts, the oldest pending row's creation, and the database clock
-- Reads the running counts (schema 8) and the claim indexes, which hold only the rows
-- waiting or in flight, never the settled history: the same time at a thousand rows or
-- ten million. INDEXED BY: without statistics SQLite would read the status index,
-- which holds every row ever recorded.
WITH counted AS (
    SELECT
        COALESCE(SUM(CASE WHEN status = 'failed'
                           AND kind IN ('ambiguous_due', 'ambiguous_held') THEN n END),
                 0) AS ambiguous,
        COALESCE(SUM(CASE WHEN status = 'failed' AND kind = 'exhausted' AND NOT resolved
                          THEN n END), 0) AS exhausted,
        COALESCE(SUM(CASE WHEN status = 'failed' AND NOT resolved
                           AND kind IN ('ambiguous_due', 'ambiguous_held', 'exhausted')
                          THEN n END), 0) AS failed_open,
        COALESCE(SUM(CASE WHEN status = 'rejected' AND NOT resolved THEN n END),
                 0) AS rejected_open,
        COALESCE(SUM(CASE WHEN status = 'requesting'
                            OR (status = 'failed' AND kind IN ('retrying', 'ambiguous_due'))
                          THEN n END), 0) AS pending,
        COALESCE(SUM(CASE WHEN resolved THEN n END), 0) AS resolved
    FROM denpyo_status_counts
    WHERE (:channel IS NULL OR channel = :channel)
), held AS (  -- rows being sent or verified, and those whose sender is gone
    SELECT COUNT(*) AS expired, COALESCE(SUM(resolution IS NULL), 0) AS expired_open
    FROM denpyo_submissions INDEXED BY denpyo_submissions_in_doubt
    WHERE {{in_doubt_index}}
      AND status = 'requesting' AND locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now')
      AND (:channel IS NULL OR channel = :channel)
), oldest AS (  -- the two claim indexes hold every pending row between them
    SELECT MIN(created_at) AS created_at FROM (
        SELECT created_at FROM denpyo_submissions INDEXED BY denpyo_submissions_ready
        WHERE {{ready_index}} AND (:channel IS NULL OR channel = :channel)
        UNION ALL
        SELECT created_at FROM denpyo_submissions INDEXED BY denpyo_submissions_in_doubt
        WHERE {{in_doubt_index}} AND (:channel IS NULL OR channel = :channel)
    ) AS pending
)
SELECT
    counted.ambiguous + held.expired AS in_doubt,
    counted.exhausted,
    counted.rejected_open,
    counted.failed_open + counted.rejected_open + held.expired_open AS needs_person,
    counted.pending,
    oldest.created_at AS oldest_pending,
    counted.resolved,
    strftime('%Y-%m-%d %H:%M:%f', 'now') AS now
FROM counted, held, oldest;

-- count_submissions_in_doubt_due: in-doubt rows of one channel that the reconciler would take now
SELECT COUNT(*) AS n FROM denpyo_submissions
WHERE channel = :channel
  AND next_attempt_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND {{in_doubt_index}}
  AND ({{in_doubt}});

-- list_submission_holdings: the rows held now under a live lease (being sent or verified), per channel and holder (the rows of one claim share theirs), with when the first and the last of their leases end, and the database clock; the lease that ends last first
SELECT channel, locked_by, COUNT(*) AS n, MIN(locked_until) AS first_end,
    MAX(locked_until) AS last_end, strftime('%Y-%m-%d %H:%M:%f', 'now') AS now
FROM denpyo_submissions INDEXED BY denpyo_submissions_in_doubt
WHERE {{in_doubt_index}}
  AND locked_until > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND (:channel IS NULL OR channel = :channel)
GROUP BY channel, locked_by
ORDER BY last_end DESC, channel, locked_by;

-- check_submission_ordering_waits: whether an earlier row of the channel and ordering key is still open (requesting, or failed and unresolved): an inline submit leaves its row to the worker's claim, which sends them in order
SELECT EXISTS (
    SELECT 1 FROM denpyo_submissions h
    WHERE h.channel = :channel AND h.ordering_key = :ordering_key AND h.id < :id
      AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL) AS waits;

-- find_submission_superseding: the resend that replaced a submission, if any
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE supersedes = :id ORDER BY id LIMIT 1;

-- get_submissions_by_idempotency_keys: the rows of a list of idempotency keys (keys: a JSON array; the audit's batch of the provider's records)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE idempotency_key IN (SELECT value FROM json_each(:keys));

-- list_submissions_synced: one page of a channel's synced rows, synced in [after_at, until), in (synced_at, id) order after the cursor (after_at, after_id) (the audit)
SELECT *, 0 AS in_doubt FROM denpyo_submissions
WHERE channel = :channel AND status = 'synced'
  AND synced_at >= :after_at AND synced_at < :until
  AND (synced_at > :after_at OR id > :after_id)
ORDER BY synced_at, id
LIMIT :limit;

-- lock_submission_renew: which of a list of rows one holder still holds (ids: a JSON array)
SELECT id FROM denpyo_submissions
WHERE id IN (SELECT value FROM json_each(:ids)) AND locked_by = :locked_by
  AND status IN ('requesting', 'failed');

-- renew_submissions: extend the leases of rows found still held (ids: a JSON array)
UPDATE denpyo_submissions SET
    locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds')
WHERE id IN (SELECT value FROM json_each(:ids));

-- list_submissions_removable: one batch of rows that retention lets go, oldest first: synced, and rejected or failed rows a person resolved, each older than its state's age (NULL: kept)
SELECT *, 0 AS in_doubt FROM denpyo_submissions
WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :youngest || ' seconds')
  AND {{removable}}
ORDER BY created_at
LIMIT :limit;

-- count_submissions_removable: how many rows retention lets go now, per channel and status (a prune's or an archive's dry run)
SELECT channel, status, COUNT(*) AS n FROM denpyo_submissions
WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :youngest || ' seconds')
  AND {{removable}}
GROUP BY channel, status
ORDER BY channel, status;

-- remember_keys: what the rows about to be removed leave behind, one row per key: their outcome, and the resend that replaced each (ids: a JSON array)
INSERT INTO denpyo_keys (
    channel, key, idempotency_key, submission_id, status, attempts, error_kind, remote_id,
    resolution, supersedes, superseded_by, created_at, synced_at, archived_to
)
SELECT s.channel, s.key, s.idempotency_key, s.id, s.status, s.attempts, s.error_kind,
       s.remote_id, s.resolution, s.supersedes,
       COALESCE((SELECT MIN(n.id) FROM denpyo_submissions n WHERE n.supersedes = s.id),
                (SELECT MIN(k.submission_id) FROM denpyo_keys k WHERE k.supersedes = s.id)),
       s.created_at, s.synced_at, :archived_to
FROM denpyo_submissions s
WHERE s.id IN (SELECT value FROM json_each(:ids))
  AND {{removable s}}
ON CONFLICT (channel, key) DO UPDATE SET
    status = excluded.status, attempts = excluded.attempts, error_kind = excluded.error_kind,
    remote_id = excluded.remote_id, resolution = excluded.resolution,
    superseded_by = excluded.superseded_by, synced_at = excluded.synced_at,
    archived_to = excluded.archived_to;

-- add_removed_counts: the rows about to be removed, added to the counts kept per day of creation, channel, status and error kind (ids: a JSON array)
INSERT INTO denpyo_removed_counts (day, channel, status, error_kind, n)
SELECT substr(created_at, 1, 10), channel, status, COALESCE(error_kind, ''), COUNT(*)
FROM denpyo_submissions
WHERE id IN (SELECT value FROM json_each(:ids))
  AND {{removable}}
GROUP BY 1, 2, 3, 4
ON CONFLICT (day, channel, status, error_kind) DO UPDATE SET n = n + excluded.n;

-- remove_events: the history of the rows about to be removed (ids: a JSON array)
DELETE FROM denpyo_events WHERE submission_id IN (
    SELECT id FROM denpyo_submissions
    WHERE id IN (SELECT value FROM json_each(:ids)) AND {{removable}});

-- remove_submissions: the rows, once their keys, counts and history are taken care of (ids: a JSON array)
DELETE FROM denpyo_submissions
WHERE id IN (SELECT value FROM json_each(:ids)) AND {{removable}}
RETURNING id;

-- expire_keys: one batch of remembered keys whose rows were created before the cutoff (keys_kept_for)
DELETE FROM denpyo_keys WHERE (channel, key) IN (
    SELECT channel, key FROM denpyo_keys
    WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :older_than || ' seconds')
    LIMIT :limit)
RETURNING submission_id;

-- mark_key_resent: a person resent a removed row as :new_id: its memory records the resolution and the new row (nothing when it was resent already, or its payload forgotten)
UPDATE denpyo_keys SET resolution = :resolution, superseded_by = :new_id
WHERE submission_id = :id AND superseded_by IS NULL AND forgotten_at IS NULL;

-- get_key: a removed row's key and outcome, by channel and business key
SELECT * FROM denpyo_keys WHERE channel = :channel AND key = :key;

-- get_key_by_id: a removed row's key and outcome, by the row's id
SELECT * FROM denpyo_keys WHERE submission_id = :id;

-- find_key_superseding: the removed resend that replaced a submission, if any
SELECT * FROM denpyo_keys WHERE supersedes = :id ORDER BY submission_id LIMIT 1;

-- get_keys_by_idempotency_keys: removed rows of a list of idempotency keys (keys: a JSON array; the audit)
SELECT * FROM denpyo_keys WHERE idempotency_key IN (SELECT value FROM json_each(:keys));

-- count_report: rows per day of creation, channel, status and error kind in [since, until) (days, text): the live rows where they stand now, and the removed ones as they were counted when they went
SELECT day, channel, status, error_kind, SUM(n) AS n FROM (
    SELECT substr(created_at, 1, 10) AS day, channel, status,
           COALESCE(error_kind, '') AS error_kind, COUNT(*) AS n
    FROM denpyo_submissions
    WHERE created_at >= :since AND created_at < :until
      AND (:channel IS NULL OR channel = :channel)
    GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT day, channel, status, error_kind, n FROM denpyo_removed_counts
    WHERE day >= :since AND day < :until AND (:channel IS NULL OR channel = :channel)
)
GROUP BY day, channel, status, error_kind
ORDER BY day, channel, status, error_kind;

-- The dashboard's reads: each bounded, and served by an index (schema 6).

-- get_submission_last_id: the newest submission's id, where the first page of the list starts
SELECT COALESCE(MAX(id), 0) AS id FROM denpyo_submissions;

-- list_submission_page: one page of the list, newest first: rows matching an operator's filter among the ids from :floor up to (not including) :before, read by primary key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id < :before AND id >= :floor
  AND {{list_filter}}
ORDER BY id DESC
LIMIT :limit;

-- search_submissions: rows of one channel whose key starts with :prefix, in key order after :after (the unique index on channel and key, at most :scan entries read)
SELECT s.*,
    {{in_doubt s}} AS in_doubt
FROM (SELECT id FROM denpyo_submissions
      WHERE channel = :channel AND key >= :prefix AND (:after IS NULL OR key > :after)
      ORDER BY key LIMIT :scan) AS k
JOIN denpyo_submissions s ON s.id = k.id
WHERE substr(s.key, 1, length(:prefix)) = :prefix
ORDER BY s.key
LIMIT :limit;

-- list_submission_needs_person_page: the needs-a-person queue below id :before, newest first: unresolved rows waiting for a person (index denpyo_submissions_attention), and rows whose lease ran out (index denpyo_submissions_in_doubt)
-- INDEXED BY: without statistics SQLite prefers the status index, which holds every
-- rejected and failed row ever recorded; the partial indexes hold only the queue.
SELECT * FROM (
    SELECT *,
        {{in_doubt}} AS in_doubt
    FROM denpyo_submissions INDEXED BY denpyo_submissions_attention
    WHERE {{attention_index}} AND id < :before
    ORDER BY id DESC LIMIT :limit) AS waiting
UNION ALL
SELECT * FROM (
    SELECT *, 1 AS in_doubt
    FROM denpyo_submissions INDEXED BY denpyo_submissions_in_doubt
    WHERE {{in_doubt_index}}
      AND status = 'requesting' AND locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now')
      AND resolution IS NULL AND id < :before
    ORDER BY id DESC LIMIT :limit) AS expired
ORDER BY id DESC
LIMIT :limit;

-- find_submission_next_channel: the first channel after :after that has rows, one probe of an index led by channel (called once per channel: a loose index scan, which a recursive query did not give on MariaDB)
SELECT channel FROM denpyo_submissions WHERE channel > :after ORDER BY channel LIMIT 1;

-- lock_outcome_fold: where the fold of events into outcomes per minute stopped (BEGIN IMMEDIATE holds the write lock)
SELECT last_event_id FROM denpyo_outcome_cursor WHERE id = 1;

-- find_outcome_fold_upto: the last event of the next batch to fold, among events older than :lag seconds (a younger one may belong to a transaction not yet committed)
SELECT MAX(id) AS upto FROM (
    SELECT id FROM denpyo_events
    WHERE id > :after AND at <= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :lag || ' seconds')
    ORDER BY id LIMIT :limit) AS batch;

-- add_outcome_fold: add a batch of events to the outcomes per minute: each call that ended (a settle, or a verify that found a call its sender never settled at the provider) once as `sent` and once by the status it reached
INSERT INTO denpyo_outcome_minutes (minute, channel, outcome, n)
SELECT ended.minute, ended.channel,
       CASE WHEN counted.sent THEN 'sent' ELSE ended.status END, COUNT(*)
FROM (SELECT substr(e.at, 1, 16) || ':00.000' AS minute, s.channel, e.to_status AS status
      FROM denpyo_events e JOIN denpyo_submissions s ON s.id = e.submission_id
      WHERE e.id > :after AND e.id <= :upto
        AND (e.kind = 'settle'
             OR (e.kind = 'verify' AND e.from_status = 'requesting'
                 AND e.to_status = 'synced'))) AS ended
CROSS JOIN (SELECT 1 AS sent UNION ALL SELECT 0) AS counted
GROUP BY 1, 2, 3
ON CONFLICT (minute, channel, outcome) DO UPDATE SET n = n + excluded.n;

-- advance_outcome_fold: record where the fold stopped
UPDATE denpyo_outcome_cursor SET last_event_id = :upto WHERE id = 1;

-- trim_outcome_fold: forget minutes older than 25 hours
DELETE FROM denpyo_outcome_minutes
WHERE minute < strftime('%Y-%m-%d %H:%M:%f', 'now', '-25 hours');

-- count_outcomes_per_minute: outcomes per minute since :hours ago (optionally one channel)
SELECT minute, outcome, SUM(n) AS n FROM denpyo_outcome_minutes
WHERE minute >= strftime('%Y-%m-%d %H:%M:00.000', 'now', '-' || :hours || ' hours')
  AND (:channel IS NULL OR channel = :channel)
GROUP BY minute, outcome
ORDER BY minute, outcome;

-- What the fleet shares about each channel (store/controls.py): read once per poll,
-- written when something happens. A channel's row is made by its first write.

-- ensure_channel: the channel's row, made if missing (active, no history)
INSERT OR IGNORE INTO denpyo_channels (channel) VALUES (:channel);

-- list_channels: every channel's state, and the database clock it was read by
SELECT *, strftime('%Y-%m-%d %H:%M:%f', 'now') AS now FROM denpyo_channels ORDER BY channel;

-- lock_channel: the fleet rate limit's next start of one channel, and the database clock (BEGIN IMMEDIATE holds the write lock: a claim or reservation of a fleet limit at a time)
SELECT next_start, strftime('%Y-%m-%d %H:%M:%f', 'now') AS now FROM denpyo_channels
WHERE channel = :channel;

-- start_channel_after: the fleet rate limit's clock moved on: no call of the channel starts before :at but those reserved
UPDATE denpyo_channels SET next_start = :at WHERE channel = :channel;

-- count_channel_held: the channel's rows held now under a live lease, by any worker (the fleet's calls in flight, and the rows claimed to start next)
SELECT COUNT(*) AS n FROM denpyo_submissions INDEXED BY denpyo_submissions_in_doubt
WHERE channel = :channel AND {{in_doubt_index}} AND status = 'requesting'
  AND locked_until > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- pause_channel: a person pauses the channel (nothing when it is paused already)
UPDATE denpyo_channels SET paused_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    paused_by = :actor, paused_note = :note,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND paused_at IS NULL;

-- resume_channel: a person resumes the channel (nothing when it is not paused)
UPDATE denpyo_channels SET paused_at = NULL, paused_by = NULL, paused_note = NULL,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND paused_at IS NOT NULL;

-- throttle_channel: the provider asked the channel to wait :seconds (a Retry-After): no call starts before then, unless a longer wait is already asked
UPDATE denpyo_channels
SET throttled_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :seconds || ' seconds'),
    throttled_note = :note, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel
  AND (throttled_until IS NULL
       OR throttled_until < strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :seconds || ' seconds'));

-- mark_channel_down: the provider is down: one probe call in :seconds (nothing when it is down already)
UPDATE denpyo_channels SET down_since = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    probe_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :seconds || ' seconds'),
    down_note = :note, probe_every = :seconds, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND down_since IS NULL;

-- probe_channel: take the next probe call of a channel that is down, if it is due; the one after it waits :seconds (nothing when another took it)
UPDATE denpyo_channels
SET probe_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :seconds || ' seconds'),
    probe_every = :seconds, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND down_since IS NOT NULL
  AND probe_at <= strftime('%Y-%m-%d %H:%M:%f', 'now');

-- mark_channel_up: a call succeeded: the provider is up again (nothing when it was not down)
UPDATE denpyo_channels SET down_since = NULL, down_note = NULL, probe_at = NULL, probe_every = NULL,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND down_since IS NOT NULL;

-- add_channel_event: one line of a channel's history
INSERT INTO denpyo_channel_events (channel, kind, actor, note)
VALUES (:channel, :kind, :actor, :note);

-- list_channel_events: a channel's history, newest first
SELECT * FROM denpyo_channel_events WHERE channel = :channel
ORDER BY id DESC LIMIT :limit;

-- add_action: one entry of the action log (a person's action, a request waiting for a second person, or a bulk action), its id
INSERT INTO denpyo_actions (
    kind, scope, target, params, plan, state, actor, note, lapses_at, total, locked_by, locked_until
)
VALUES (
    :kind, :scope, :target, :params, :plan, :state, :actor, :note,
    CASE WHEN :lapses_in IS NULL THEN NULL
         ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lapses_in || ' seconds') END,
    :total, :holder,
    CASE WHEN :holder IS NULL THEN NULL
         ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds') END
)
RETURNING id;

-- add_action_row: one row behind an action
INSERT INTO denpyo_action_rows (action_id, submission_id) VALUES (:action_id, :submission_id);

-- freeze_action_rows: every row an operator's filter finds now, behind an action (a bulk action's set, frozen as its ids)
INSERT INTO denpyo_action_rows (action_id, submission_id)
SELECT :action_id, id FROM denpyo_submissions WHERE {{list_filter}};

-- total_action: an action counts the rows behind it
UPDATE denpyo_actions
SET total = (SELECT COUNT(*) FROM denpyo_action_rows WHERE action_id = :id)
WHERE id = :id;

-- get_action: one action, and the database clock
SELECT *, strftime('%Y-%m-%d %H:%M:%f', 'now') AS now FROM denpyo_actions WHERE id = :id;

-- list_actions: the action log, newest first: by person (whatever the case of the name), kind, state and time (each optional)
SELECT *, strftime('%Y-%m-%d %H:%M:%f', 'now') AS now FROM denpyo_actions
WHERE id < :before
  AND (:actor IS NULL OR LOWER(actor) = LOWER(:actor))
  AND (:kind IS NULL OR kind = :kind)
  AND (:state IS NULL OR state = :state)
  AND (:since IS NULL OR created_at >= strftime('%Y-%m-%d %H:%M:%f', :since))
  AND (:until IS NULL OR created_at < strftime('%Y-%m-%d %H:%M:%f', :until))
ORDER BY id DESC
LIMIT :limit;

-- count_action_rows_pending: the next rows of an action not yet done nor skipped, in id order from :after
SELECT submission_id FROM denpyo_action_rows
WHERE action_id = :id AND submission_id > :after AND outcome IS NULL
ORDER BY submission_id
LIMIT :limit;

-- get_action_rows_of_batch: the rows of an action's batch, :first to :last, not yet done nor skipped
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id IN (SELECT submission_id FROM denpyo_action_rows
             WHERE action_id = :id AND submission_id BETWEEN :first AND :last
               AND outcome IS NULL);

-- list_action_rows: the rows behind an action and what happened to each, in id order from :after (:outcome 'pending' for those not yet done)
SELECT * FROM denpyo_action_rows
WHERE action_id = :id AND submission_id > :after
  AND (:outcome IS NULL OR outcome = :outcome OR (:outcome = 'pending' AND outcome IS NULL))
ORDER BY submission_id
LIMIT :limit;

-- set_action_row_outcome: what an action did to one of its rows (nothing when it was recorded already)
UPDATE denpyo_action_rows SET outcome = :outcome, reason = :reason
WHERE action_id = :action_id AND submission_id = :submission_id AND outcome IS NULL;

-- progress_action: a batch of an action's rows is done, under the holder's lease (nothing when the action was paused, cancelled or taken over: the batch rolls back); done when no row is left
UPDATE denpyo_actions
SET state = CASE WHEN total <= done + :done + skipped + :skipped THEN 'done' ELSE state END,
    finished_at = CASE WHEN total <= done + :done + skipped + :skipped
                       THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE NULL END,
    done = done + :done, skipped = skipped + :skipped,
    locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND locked_by = :holder AND state = 'in_progress';

-- take_action: become an action's holder: an action in progress nobody carries out (no locked_by, or its lease ran out)
UPDATE denpyo_actions
SET locked_by = :holder,
    locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND state = 'in_progress'
  AND (locked_by IS NULL OR locked_by = :holder
       OR locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now'));

-- let_go_action: the holder stops carrying out the action (it stays as it is for the next)
UPDATE denpyo_actions SET locked_by = NULL, locked_until = NULL
WHERE id = :id AND locked_by = :holder;

-- move_action: a person pauses, resumes or cancels an action, or an approved request starts (:from1 to :from4: the states it may leave)
UPDATE denpyo_actions
SET state = :state,
    finished_at = CASE WHEN :state IN ('cancelled', 'done')
                       THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE finished_at END,
    locked_by = NULL, locked_until = NULL,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND state IN (:from1, :from2, :from3, :from4);

-- decide_action: a second person approves (state in_progress) or declines a request: never the one who asked, and not once it lapsed
UPDATE denpyo_actions
SET state = :state, approver = :approver, decision_note = :note,
    decided_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    finished_at = CASE WHEN :state = 'declined'
                       THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE NULL END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND state = 'awaiting_approval' AND actor <> :approver
  AND (lapses_at IS NULL OR lapses_at > strftime('%Y-%m-%d %H:%M:%f', 'now'));

-- lapse_actions: requests nobody decided in time
UPDATE denpyo_actions
SET state = 'lapsed', finished_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE state = 'awaiting_approval' AND lapses_at <= strftime('%Y-%m-%d %H:%M:%f', 'now');

-- set_action_plan: a dry run's counts and samples, and the state it leaves the action in (from planned: awaiting_approval or in_progress)
UPDATE denpyo_actions
SET plan = :plan, state = :state, approver = NULL,
    lapses_at = CASE WHEN :lapses_in IS NULL THEN lapses_at
                      ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lapses_in || ' seconds') END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND state = :from_state;

-- analyze_action_rows: the rows behind the actions counted again after a bulk action froze its rows; nothing to do: the table is read in key order (WITHOUT ROWID)
SELECT 1;

-- add_action_row_done: one row behind an action, with what happened to it (an action carried out in its own transaction)
INSERT INTO denpyo_action_rows (action_id, submission_id, outcome, reason)
VALUES (:action_id, :submission_id, :outcome, :reason);

-- count_action_done: an action carried out in one transaction: its counts, and done
UPDATE denpyo_actions
SET total = :total, done = :done, skipped = :skipped, state = 'done',
    finished_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id;

-- Forgetting (`denpyo forget`, store/forgetting.py): a person erases the payloads of
-- closed rows and every text quoting them; the slip (status, attempts, times, ids,
-- remote id, the history of moves) stays. A person's rare errand: the searches read
-- the table by primary key, a page at a time, and no index is kept for them.

-- match_forget_page: one page of live rows after id :after, in id order, whose payload has the string :value at :json_path (a JSON path built from checked names, each quoted), of one channel or all
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > :after AND (:channel IS NULL OR channel = :channel)
  AND json_type(payload, :json_path) = 'text'
  AND json_extract(payload, :json_path) = :value
ORDER BY id
LIMIT :limit;

-- list_forget_sealed_page: one page of live rows after id :after, in id order, whose payload is encrypted (its one key `denpyo:sealed`, at :sealed_path), of one channel or all: read as every row is, and matched one by one
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > :after AND (:channel IS NULL OR channel = :channel)
  AND json_type(payload, :sealed_path) IS NOT NULL
ORDER BY id
LIMIT :limit;

-- lock_forget: a batch's rows as they are now (ids: a JSON array; BEGIN IMMEDIATE holds the write lock)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id IN (SELECT value FROM json_each(:ids));

-- forget_payload: erase a closed row's payload (JSON null) and last error, its resolution replaced; nothing when it is open again (requesting, due, or held) or forgotten already. Its status, counts and times stay
UPDATE denpyo_submissions
SET payload = 'null', last_error = NULL, resolution = :resolution,
    forgotten_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND forgotten_at IS NULL
  AND status <> 'requesting' AND next_attempt_at IS NULL
  AND (locked_until IS NULL OR locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now'));

-- add_forget_event: the `forgotten` line of a row's history: who, and the person's note (no move: its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (:submission_id, 'forgotten', :status, :status, :attempt, :actor, :detail);

-- list_forget_event_details: the details of a batch's histories (ids: a JSON array), to be replaced
SELECT id, submission_id, detail FROM denpyo_events
WHERE submission_id IN (SELECT value FROM json_each(:ids)) AND detail IS NOT NULL;

-- scrub_forget_events: one event's detail, replaced
UPDATE denpyo_events SET detail = :detail WHERE submission_id = :submission_id AND id = :id;

-- list_forget_action_texts: the texts of the actions on a batch's rows (ids: a JSON array) but the forget's own (:action_id); the action rows found by the row (index denpyo_action_rows_by_row)
SELECT id, kind, note, decision_note, params, plan FROM denpyo_actions
WHERE id <> :action_id
  AND id IN (SELECT action_id FROM denpyo_action_rows
             WHERE submission_id IN (SELECT value FROM json_each(:ids)));

-- scrub_forget_actions: one action's texts, replaced
UPDATE denpyo_actions
SET note = :note, decision_note = :decision_note, params = :params, plan = :plan
WHERE id = :id;

-- list_forget_action_reasons: why actions skipped a batch's rows (ids: a JSON array), to be replaced
SELECT action_id, submission_id, reason FROM denpyo_action_rows
WHERE submission_id IN (SELECT value FROM json_each(:ids)) AND reason IS NOT NULL;

-- scrub_forget_action_reasons: why an action skipped one row, replaced
UPDATE denpyo_action_rows SET reason = :reason
WHERE action_id = :action_id AND submission_id = :submission_id;

-- forget_key: a removed row's memory forgotten now (its archive rewritten first), its resolution replaced; nothing when it was forgotten already
UPDATE denpyo_keys
SET forgotten_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), resolution = :resolution
WHERE submission_id = :id AND removed_at IS NOT NULL AND forgotten_at IS NULL;

-- list_forget_archives: where removed rows were archived, of one channel or all: the archives a search by a payload's field reads
SELECT DISTINCT archived_to FROM denpyo_keys
WHERE archived_to IS NOT NULL AND (:channel IS NULL OR channel = :channel)
ORDER BY archived_to;

-- find_forget_pruned: whether a row (of one channel or all) was pruned and not forgotten: a search by a payload's field cannot find it
SELECT 1 AS pruned FROM denpyo_keys
WHERE archived_to IS NULL AND forgotten_at IS NULL AND (:channel IS NULL OR channel = :channel)
LIMIT 1;

-- find_forget_action_of: the latest forget that erased a row's payload (who, when, why: a removed row has no history left)
SELECT a.* FROM denpyo_actions a
JOIN denpyo_action_rows r ON r.action_id = a.id
WHERE r.submission_id = :id AND a.kind = 'forget' AND r.outcome = 'done'
ORDER BY a.id DESC
LIMIT 1;

-- find_forgotten_among: which of a batch's rows (ids: a JSON array) are forgotten: a person's action that raced a forget rolls back
SELECT id FROM denpyo_submissions
WHERE id IN (SELECT value FROM json_each(:ids)) AND forgotten_at IS NOT NULL;

-- Payload keys (store/payload_keys.py): `rotate-key` re-encrypts every payload with the
-- current key, a batch at a time; only the payload column changes.

-- list_payload_batch: the next rows after an id, in id order (of one channel, or all), whose payload is kept (not forgotten), with the payload as stored
SELECT id, channel, key, payload FROM denpyo_submissions
WHERE id > :after AND (:channel IS NULL OR channel = :channel) AND forgotten_at IS NULL
ORDER BY id
LIMIT :limit;

-- lock_payload: which of a batch's rows (ids: a JSON array) this transaction may rewrite: all that are still there (BEGIN IMMEDIATE holds the write lock already)
SELECT id FROM denpyo_submissions WHERE id IN (SELECT value FROM json_each(:ids));

-- make_payload_due_now: the rows of a channel given back unsent for want of a payload key that is configured now (their last error begins as :pattern says), due now; the ready rows' index, not the table
UPDATE denpyo_submissions SET next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE channel = :channel AND status = 'requesting' AND locked_until IS NULL
  AND next_attempt_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND resolution IS NULL AND last_error LIKE :pattern;

-- reseal_payload: a row's payload re-encrypted, if it is still the one read (compare-and-set)
UPDATE denpyo_submissions SET payload = :new WHERE id = :id AND payload = :old;

-- The providers' webhooks (store/provider_events.py): each event recorded once, with
-- the row it named (NULL: none, which the audit lists).

-- insert_provider_event: record one provider's event (nothing when (provider, event_id) was recorded already: a second delivery)
INSERT INTO denpyo_provider_events
    (provider, event_id, kind, submission_id, idempotency_key, remote_id, detail)
VALUES (:provider, :event_id, :kind, :submission_id, :idempotency_key, :remote_id, :detail)
ON CONFLICT (provider, event_id) DO NOTHING;

-- list_provider_event_history: the line a provider's event adds to the history of a row it does not move (its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (:submission_id, 'provider', :status, :status, :attempt, :actor, :detail);

-- find_provider_event_unknown: the events received in [since, until) that named no row, oldest first (index denpyo_provider_events_unknown)
SELECT * FROM denpyo_provider_events
WHERE submission_id IS NULL AND received_at >= :since AND received_at < :until
ORDER BY received_at, id LIMIT :limit;

-- list_provider_events: the events that named one row, oldest first
SELECT * FROM denpyo_provider_events WHERE submission_id = :submission_id ORDER BY id;

-- get_submission_by_remote_id: the newest row that recorded a provider's id (index denpyo_submissions_remote_id)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE remote_id = :remote_id ORDER BY id DESC LIMIT 1;

-- forget_provider_events: the details of a batch's provider events replaced (ids: a JSON array)
UPDATE denpyo_provider_events SET detail = :detail
WHERE submission_id IN (SELECT value FROM json_each(:ids)) AND detail IS NOT NULL;
