-- Named queries for MariaDB (10.6 or later). Each query starts with a line `-- name: what it does`.
-- Times come from the database clock, UTC_TIMESTAMP(6), which is fixed for one statement;
-- a lease of N seconds is UTC_TIMESTAMP(6) + INTERVAL ROUND(N * 1000000) MICROSECOND, and
-- NULL seconds give NULL. Claims skip rows other workers hold (FOR UPDATE SKIP LOCKED).
-- Parameters are PyMySQL's %(name)s, so a literal percent sign must be written %%.
-- `key` is a reserved word in MariaDB: always quoted.
--
-- MariaDB has no ON CONFLICT and no UPDATE ... RETURNING (store/portable.py writes with
-- what it has): insert_submission is an INSERT ... SELECT ... RETURNING, which returns no
-- row for a remembered key, and whose error 1062 on denpyo_submissions_channel_key
-- MysqlTx.insert reads as "no row" too; move_submission is the UPDATE alone, whose
-- matched-row count (the FOUND_ROWS flag) says whether it won.

-- @removable: retention lets the row go: synced, or rejected or failed and resolved by a person, created longer ago than its state's age (synced, rejected, abandoned seconds; NULL: kept)
(($.status = 'synced' AND %(synced)s IS NOT NULL
      AND $.created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(synced)s * 1000000) MICROSECOND)
  OR ($.status = 'rejected' AND $.resolution IS NOT NULL AND %(rejected)s IS NOT NULL
      AND $.created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(rejected)s * 1000000) MICROSECOND)
  OR ($.status = 'failed' AND $.resolution IS NOT NULL AND $.next_attempt_at IS NULL
      AND %(abandoned)s IS NOT NULL
      AND $.created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(abandoned)s * 1000000) MICROSECOND))

-- @in_doubt: the call may or may not have arrived: `requesting` with its lease run out, or an ambiguous failure
($.status = 'requesting' AND $.locked_until <= UTC_TIMESTAMP(6))
OR ($.status = 'failed' AND $.error_kind = 'ambiguous')

-- @needs_person: in doubt, exhausted (`failed` with no next attempt) or rejected, and not resolved
$.resolution IS NULL
AND (($.status = 'requesting' AND $.locked_until <= UTC_TIMESTAMP(6))
     OR ($.status = 'failed' AND ($.error_kind = 'ambiguous' OR $.next_attempt_at IS NULL))
     OR $.status = 'rejected')

-- @list_filter: an operator's filter (domain/filters.py), each optional condition written (param IS NULL OR condition) so that every value stays a bound parameter; `since` and `until` arrive as ISO text with a UTC offset, which MariaDB's CAST ignores, so CONVERT_TZ applies it; LENGTH counts bytes, so the key prefix is measured with CHAR_LENGTH
(%(all_statuses)s OR $.status IN (%(status0)s, %(status1)s, %(status2)s, %(status3)s))
AND (%(channel)s IS NULL OR $.channel = %(channel)s)
AND (%(since)s IS NULL OR $.created_at >= CONVERT_TZ(
      CAST(LEFT(%(since)s, CHAR_LENGTH(%(since)s) - 6) AS DATETIME(6)),
      RIGHT(%(since)s, 6), '+00:00'))
AND (%(until)s IS NULL OR $.created_at < CONVERT_TZ(
      CAST(LEFT(%(until)s, CHAR_LENGTH(%(until)s) - 6) AS DATETIME(6)),
      RIGHT(%(until)s, 6), '+00:00'))
AND (%(key_prefix)s IS NULL OR LEFT($.`key`, CHAR_LENGTH(%(key_prefix)s)) = %(key_prefix)s)
AND (%(error_text)s IS NULL OR LOCATE(%(error_text)s, $.last_error) > 0)
AND (%(in_doubt)s IS NULL OR %(in_doubt)s = CASE WHEN {{in_doubt}} THEN 1 ELSE 0 END)
AND (%(needs_person)s IS NULL
     OR %(needs_person)s = CASE WHEN {{needs_person}} THEN 1 ELSE 0 END)
AND (%(resolved)s IS NULL OR %(resolved)s = CASE WHEN $.resolution IS NULL THEN 0 ELSE 1 END)

-- create_schema_version: the table that records which migrations ran
CREATE TABLE IF NOT EXISTS denpyo_schema_version (
    version    INT         NOT NULL PRIMARY KEY,
    applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- get_schema_version: the newest migration applied
SELECT COALESCE(MAX(version), 0) AS version FROM denpyo_schema_version;

-- add_schema_version: record one applied migration
INSERT INTO denpyo_schema_version (version) VALUES (%(version)s);

-- lock_schema: serialise migrations of this database; a session lock, as DDL commits (MysqlStore.migrate ends the session)
-- A lock's name is the server's: it carries the database's (cut to the 64 characters a name may have).
SELECT GET_LOCK(LEFT(CONCAT('denpyo_migrate:', DATABASE()), 64), 60) AS locked;

-- unlock_schema: release lock_schema while the session goes on (Django keeps its connection)
SELECT RELEASE_LOCK(LEFT(CONCAT('denpyo_migrate:', DATABASE()), 64)) AS released;

-- get_database_identity: which database this connection works in: the schema in use, the server's host name and port
SELECT DATABASE() AS `database`, @@hostname AS host, @@port AS port;

-- read_clock: the database clock
SELECT UTC_TIMESTAMP(6) AS now;

-- insert_submission: record a new submission, back what the statement computed (its id and times); error 1062 (read as nothing) when (channel, key) exists, and no row when it existed and is remembered (denpyo_keys)
-- A remembered key's row may be gone: the unique index no longer stops the insert, the
-- NOT EXISTS does. The removal deletes a row only once every transaction that began
-- before its key was committed has ended (MysqlStore.remove_in): whatever view of
-- denpyo_keys this statement reads, either it sees the key or the row is still there.
-- traceparent, tracestate: the W3C trace context the row was written in (NULL: none).
INSERT INTO denpyo_submissions (
    channel, `key`, idempotency_key, payload, status, attempts, ordering_key, supersedes,
    locked_by, locked_until, next_attempt_at, traceparent, tracestate
)
SELECT
    %(channel)s, %(key)s, %(idempotency_key)s, %(payload)s, 'requesting', 0,
    %(ordering_key)s, %(supersedes)s, %(locked_by)s,
    UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND,
    UTC_TIMESTAMP(6) + INTERVAL ROUND(COALESCE(%(lease)s, 0) * 1000000) MICROSECOND,
    %(traceparent)s, %(tracestate)s
FROM DUAL
WHERE NOT EXISTS (SELECT 1 FROM denpyo_keys WHERE channel = %(channel)s AND `key` = %(key)s)
RETURNING id, created_at, updated_at, locked_until, next_attempt_at;

-- get_submission: one submission by id
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id = %(id)s;

-- get_submissions_many: submissions by id (the rows a batch of moves changed)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id IN %(ids)s;

-- get_submission_by_key: one submission by channel and business key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = %(channel)s AND `key` = %(key)s;

-- get_submission_existing: the row an insert found in its way, by channel and business key
-- A locking read: on a caller's connection the transaction may be REPEATABLE READ, whose
-- plain reads see the snapshot of its first read and would miss a row that another
-- process committed since; a locking read sees the latest version, and takes no new
-- lock (the failed INSERT holds a shared lock on that row already).
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = %(channel)s AND `key` = %(key)s
LOCK IN SHARE MODE;

-- find_submissions_ready: due rows of one channel that a sender may attempt now
-- FORCE INDEX: InnoDB locks the rows a locking read *reads*, before any sort and LIMIT.
-- Walking the due index in ORDER BY order stops after LIMIT rows; a plan with a table
-- scan and a filesort (which stale statistics on a young table can choose) would lock
-- every due row of the channel, and a second worker would skip them all and find nothing.
-- The subquery is a plain (not locking) read of the ordering index; the status is in that
-- index, so settled rows of the same ordering key are passed over without reading them.
SELECT s.id, s.status FROM denpyo_submissions s FORCE INDEX (denpyo_submissions_due)
WHERE s.channel = %(channel)s
  AND s.next_attempt_at <= UTC_TIMESTAMP(6)
  AND ((s.status = 'requesting' AND s.locked_until IS NULL)
       OR (s.status = 'failed' AND s.error_kind = 'transient'))
  AND s.resolution IS NULL
  AND (s.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM denpyo_submissions h FORCE INDEX (denpyo_submissions_ordering)
        WHERE h.channel = s.channel AND h.ordering_key = s.ordering_key AND h.id < s.id
          AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL))
ORDER BY s.next_attempt_at, s.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- find_submissions_in_doubt: due in-doubt rows of one channel (lease run out, or ambiguous failure)
SELECT s.id, s.status FROM denpyo_submissions s FORCE INDEX (denpyo_submissions_due)
WHERE s.channel = %(channel)s
  AND s.next_attempt_at <= UTC_TIMESTAMP(6)
  AND ({{in_doubt s}})
  AND s.resolution IS NULL
ORDER BY s.next_attempt_at, s.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- move_submission: compare-and-set one row from its expected status and holder (read back with get_submissions_many); a row a person resolved takes only a move that resolves it again
-- MariaDB applies SET assignments left to right and a later one sees the new value of an
-- earlier column: so no assignment below reads a column that an earlier one sets.
UPDATE denpyo_submissions SET
    status = %(to_status)s,
    attempts = attempts + %(attempt_delta)s,
    locked_by = %(locked_by)s,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND,
    next_attempt_at = CASE
        WHEN %(lease)s > 0
            THEN UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND
        ELSE UTC_TIMESTAMP(6) + INTERVAL ROUND(%(retry_in)s * 1000000) MICROSECOND END,
    remote_id = COALESCE(%(remote_id)s, remote_id),
    last_error = CASE WHEN %(keep_error)s THEN last_error ELSE %(last_error)s END,
    error_kind = CASE WHEN %(keep_error)s THEN error_kind ELSE %(error_kind)s END,
    resolution = COALESCE(%(resolution)s, resolution),
    synced_at = CASE WHEN %(to_status)s = 'synced' THEN UTC_TIMESTAMP(6) ELSE synced_at END,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND status = %(from_status)s
  AND (locked_by <=> %(holder)s
       OR (%(holder)s IS NULL
           AND (locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))))
  AND (%(resolution)s IS NOT NULL OR resolution IS NULL);

-- settle_submission: end an attempt its holder still holds (`requesting` to how it ended, its call counted; read back with get_submissions_many)
UPDATE denpyo_submissions SET
    status = %(to_status)s,
    attempts = attempts + 1,
    locked_by = NULL,
    locked_until = NULL,
    next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(retry_in)s * 1000000) MICROSECOND,
    remote_id = COALESCE(%(remote_id)s, remote_id),
    last_error = %(last_error)s,
    error_kind = %(error_kind)s,
    synced_at = CASE WHEN %(to_status)s = 'synced' THEN UTC_TIMESTAMP(6) ELSE synced_at END,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND status = 'requesting' AND locked_by = %(holder)s;

-- insert_event: one line of a submission's history
INSERT INTO denpyo_events
    (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
VALUES (%(submission_id)s, %(kind)s, %(from_status)s, %(to_status)s, %(attempt)s, %(actor)s,
        %(detail)s, %(duration_ms)s);

-- insert_events_sent_inline: the created and first attempt events of a row an inline submit records, in one statement
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
VALUES (%(submission_id)s, 'created', NULL, 'requesting', 0, %(actor)s),
       (%(submission_id)s, 'attempt', 'requesting', 'requesting', 1, %(actor)s);

-- list_events: a submission's history, oldest first
SELECT * FROM denpyo_events WHERE submission_id = %(submission_id)s ORDER BY id;

-- list_events_many: the histories of many submissions (the archive's batch), oldest first
SELECT * FROM denpyo_events WHERE submission_id IN %(ids)s ORDER BY id;

-- list_submissions: submissions matching an operator's filter, newest first
-- Operator queries (CLI, dashboard) from here on. Each optional filter is
-- written as (param IS NULL OR condition): every value stays a bound parameter.
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE {{list_filter}}
ORDER BY id DESC
LIMIT %(limit)s;

-- count_submissions_by_status: how many rows each channel has in each status (from the running counts)
SELECT channel, status, SUM(n) AS n
FROM denpyo_status_counts
WHERE (%(channel)s IS NULL OR channel = %(channel)s)
GROUP BY channel, status
HAVING SUM(n) <> 0
ORDER BY channel, status;

-- count_submissions_needs_person: in-doubt, exhausted, open-rejected, needs-a-person and pending counts, the oldest pending row's creation, and the database clock
-- Reads the running counts (schema 8) and the rows waiting or in flight, never the
-- settled history: the same time at a thousand rows or ten million. The rows still
-- requesting come from the index on (status, created_at); the failed rows due again
-- from the claims' index on (channel, next_attempt_at), one range per channel, past
-- the NULLs of every settled row. The channels are named (:channels, the one asked
-- about or those of count_submission_channels): given a channel from a table instead,
-- MariaDB read all of its index entries (a million at a million rows, 120 ms).
SELECT
    counted.ambiguous + held.expired AS in_doubt,
    counted.exhausted,
    counted.rejected_open,
    counted.failed_open + counted.rejected_open + held.expired_open AS needs_person,
    counted.pending,
    oldest.created_at AS oldest_pending,
    counted.resolved,
    UTC_TIMESTAMP(6) AS now
FROM (
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
    WHERE (%(channel)s IS NULL OR channel = %(channel)s)
) AS counted,
(   -- rows being sent or verified, and those whose sender is gone
    SELECT COUNT(*) AS expired, COALESCE(SUM(resolution IS NULL), 0) AS expired_open
    FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
    WHERE status = 'requesting' AND locked_until <= UTC_TIMESTAMP(6)
      AND (%(channel)s IS NULL OR channel = %(channel)s)
) AS held,
(
    SELECT MIN(created_at) AS created_at FROM (
        SELECT MIN(created_at) AS created_at
        FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
        WHERE status = 'requesting' AND (%(channel)s IS NULL OR channel = %(channel)s)
        UNION ALL
        SELECT MIN(created_at)
        FROM denpyo_submissions FORCE INDEX (denpyo_submissions_due)
        WHERE channel IN %(channels)s AND next_attempt_at IS NOT NULL AND status = 'failed'
    ) AS pending
) AS oldest;

-- count_submission_channels: the channels the running counts know, for count_submissions_needs_person
SELECT DISTINCT channel FROM denpyo_status_counts;

-- count_submissions_in_doubt_due: in-doubt rows of one channel that the reconciler would take now
SELECT COUNT(*) AS n FROM denpyo_submissions
WHERE channel = %(channel)s
  AND next_attempt_at <= UTC_TIMESTAMP(6)
  AND ({{in_doubt}});

-- list_submission_holdings: the rows held now under a live lease (being sent or verified), per channel and holder (the rows of one claim share theirs), with when the first and the last of their leases end, and the database clock; the lease that ends last first
-- A held row is due when its lease ends (next_attempt_at = locked_until): the channels'
-- due index holds it among the rows due later, never the settled history.
SELECT channel, locked_by, COUNT(*) AS n, MIN(locked_until) AS first_end,
    MAX(locked_until) AS last_end, UTC_TIMESTAMP(6) AS now
FROM denpyo_submissions FORCE INDEX (denpyo_submissions_due)
WHERE channel IN %(channels)s AND next_attempt_at > UTC_TIMESTAMP(6)
  AND status IN ('requesting', 'failed') AND locked_until > UTC_TIMESTAMP(6)
GROUP BY channel, locked_by
ORDER BY last_end DESC, channel, locked_by;

-- check_submission_ordering_waits: whether an earlier row of the channel and ordering key is still open (requesting, or failed and unresolved): an inline submit leaves its row to the worker's claim, which sends them in order
SELECT EXISTS (
    SELECT 1 FROM denpyo_submissions h
    WHERE h.channel = %(channel)s AND h.ordering_key = %(ordering_key)s AND h.id < %(id)s
      AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL) AS waits;

-- find_submission_superseding: the resend that replaced a submission, if any
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE supersedes = %(id)s ORDER BY id LIMIT 1;

-- get_submissions_by_idempotency_keys: the rows of a list of idempotency keys (the audit's batch of the provider's records)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE idempotency_key IN %(keys)s;

-- list_submissions_synced: one page of a channel's synced rows, synced in [after_at, until), in (synced_at, id) order after the cursor (after_at, after_id) (the audit)
SELECT *, 0 AS in_doubt FROM denpyo_submissions
WHERE channel = %(channel)s AND status = 'synced'
  AND synced_at >= %(after_at)s AND synced_at < %(until)s
  AND (synced_at > %(after_at)s OR id > %(after_id)s)
ORDER BY synced_at, id
LIMIT %(limit)s;

-- lock_submission_renew: which of a list of rows one holder still holds; rows another transaction has locked (a settle in flight) are skipped, never waited for
SELECT id FROM denpyo_submissions
WHERE id IN %(ids)s AND locked_by = %(locked_by)s AND status IN ('requesting', 'failed')
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- renew_submissions: extend the leases of rows found still held (and locked by this transaction)
UPDATE denpyo_submissions SET
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND,
    next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND
WHERE id IN %(ids)s;

-- list_submissions_removable: one batch of rows that retention lets go, oldest first: synced, and rejected or failed rows a person resolved, each older than its state's age (NULL: kept)
-- One walk of the index on (status, created_at) per state, in order, each stopping after
-- :limit rows: a batch reads about :limit rows a state however long the history is (one
-- range over the three states read and sorted every old row: 0.2 s at 200,000 rows).
SELECT * FROM (
    (SELECT *, 0 AS in_doubt
     FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
     WHERE status = 'synced'
       AND created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(youngest)s * 1000000) MICROSECOND
       AND {{removable}}
     ORDER BY created_at LIMIT %(limit)s)
    UNION ALL
    (SELECT *, 0 AS in_doubt
     FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
     WHERE status = 'rejected'
       AND created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(youngest)s * 1000000) MICROSECOND
       AND {{removable}}
     ORDER BY created_at LIMIT %(limit)s)
    UNION ALL
    (SELECT *, 0 AS in_doubt
     FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
     WHERE status = 'failed'
       AND created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(youngest)s * 1000000) MICROSECOND
       AND {{removable}}
     ORDER BY created_at LIMIT %(limit)s)
) AS removable
ORDER BY created_at
LIMIT %(limit)s;

-- count_submissions_removable: how many rows retention lets go now, per channel and status (a prune's or an archive's dry run)
SELECT channel, status, COUNT(*) AS n FROM denpyo_submissions
WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(youngest)s * 1000000) MICROSECOND
  AND {{removable}}
GROUP BY channel, status
ORDER BY channel, status;

-- find_keys_remembered: which of a list of rows have their key remembered (MysqlStore.remove_in deletes no other)
SELECT submission_id AS id FROM denpyo_keys WHERE submission_id IN %(ids)s ORDER BY submission_id;

-- lock_submission_remove: which of a list of rows retention still lets go, locked until the removal's commit (MysqlStore.remove_in: the same rows for each of its statements)
SELECT id FROM denpyo_submissions
WHERE id IN %(ids)s AND {{removable}}
ORDER BY id
FOR UPDATE;

-- remember_keys: what the rows about to be removed leave behind, one row per key: their outcome, and the resend that replaced each; a key already remembered takes the row's values and the time now (MysqlStore.remove_in remembers before it deletes, and again as it deletes)
INSERT INTO denpyo_keys (
    channel, `key`, idempotency_key, submission_id, status, attempts, error_kind, remote_id,
    resolution, supersedes, superseded_by, created_at, synced_at, archived_to
)
SELECT s.channel, s.`key`, s.idempotency_key, s.id, s.status, s.attempts, s.error_kind,
       s.remote_id, s.resolution, s.supersedes,
       COALESCE((SELECT MIN(n.id) FROM denpyo_submissions n WHERE n.supersedes = s.id),
                (SELECT MIN(k.submission_id) FROM denpyo_keys k WHERE k.supersedes = s.id)),
       s.created_at, s.synced_at, %(archived_to)s
FROM denpyo_submissions s
WHERE s.id IN %(ids)s
  AND {{removable s}}
ON DUPLICATE KEY UPDATE
    status = VALUES(status), attempts = VALUES(attempts), error_kind = VALUES(error_kind),
    remote_id = VALUES(remote_id), resolution = VALUES(resolution),
    superseded_by = VALUES(superseded_by), synced_at = VALUES(synced_at),
    archived_to = VALUES(archived_to), removed_at = UTC_TIMESTAMP(6);

-- add_removed_counts: the rows about to be removed, added to the counts kept per day of creation, channel, status and error kind
INSERT INTO denpyo_removed_counts (day, channel, status, error_kind, n)
SELECT * FROM (
    SELECT DATE(created_at) AS day, channel, status, COALESCE(error_kind, '') AS error_kind,
           COUNT(*) AS n
    FROM denpyo_submissions
    WHERE id IN %(ids)s AND {{removable}}
    GROUP BY 1, 2, 3, 4) AS removed
ON DUPLICATE KEY UPDATE n = denpyo_removed_counts.n + VALUES(n);

-- remove_submissions: the rows, once their keys and counts are taken care of; their history goes with them (the foreign key's ON DELETE CASCADE)
DELETE FROM denpyo_submissions
WHERE id IN %(ids)s AND {{removable}}
RETURNING id;

-- expire_keys: one batch of remembered keys whose rows were created before the cutoff, oldest first (keys_kept_for)
DELETE FROM denpyo_keys
WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(%(older_than)s * 1000000) MICROSECOND
ORDER BY created_at
LIMIT %(limit)s
RETURNING submission_id;

-- mark_key_resent: a person resent a removed row as :new_id: its memory records the resolution and the new row (nothing when it was resent already, or its payload forgotten)
UPDATE denpyo_keys SET resolution = %(resolution)s, superseded_by = %(new_id)s
WHERE submission_id = %(id)s AND superseded_by IS NULL AND forgotten_at IS NULL;

-- get_key: a removed row's key and outcome, by channel and business key
SELECT * FROM denpyo_keys WHERE channel = %(channel)s AND `key` = %(key)s;

-- get_key_by_id: a removed row's key and outcome, by the row's id
SELECT * FROM denpyo_keys WHERE submission_id = %(id)s;

-- find_key_superseding: the removed resend that replaced a submission, if any
SELECT * FROM denpyo_keys WHERE supersedes = %(id)s ORDER BY submission_id LIMIT 1;

-- get_keys_by_idempotency_keys: removed rows of a list of idempotency keys (the audit)
SELECT * FROM denpyo_keys WHERE idempotency_key IN %(keys)s;

-- count_report: rows per day of creation, channel, status and error kind in [since, until) (days): the live rows where they stand now, and the removed ones as they were counted when they went
SELECT day, channel, status, error_kind, SUM(n) AS n FROM (
    SELECT DATE(created_at) AS day, channel, status,
           COALESCE(error_kind, '') AS error_kind, COUNT(*) AS n
    FROM denpyo_submissions
    WHERE created_at >= %(since)s AND created_at < %(until)s
      AND (%(channel)s IS NULL OR channel = %(channel)s)
    GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT day, channel, status, error_kind, n FROM denpyo_removed_counts
    WHERE day >= %(since)s AND day < %(until)s
      AND (%(channel)s IS NULL OR channel = %(channel)s)
) AS counted
GROUP BY day, channel, status, error_kind
ORDER BY day, channel, status, error_kind;

-- mark_transaction: begin this connection's InnoDB transaction (a read, after START TRANSACTION READ ONLY): from then on the server's list of transactions shows it
SELECT COUNT(*) AS n FROM denpyo_schema_version;

-- list_transactions_open: the transactions that may write, and this connection's own, as InnoDB's last copy of its list shows them (MysqlStore._wait_for_older_writers)
SELECT trx_mysql_thread_id AS thread, trx_started AS started,
       trx_mysql_thread_id = CONNECTION_ID() AS own
FROM information_schema.INNODB_TRX
WHERE trx_mysql_thread_id = CONNECTION_ID() OR trx_is_read_only = 0;

-- take_submission_counts: the oldest rows of the running counts, to fold; rows a writer has not committed yet are passed over, never waited for
SELECT id, channel, status, kind, resolved, n FROM denpyo_status_counts
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- drop_submission_counts: delete the rows of running counts taken to fold (and locked by this transaction)
DELETE FROM denpyo_status_counts WHERE id IN %(ids)s;

-- add_submission_counts: one folded row of the running counts: a group's total
INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
VALUES (%(channel)s, %(status)s, %(kind)s, %(resolved)s, %(n)s);

-- The dashboard's reads: each bounded, and served by an index (schema 6).

-- get_submission_last_id: the newest submission's id, where the first page of the list starts
SELECT COALESCE(MAX(id), 0) AS id FROM denpyo_submissions;

-- list_submission_page: one page of the list, newest first: rows matching an operator's filter among the ids from :floor up to (not including) :before, read by primary key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id < %(before)s AND id >= %(floor)s
  AND {{list_filter}}
ORDER BY id DESC
LIMIT %(limit)s;

-- search_submissions: rows of one channel whose key starts with :prefix, in key order after :after (the unique index on channel and key, at most :scan entries read)
SELECT s.*,
    {{in_doubt s}} AS in_doubt
FROM (SELECT id FROM denpyo_submissions FORCE INDEX (denpyo_submissions_channel_key)
      WHERE channel = %(channel)s AND `key` >= %(prefix)s
        AND (%(after)s IS NULL OR `key` > %(after)s)
      ORDER BY `key` LIMIT %(scan)s) AS k
JOIN denpyo_submissions s ON s.id = k.id
WHERE LEFT(s.`key`, CHAR_LENGTH(%(prefix)s)) = %(prefix)s
ORDER BY s.`key`
LIMIT %(limit)s;

-- list_submission_needs_person_page: the needs-a-person queue below id :before, newest first: unresolved rows waiting for a person (index denpyo_submissions_attention on the virtual column needs_person), and rows whose lease ran out (the rows still requesting, through denpyo_submissions_status_created)
SELECT * FROM (
    SELECT *,
        {{in_doubt}} AS in_doubt
    FROM denpyo_submissions FORCE INDEX (denpyo_submissions_attention)
    WHERE needs_person = 1 AND id < %(before)s
    ORDER BY id DESC LIMIT %(limit)s) AS waiting
UNION ALL
SELECT * FROM (
    SELECT *, 1 AS in_doubt
    FROM denpyo_submissions FORCE INDEX (denpyo_submissions_status_created)
    WHERE status = 'requesting' AND locked_until <= UTC_TIMESTAMP(6)
      AND resolution IS NULL AND id < %(before)s
    ORDER BY id DESC LIMIT %(limit)s) AS expired
ORDER BY id DESC
LIMIT %(limit)s;

-- find_submission_next_channel: the first channel after :after that has rows, one probe of an index led by channel (called once per channel: a loose index scan, which a recursive query did not give on MariaDB)
SELECT channel FROM denpyo_submissions WHERE channel > %(after)s ORDER BY channel LIMIT 1;

-- lock_outcome_fold: where the fold of events into outcomes per minute stopped; a fold already running elsewhere is not waited for
SELECT last_event_id FROM denpyo_outcome_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED;

-- find_outcome_fold_upto: the last event of the next batch to fold, among events older than :lag seconds (a younger one may belong to a transaction not yet committed)
SELECT MAX(id) AS upto FROM (
    SELECT id FROM denpyo_events
    WHERE id > %(after)s AND at <= UTC_TIMESTAMP(6) - INTERVAL ROUND(%(lag)s * 1000000) MICROSECOND
    ORDER BY id LIMIT %(limit)s) AS batch;

-- add_outcome_fold: add a batch of events to the outcomes per minute: each call that ended (a settle, or a verify that found a call its sender never settled at the provider) once as `sent` and once by the status it reached
INSERT INTO denpyo_outcome_minutes (minute, channel, outcome, n)
SELECT * FROM (
    SELECT DATE_FORMAT(e.at, '%%Y-%%m-%%d %%H:%%i:00') AS minute, s.channel,
           CASE WHEN counted.sent = 1 THEN 'sent' ELSE e.to_status END AS outcome,
           COUNT(*) AS n
    FROM denpyo_events e JOIN denpyo_submissions s ON s.id = e.submission_id
    CROSS JOIN (SELECT 1 AS sent UNION ALL SELECT 0) AS counted
    WHERE e.id > %(after)s AND e.id <= %(upto)s
      AND (e.kind = 'settle'
           OR (e.kind = 'verify' AND e.from_status = 'requesting'
               AND e.to_status = 'synced'))
    GROUP BY 1, 2, 3) AS batch
ON DUPLICATE KEY UPDATE n = denpyo_outcome_minutes.n + VALUES(n);

-- advance_outcome_fold: record where the fold stopped
UPDATE denpyo_outcome_cursor SET last_event_id = %(upto)s WHERE id = 1;

-- trim_outcome_fold: forget minutes older than 25 hours
DELETE FROM denpyo_outcome_minutes WHERE minute < UTC_TIMESTAMP() - INTERVAL 25 HOUR;

-- count_outcomes_per_minute: outcomes per minute since :hours ago (optionally one channel)
SELECT minute, outcome, SUM(n) AS n FROM denpyo_outcome_minutes
WHERE minute >= UTC_TIMESTAMP() - INTERVAL %(hours)s HOUR
  AND (%(channel)s IS NULL OR channel = %(channel)s)
GROUP BY minute, outcome
ORDER BY minute, outcome;

-- What the fleet shares about each channel (store/controls.py): read once per poll,
-- written when something happens. A channel's row is made by its first write.

-- ensure_channel: the channel's row, made if missing (active, no history)
INSERT IGNORE INTO denpyo_channels (channel) VALUES (%(channel)s);

-- list_channels: every channel's state, and the database clock it was read by
SELECT *, UTC_TIMESTAMP(6) AS now FROM denpyo_channels ORDER BY channel;

-- lock_channel: lock one channel's row for a fleet limit's claim or reservation: the fleet rate limit's next start, and the database clock
SELECT next_start, UTC_TIMESTAMP(6) AS now FROM denpyo_channels
WHERE channel = %(channel)s FOR UPDATE;

-- start_channel_after: the fleet rate limit's clock moved on: no call of the channel starts before :at but those reserved
UPDATE denpyo_channels SET next_start = %(at)s WHERE channel = %(channel)s;

-- count_channel_held: the channel's rows held now under a live lease, by any worker (the fleet's calls in flight, and the rows claimed to start next)
SELECT COUNT(*) AS n FROM denpyo_submissions
WHERE channel = %(channel)s AND status = 'requesting' AND locked_until > UTC_TIMESTAMP(6);

-- pause_channel: a person pauses the channel (nothing when it is paused already)
UPDATE denpyo_channels SET paused_at = UTC_TIMESTAMP(6), paused_by = %(actor)s,
    paused_note = %(note)s, updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND paused_at IS NULL;

-- resume_channel: a person resumes the channel (nothing when it is not paused)
UPDATE denpyo_channels SET paused_at = NULL, paused_by = NULL, paused_note = NULL,
    updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND paused_at IS NOT NULL;

-- throttle_channel: the provider asked the channel to wait :seconds (a Retry-After): no call starts before then, unless a longer wait is already asked
UPDATE denpyo_channels
SET throttled_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND,
    throttled_note = %(note)s, updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s
  AND (throttled_until IS NULL
       OR throttled_until < UTC_TIMESTAMP(6) + INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND);

-- mark_channel_down: the provider is down: one probe call in :seconds (nothing when it is down already)
UPDATE denpyo_channels SET down_since = UTC_TIMESTAMP(6),
    probe_at = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND,
    down_note = %(note)s, probe_every = %(seconds)s, updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND down_since IS NULL;

-- probe_channel: take the next probe call of a channel that is down, if it is due; the one after it waits :seconds (nothing when another took it)
UPDATE denpyo_channels
SET probe_at = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND,
    probe_every = %(seconds)s, updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND down_since IS NOT NULL AND probe_at <= UTC_TIMESTAMP(6);

-- mark_channel_up: a call succeeded: the provider is up again (nothing when it was not down)
UPDATE denpyo_channels SET down_since = NULL, down_note = NULL, probe_at = NULL, probe_every = NULL,
    updated_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND down_since IS NOT NULL;

-- add_channel_event: one line of a channel's history
INSERT INTO denpyo_channel_events (channel, kind, actor, note)
VALUES (%(channel)s, %(kind)s, %(actor)s, %(note)s);

-- list_channel_events: a channel's history, newest first
SELECT * FROM denpyo_channel_events WHERE channel = %(channel)s
ORDER BY id DESC LIMIT %(limit)s;

-- add_action: one entry of the action log (a person's action, a request waiting for a second person, or a bulk action), its id
INSERT INTO denpyo_actions (
    kind, scope, target, params, plan, state, actor, note, lapses_at, total, locked_by, locked_until
)
VALUES (
    %(kind)s, %(scope)s, %(target)s, %(params)s, %(plan)s, %(state)s, %(actor)s, %(note)s,
    CASE WHEN %(lapses_in)s IS NULL THEN NULL
         ELSE UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lapses_in)s * 1000000) MICROSECOND END,
    %(total)s, %(holder)s,
    CASE WHEN %(holder)s IS NULL THEN NULL
         ELSE UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND END
)
RETURNING id;

-- add_action_row: one row behind an action
INSERT INTO denpyo_action_rows (action_id, submission_id) VALUES (%(action_id)s, %(submission_id)s);

-- freeze_action_rows: every row an operator's filter finds now, behind an action (a bulk action's set, frozen as its ids)
INSERT INTO denpyo_action_rows (action_id, submission_id)
SELECT %(action_id)s, id FROM denpyo_submissions WHERE {{list_filter}};

-- total_action: an action counts the rows behind it
UPDATE denpyo_actions
SET total = (SELECT COUNT(*) FROM denpyo_action_rows WHERE action_id = %(id)s)
WHERE id = %(id)s;

-- get_action: one action, and the database clock
SELECT *, UTC_TIMESTAMP(6) AS now FROM denpyo_actions WHERE id = %(id)s;

-- list_actions: the action log, newest first: by person (whatever the case of the name), kind, state and time (each optional)
SELECT *, UTC_TIMESTAMP(6) AS now FROM denpyo_actions
WHERE id < %(before)s
  AND (%(actor)s IS NULL OR LOWER(actor) = LOWER(%(actor)s))
  AND (%(kind)s IS NULL OR kind = %(kind)s)
  AND (%(state)s IS NULL OR state = %(state)s)
  AND (%(since)s IS NULL OR created_at >= CONVERT_TZ(
      CAST(LEFT(%(since)s, CHAR_LENGTH(%(since)s) - 6) AS DATETIME(6)),
      RIGHT(%(since)s, 6), '+00:00'))
  AND (%(until)s IS NULL OR created_at < CONVERT_TZ(
      CAST(LEFT(%(until)s, CHAR_LENGTH(%(until)s) - 6) AS DATETIME(6)),
      RIGHT(%(until)s, 6), '+00:00'))
ORDER BY id DESC
LIMIT %(limit)s;

-- count_action_rows_pending: the next rows of an action not yet done nor skipped, in id order from :after
SELECT submission_id FROM denpyo_action_rows
WHERE action_id = %(id)s AND submission_id > %(after)s AND outcome IS NULL
ORDER BY submission_id
LIMIT %(limit)s;

-- get_action_rows_of_batch: the rows of an action's batch, :first to :last, not yet done nor skipped
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id IN (SELECT submission_id FROM denpyo_action_rows
             WHERE action_id = %(id)s AND submission_id BETWEEN %(first)s AND %(last)s
               AND outcome IS NULL);

-- list_action_rows: the rows behind an action and what happened to each, in id order from :after (:outcome 'pending' for those not yet done)
SELECT * FROM denpyo_action_rows
WHERE action_id = %(id)s AND submission_id > %(after)s
  AND (%(outcome)s IS NULL OR outcome = %(outcome)s
       OR (%(outcome)s = 'pending' AND outcome IS NULL))
ORDER BY submission_id
LIMIT %(limit)s;

-- set_action_row_outcome: what an action did to one of its rows (nothing when it was recorded already)
UPDATE denpyo_action_rows SET outcome = %(outcome)s, reason = %(reason)s
WHERE action_id = %(action_id)s AND submission_id = %(submission_id)s AND outcome IS NULL;

-- progress_action: a batch of an action's rows is done, under the holder's lease (nothing when the action was paused, cancelled or taken over: the batch rolls back); done when no row is left
UPDATE denpyo_actions
SET state = CASE WHEN total <= done + %(done)s + skipped + %(skipped)s THEN 'done' ELSE state END,
    finished_at = CASE WHEN total <= done + %(done)s + skipped + %(skipped)s
                       THEN UTC_TIMESTAMP(6) ELSE NULL END,
    done = done + %(done)s, skipped = skipped + %(skipped)s,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND locked_by = %(holder)s AND state = 'in_progress';

-- take_action: become an action's holder: an action in progress nobody carries out (no locked_by, or its lease ran out)
UPDATE denpyo_actions
SET locked_by = %(holder)s,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lease)s * 1000000) MICROSECOND,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND state = 'in_progress'
  AND (locked_by IS NULL OR locked_by = %(holder)s
       OR locked_until < UTC_TIMESTAMP(6));

-- let_go_action: the holder stops carrying out the action (it stays as it is for the next)
UPDATE denpyo_actions SET locked_by = NULL, locked_until = NULL
WHERE id = %(id)s AND locked_by = %(holder)s;

-- move_action: a person pauses, resumes or cancels an action, or an approved request starts (:from1 to :from4: the states it may leave)
UPDATE denpyo_actions
SET state = %(state)s,
    finished_at = CASE WHEN %(state)s IN ('cancelled', 'done')
                       THEN UTC_TIMESTAMP(6) ELSE finished_at END,
    locked_by = NULL, locked_until = NULL,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND state IN (%(from1)s, %(from2)s, %(from3)s, %(from4)s);

-- decide_action: a second person approves (state in_progress) or declines a request: never the one who asked, and not once it lapsed
UPDATE denpyo_actions
SET state = %(state)s, approver = %(approver)s, decision_note = %(note)s,
    decided_at = UTC_TIMESTAMP(6),
    finished_at = CASE WHEN %(state)s = 'declined'
                       THEN UTC_TIMESTAMP(6) ELSE NULL END,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND state = 'awaiting_approval' AND actor <> %(approver)s
  AND (lapses_at IS NULL OR lapses_at > UTC_TIMESTAMP(6));

-- lapse_actions: requests nobody decided in time
UPDATE denpyo_actions
SET state = 'lapsed', finished_at = UTC_TIMESTAMP(6),
    updated_at = UTC_TIMESTAMP(6)
WHERE state = 'awaiting_approval' AND lapses_at <= UTC_TIMESTAMP(6);

-- set_action_plan: a dry run's counts and samples, and the state it leaves the action in (from planned: awaiting_approval or in_progress)
UPDATE denpyo_actions
SET plan = %(plan)s, state = %(state)s, approver = NULL,
    lapses_at = CASE WHEN %(lapses_in)s IS NULL THEN lapses_at
                      ELSE UTC_TIMESTAMP(6) + INTERVAL ROUND(%(lapses_in)s * 1000000) MICROSECOND END,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND state = %(from_state)s;

-- analyze_action_rows: the rows behind the actions counted again after a bulk action froze its rows; nothing to do: InnoDB recounts a table's statistics itself once a tenth of it changed
SELECT 1;

-- add_action_row_done: one row behind an action, with what happened to it (an action carried out in its own transaction)
INSERT INTO denpyo_action_rows (action_id, submission_id, outcome, reason)
VALUES (%(action_id)s, %(submission_id)s, %(outcome)s, %(reason)s);

-- count_action_done: an action carried out in one transaction: its counts, and done
UPDATE denpyo_actions
SET total = %(total)s, done = %(done)s, skipped = %(skipped)s, state = 'done',
    finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s;

-- Forgetting (`denpyo forget`, store/forgetting.py): a person erases the payloads of
-- closed rows and every text quoting them; the slip (status, attempts, times, ids,
-- remote id, the history of moves) stays. A person's rare errand: the searches read
-- the table by primary key, a page at a time, and no index is kept for them.

-- match_forget_page: one page of live rows after id :after, in id order, whose payload has the string :value at :json_path (a JSON path built from checked names, each quoted), of one channel or all; compared in the payload's binary collation, byte for byte
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > %(after)s AND (%(channel)s IS NULL OR channel = %(channel)s)
  AND JSON_TYPE(JSON_EXTRACT(payload, %(json_path)s)) = 'STRING'
  AND JSON_UNQUOTE(JSON_EXTRACT(payload, %(json_path)s)) = %(value)s
ORDER BY id
LIMIT %(limit)s;

-- list_forget_sealed_page: one page of live rows after id :after, in id order, whose payload is encrypted (its one key `denpyo:sealed`, at :sealed_path), of one channel or all: read as every row is, and matched one by one
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > %(after)s AND (%(channel)s IS NULL OR channel = %(channel)s)
  AND JSON_CONTAINS_PATH(payload, 'one', %(sealed_path)s) = 1
ORDER BY id
LIMIT %(limit)s;

-- lock_forget: lock a batch's rows and read them as they are now
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id IN %(ids)s
FOR UPDATE;

-- forget_payload: erase a closed row's payload (JSON null) and last error, its resolution replaced; nothing when it is open again (requesting, due, or held) or forgotten already. Its status, counts and times stay
UPDATE denpyo_submissions
SET payload = 'null', last_error = NULL, resolution = %(resolution)s,
    forgotten_at = UTC_TIMESTAMP(6)
WHERE id = %(id)s AND forgotten_at IS NULL
  AND status <> 'requesting' AND next_attempt_at IS NULL
  AND (locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6));

-- add_forget_event: the `forgotten` line of a row's history: who, and the person's note (no move: its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (%(submission_id)s, 'forgotten', %(status)s, %(status)s, %(attempt)s, %(actor)s,
        %(detail)s);

-- list_forget_event_details: the details of a batch's histories, to be replaced
SELECT id, submission_id, detail FROM denpyo_events
WHERE submission_id IN %(ids)s AND detail IS NOT NULL;

-- scrub_forget_events: one event's detail, replaced
UPDATE denpyo_events SET detail = %(detail)s
WHERE submission_id = %(submission_id)s AND id = %(id)s;

-- list_forget_action_texts: the texts of the actions on a batch's rows but the forget's own (:action_id); the action rows found by the row (index denpyo_action_rows_by_row)
SELECT id, kind, note, decision_note, params, plan FROM denpyo_actions
WHERE id <> %(action_id)s
  AND id IN (SELECT action_id FROM denpyo_action_rows WHERE submission_id IN %(ids)s);

-- scrub_forget_actions: one action's texts, replaced
UPDATE denpyo_actions
SET note = %(note)s, decision_note = %(decision_note)s, params = %(params)s, plan = %(plan)s
WHERE id = %(id)s;

-- list_forget_action_reasons: why actions skipped a batch's rows, to be replaced
SELECT action_id, submission_id, reason FROM denpyo_action_rows
WHERE submission_id IN %(ids)s AND reason IS NOT NULL;

-- scrub_forget_action_reasons: why an action skipped one row, replaced
UPDATE denpyo_action_rows SET reason = %(reason)s
WHERE action_id = %(action_id)s AND submission_id = %(submission_id)s;

-- forget_key: a removed row's memory forgotten now (its archive rewritten first), its resolution replaced; nothing when it was forgotten already
UPDATE denpyo_keys SET forgotten_at = UTC_TIMESTAMP(6), resolution = %(resolution)s
WHERE submission_id = %(id)s AND removed_at IS NOT NULL AND forgotten_at IS NULL;

-- list_forget_archives: where removed rows were archived, of one channel or all: the archives a search by a payload's field reads
SELECT DISTINCT archived_to FROM denpyo_keys
WHERE archived_to IS NOT NULL AND (%(channel)s IS NULL OR channel = %(channel)s)
ORDER BY archived_to;

-- find_forget_pruned: whether a row (of one channel or all) was pruned and not forgotten: a search by a payload's field cannot find it
SELECT 1 AS pruned FROM denpyo_keys
WHERE archived_to IS NULL AND forgotten_at IS NULL AND (%(channel)s IS NULL OR channel = %(channel)s)
LIMIT 1;

-- find_forget_action_of: the latest forget that erased a row's payload (who, when, why: a removed row has no history left)
SELECT a.* FROM denpyo_actions a
JOIN denpyo_action_rows r ON r.action_id = a.id
WHERE r.submission_id = %(id)s AND a.kind = 'forget' AND r.outcome = 'done'
ORDER BY a.id DESC
LIMIT 1;

-- find_forgotten_among: which of a batch's rows are forgotten: a person's action that raced a forget rolls back
SELECT id FROM denpyo_submissions WHERE id IN %(ids)s AND forgotten_at IS NOT NULL;

-- Payload keys (store/payload_keys.py): `rotate-key` re-encrypts every payload with the
-- current key, a batch at a time; only the payload column changes.

-- list_payload_batch: the next rows after an id, in id order (of one channel, or all), whose payload is kept (not forgotten), with the payload as stored
SELECT id, channel, `key`, payload FROM denpyo_submissions
WHERE id > %(after)s AND (%(channel)s IS NULL OR channel = %(channel)s) AND forgotten_at IS NULL
ORDER BY id
LIMIT %(limit)s;

-- lock_payload: which of a batch's rows this transaction may rewrite; a row another transaction has locked (a claim or a settle in flight) is skipped, never waited for
SELECT id FROM denpyo_submissions WHERE id IN %(ids)s ORDER BY id FOR UPDATE SKIP LOCKED;

-- make_payload_due_now: the rows of a channel given back unsent for want of a payload key that is configured now (their last error begins as :pattern says), due now
UPDATE denpyo_submissions SET next_attempt_at = UTC_TIMESTAMP(6)
WHERE channel = %(channel)s AND status = 'requesting' AND locked_until IS NULL
  AND next_attempt_at > UTC_TIMESTAMP(6)
  AND resolution IS NULL AND last_error LIKE %(pattern)s;

-- reseal_payload: a row's payload re-encrypted, if it is still the one read (compare-and-set: MariaDB keeps JSON as the text written)
UPDATE denpyo_submissions SET payload = %(new)s WHERE id = %(id)s AND payload = %(old)s;

-- The providers' webhooks (store/provider_events.py): each event recorded once, with
-- the row it named (NULL: none, which the audit lists).

-- insert_provider_event: record one provider's event (nothing when (provider, event_id) was recorded already: a second delivery; the values are cut to their columns before)
INSERT IGNORE INTO denpyo_provider_events
    (provider, event_id, kind, submission_id, idempotency_key, remote_id, detail)
VALUES (%(provider)s, %(event_id)s, %(kind)s, %(submission_id)s, %(idempotency_key)s,
        %(remote_id)s, %(detail)s);

-- list_provider_event_history: the line a provider's event adds to the history of a row it does not move (its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (%(submission_id)s, 'provider', %(status)s, %(status)s, %(attempt)s, %(actor)s,
        %(detail)s);

-- find_provider_event_unknown: the events received in [since, until) that named no row, oldest first (index denpyo_provider_events_unknown)
SELECT * FROM denpyo_provider_events
WHERE submission_id IS NULL AND received_at >= %(since)s AND received_at < %(until)s
ORDER BY received_at, id LIMIT %(limit)s;

-- list_provider_events: the events that named one row, oldest first
SELECT * FROM denpyo_provider_events WHERE submission_id = %(submission_id)s ORDER BY id;

-- get_submission_by_remote_id: the newest row that recorded a provider's id (index denpyo_submissions_remote_id)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE remote_id = %(remote_id)s ORDER BY id DESC LIMIT 1;

-- forget_provider_events: the details of a batch's provider events replaced
UPDATE denpyo_provider_events SET detail = %(detail)s
WHERE submission_id IN %(ids)s AND detail IS NOT NULL;
