-- Named queries for PostgreSQL. Each query starts with a line `-- name: what it does`.
-- Times come from the database clock (now()); claims skip rows other workers hold.

-- @removable: retention lets the row go: synced, or rejected or failed and resolved by a person, created longer ago than its state's age (synced, rejected, abandoned seconds; NULL: kept)
(($.status = 'synced' AND %(synced)s::float8 IS NOT NULL
      AND $.created_at < now() - make_interval(secs => %(synced)s::float8))
  OR ($.status = 'rejected' AND $.resolution IS NOT NULL AND %(rejected)s::float8 IS NOT NULL
      AND $.created_at < now() - make_interval(secs => %(rejected)s::float8))
  OR ($.status = 'failed' AND $.resolution IS NOT NULL AND $.next_attempt_at IS NULL
      AND %(abandoned)s::float8 IS NOT NULL
      AND $.created_at < now() - make_interval(secs => %(abandoned)s::float8)))

-- @in_doubt: the call may or may not have arrived: `requesting` with its lease run out, or an ambiguous failure
($.status = 'requesting' AND $.locked_until <= now())
OR ($.status = 'failed' AND $.error_kind = 'ambiguous')

-- @needs_person: in doubt, exhausted (`failed` with no next attempt) or rejected, and not resolved
$.resolution IS NULL
AND (($.status = 'requesting' AND $.locked_until <= now())
     OR ($.status = 'failed' AND ($.error_kind = 'ambiguous' OR $.next_attempt_at IS NULL))
     OR $.status = 'rejected')

-- @list_filter: an operator's filter (domain/filters.py), each optional condition written (param IS NULL OR condition) so that every value stays a bound parameter
(%(all_statuses)s::boolean
 OR $.status IN (%(status0)s::text, %(status1)s::text, %(status2)s::text, %(status3)s::text))
AND (%(channel)s::text IS NULL OR $.channel = %(channel)s::text)
AND (%(since)s::timestamptz IS NULL OR $.created_at >= %(since)s::timestamptz)
AND (%(until)s::timestamptz IS NULL OR $.created_at < %(until)s::timestamptz)
AND (%(key_prefix)s::text IS NULL
     OR substr($.key, 1, length(%(key_prefix)s::text)) = %(key_prefix)s::text)
AND (%(error_text)s::text IS NULL OR strpos($.last_error, %(error_text)s::text) > 0)
AND (%(in_doubt)s::int IS NULL OR %(in_doubt)s::int = CASE WHEN {{in_doubt}} THEN 1 ELSE 0 END)
AND (%(needs_person)s::int IS NULL
     OR %(needs_person)s::int = CASE WHEN {{needs_person}} THEN 1 ELSE 0 END)
AND (%(resolved)s::int IS NULL
     OR %(resolved)s::int = CASE WHEN $.resolution IS NULL THEN 0 ELSE 1 END)

-- @attention_index: the predicate of the index denpyo_submissions_attention: unresolved rows that wait for a person whatever the clock says
$.resolution IS NULL
AND ($.status = 'rejected'
     OR ($.status = 'failed' AND ($.error_kind = 'ambiguous' OR $.next_attempt_at IS NULL)))

-- create_schema_version: the table that records which migrations ran
CREATE TABLE IF NOT EXISTS denpyo_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- get_schema_version: the newest migration applied
SELECT COALESCE(MAX(version), 0) AS version FROM denpyo_schema_version;

-- add_schema_version: record one applied migration
INSERT INTO denpyo_schema_version (version) VALUES (%(version)s);

-- lock_schema: serialise migrations across processes until the transaction ends
SELECT pg_advisory_xact_lock(7316001);

-- get_database_identity: which database this connection works in: its name, the server's port and start time, and the denpyo tables its search_path finds
SELECT current_database() AS database, current_setting('port') AS port,
    pg_postmaster_start_time() AS started,
    COALESCE((SELECT relnamespace::regnamespace::text || '.denpyo_submissions' FROM pg_class
        WHERE oid = to_regclass('denpyo_submissions')), 'none on its search_path') AS tables;

-- get_layout: whether the submissions table is partitioned (the layout of migrations/postgresql-partitioned); no row before the first migration
SELECT relkind = 'p' AS partitioned FROM pg_class WHERE oid = to_regclass('denpyo_submissions');

-- check_partman_available: whether the server has pg_partman, for the partitioned layout
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_partman') AS available;

-- read_clock: the database clock
SELECT now() AS now;

-- make_session_durable: run once on each connection of denpyo's: its commits wait until they are on disk, and on the synchronous standbys the server names, before a call may leave (a server or role set to 'off' or 'local' is raised to 'on' for denpyo's sessions only; stronger settings are kept)
SELECT set_config('synchronous_commit', 'on', false) AS synchronous_commit
 WHERE current_setting('synchronous_commit') IN ('off', 'local');

-- make_session_read_committed: run once on each connection of denpyo's: its transactions run READ COMMITTED, which its SQL is written for (SKIP LOCKED claims, compare-and-set moves), whatever the database's or role's default isolation
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- get_replica_lag: on a standby (a read_url), how far its data is behind the primary: 0 when it has replayed all it received, else the age of the last transaction it replayed; NULL on a primary
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN NULL
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
    ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8
END AS lag;

-- get_durability: what the server says about its commits (domain/durability.py): the physical standbys streaming from it (a walsender serving no database; a logical one, such as a change-data-capture consumer, serves one), how many are in sync (NULL unless this role may read the replication details: pg_read_all_stats), its synchronous_standby_names, and the synchronous_commit this session commits under
SELECT
    (SELECT count(*) FROM pg_stat_activity
      WHERE backend_type = 'walsender' AND datname IS NULL) AS standbys,
    CASE WHEN pg_has_role('pg_read_all_stats', 'USAGE')
         THEN (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))
    END AS sync_standbys,
    current_setting('synchronous_standby_names') AS synchronous_names,
    current_setting('synchronous_commit') AS synchronous_commit;

-- get_submission: one submission by id
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id = %(id)s;

-- get_submission_existing: the row an insert found in its way, by channel and business key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = %(channel)s AND key = %(key)s;

-- get_submission_by_key: one submission by channel and business key
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE channel = %(channel)s AND key = %(key)s;

-- list_events: a submission's history, oldest first
SELECT * FROM denpyo_events WHERE submission_id = %(submission_id)s ORDER BY id;

-- list_events_many: the histories of many submissions (the archive's batch), oldest first
SELECT * FROM denpyo_events WHERE submission_id = ANY(%(ids)s::bigint[]) ORDER BY id;

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
WHERE (%(channel)s::text IS NULL OR channel = %(channel)s::text)
GROUP BY channel, status
HAVING SUM(n) <> 0
ORDER BY channel, status;

-- count_submissions_needs_person: in-doubt, exhausted, open-rejected, needs-a-person and pending counts, the oldest pending row's creation, and the database clock
-- Reads the running counts (schema 4) and the rows waiting or in flight, never the
-- settled history: the same time at a thousand rows or ten million.
WITH counted AS (
    SELECT
        COALESCE(SUM(n) FILTER (WHERE status = 'failed'
                                  AND kind IN ('ambiguous_due', 'ambiguous_held')), 0) AS ambiguous,
        COALESCE(SUM(n) FILTER (WHERE status = 'failed' AND kind = 'exhausted'
                                  AND NOT resolved), 0) AS exhausted,
        COALESCE(SUM(n) FILTER (WHERE status = 'failed' AND NOT resolved
                                  AND kind IN ('ambiguous_due', 'ambiguous_held', 'exhausted')),
                 0) AS failed_open,
        COALESCE(SUM(n) FILTER (WHERE status = 'rejected' AND NOT resolved), 0) AS rejected_open,
        COALESCE(SUM(n) FILTER (WHERE status = 'requesting'
                                   OR (status = 'failed'
                                       AND kind IN ('retrying', 'ambiguous_due'))), 0) AS pending,
        COALESCE(SUM(n) FILTER (WHERE resolved), 0) AS resolved
    FROM denpyo_status_counts
    WHERE (%(channel)s::text IS NULL OR channel = %(channel)s::text)
), held AS (  -- rows being sent or verified, and those whose sender is gone
    SELECT COUNT(*) AS expired, COUNT(*) FILTER (WHERE resolution IS NULL) AS expired_open
    FROM denpyo_submissions
    WHERE status = 'requesting' AND locked_until IS NOT NULL AND locked_until <= now()
      AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
), oldest AS (  -- each part reads one of the claim indexes, which hold only pending rows
    SELECT MIN(created_at) AS created_at FROM (
        SELECT created_at FROM denpyo_submissions
        WHERE status = 'requesting' AND locked_until IS NULL
          AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
        UNION ALL
        SELECT created_at FROM denpyo_submissions
        WHERE status = 'requesting' AND locked_until IS NOT NULL
          AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
        UNION ALL
        SELECT created_at FROM denpyo_submissions
        WHERE status = 'failed' AND error_kind = 'transient' AND next_attempt_at IS NOT NULL
          AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
        UNION ALL
        SELECT created_at FROM denpyo_submissions
        WHERE status = 'failed' AND error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL
          AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
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
    now() AS now
FROM counted, held, oldest;

-- count_submissions_in_doubt_due: in-doubt rows of one channel that the reconciler would take now
SELECT COUNT(*) AS n FROM denpyo_submissions
WHERE channel = %(channel)s
  AND next_attempt_at <= now()
  AND ((status = 'requesting' AND locked_until <= now())
       OR (status = 'failed' AND error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL));

-- list_submission_holdings: the rows held now under a live lease (being sent or verified), per channel and holder (the rows of one claim share theirs), with when the first and the last of their leases end, and the database clock; the lease that ends last first
SELECT channel, locked_by, COUNT(*) AS n, MIN(locked_until) AS first_end,
    MAX(locked_until) AS last_end, now() AS now
FROM denpyo_submissions
WHERE ((status = 'requesting' AND locked_until IS NOT NULL)
       OR (status = 'failed' AND error_kind = 'ambiguous'
           AND next_attempt_at IS NOT NULL))  -- as the index `denpyo_submissions_in_doubt`
  AND locked_until > now()
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
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
FROM denpyo_submissions WHERE idempotency_key = ANY(%(keys)s::text[]);

-- list_submissions_synced: one page of a channel's synced rows, synced in [after_at, until), in (synced_at, id) order after the cursor (after_at, after_id) (the audit)
SELECT *, false AS in_doubt FROM denpyo_submissions
WHERE channel = %(channel)s AND status = 'synced'
  AND synced_at >= %(after_at)s AND synced_at < %(until)s
  AND (synced_at > %(after_at)s OR id > %(after_id)s)
ORDER BY synced_at, id
LIMIT %(limit)s;

-- lock_submission_renew: which of a list of rows one holder still holds; rows another transaction has locked (a settle in flight) are skipped, never waited for
SELECT id FROM denpyo_submissions
WHERE id = ANY(%(ids)s::bigint[]) AND locked_by = %(locked_by)s
  AND status IN ('requesting', 'failed')
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- renew_submissions: extend the leases of rows found still held (and locked by this transaction)
UPDATE denpyo_submissions SET
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    next_attempt_at = now() + make_interval(secs => %(lease)s::float8)
WHERE id = ANY(%(ids)s::bigint[]);

-- list_submissions_removable: one batch of rows that retention lets go, oldest first: synced, and rejected or failed rows a person resolved, each older than its state's age (NULL: kept); read by the index on created_at, up to the youngest age
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE created_at < now() - make_interval(secs => %(youngest)s::float8)
  AND {{removable}}
ORDER BY created_at
LIMIT %(limit)s;

-- count_submissions_removable: how many rows retention lets go now, per channel and status (a prune's or an archive's dry run)
SELECT channel, status, COUNT(*) AS n FROM denpyo_submissions
WHERE created_at < now() - make_interval(secs => %(youngest)s::float8)
  AND {{removable}}
GROUP BY channel, status
ORDER BY channel, status;

-- remember_keys: what the rows about to be removed leave behind, one row per key: their outcome, and the resend that replaced each; a key already remembered takes the row's values now (a removal run again after a crash); back how many, and this transaction's id, which the removal waits past before it deletes (PostgresStore.remove_in)
WITH kept AS (
    INSERT INTO denpyo_keys (
        channel, key, idempotency_key, submission_id, status, attempts, error_kind,
        remote_id, resolution, supersedes, superseded_by, created_at, synced_at, archived_to
    )
    SELECT s.channel, s.key, s.idempotency_key, s.id, s.status, s.attempts, s.error_kind,
           s.remote_id, s.resolution, s.supersedes,
           -- `+ 0`: read by the partial index on supersedes, not by walking the primary key
           COALESCE((SELECT MIN(n.id + 0) FROM denpyo_submissions n WHERE n.supersedes = s.id),
                    (SELECT MIN(k.submission_id + 0) FROM denpyo_keys k
                     WHERE k.supersedes = s.id)),
           s.created_at, s.synced_at, %(archived_to)s::text
    FROM denpyo_submissions s
    WHERE s.id = ANY(%(ids)s::bigint[])
      AND {{removable s}}
    ORDER BY s.id  -- removals of the same rows lock their keys in the same order
    ON CONFLICT (channel, key) DO UPDATE SET
        idempotency_key = EXCLUDED.idempotency_key, submission_id = EXCLUDED.submission_id,
        status = EXCLUDED.status, attempts = EXCLUDED.attempts,
        error_kind = EXCLUDED.error_kind, remote_id = EXCLUDED.remote_id,
        resolution = EXCLUDED.resolution, supersedes = EXCLUDED.supersedes,
        superseded_by = EXCLUDED.superseded_by, created_at = EXCLUDED.created_at,
        synced_at = EXCLUDED.synced_at, removed_at = EXCLUDED.removed_at,
        archived_to = EXCLUDED.archived_to
    RETURNING 1
)
SELECT COUNT(*) AS kept, pg_current_xact_id()::text AS xid FROM kept;

-- find_snapshot_holder: the other session of this database whose oldest snapshot is oldest, if any may have been taken before transaction :xid committed (its xmin at or before :xid): the sessions a removal waits for (PostgresStore.remove_in)
-- backend_xmin is shown to every role (backend_type is not: NULL for another role's
-- session, which is then waited for). Autovacuum and WAL senders insert no rows.
-- age() compares the 32-bit xids as the server does, wraparound included.
SELECT pid, age(backend_xmin) AS xmin_age,
    EXTRACT(epoch FROM now() - xact_start)::float8 AS seconds
FROM pg_stat_activity
WHERE datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid <> pg_backend_pid()
  AND backend_xmin IS NOT NULL
  AND backend_type IS DISTINCT FROM 'autovacuum worker'
  AND backend_type IS DISTINCT FROM 'walsender'
  AND age(backend_xmin) >= age(%(xid)s::text::xid8::xid)
ORDER BY age(backend_xmin) DESC
LIMIT 1;

-- remove_submissions: the rows of :ids that retention still lets go and whose keys remember_keys committed, deleted with their history; their keys remembered as they were when deleted, and their places added to the counts kept per day of creation (UTC), channel, status and error kind; back how many went
WITH gone AS (
    DELETE FROM denpyo_submissions s USING denpyo_keys k
    WHERE s.id = ANY(%(ids)s::bigint[])
      AND {{removable s}}
      AND k.channel = s.channel AND k.key = s.key AND k.submission_id = s.id
    RETURNING s.id, s.channel, s.key, s.idempotency_key, s.status, s.attempts, s.error_kind,
        s.remote_id, s.resolution, s.supersedes, s.created_at, s.synced_at
), kept AS (  -- each key is remembered already: this takes the final values
    INSERT INTO denpyo_keys (
        channel, key, idempotency_key, submission_id, status, attempts, error_kind,
        remote_id, resolution, supersedes, superseded_by, created_at, synced_at, archived_to
    )
    SELECT g.channel, g.key, g.idempotency_key, g.id, g.status, g.attempts, g.error_kind,
           g.remote_id, g.resolution, g.supersedes,
           -- the statement's snapshot still holds the rows it deletes
           COALESCE((SELECT MIN(n.id + 0) FROM denpyo_submissions n WHERE n.supersedes = g.id),
                    (SELECT MIN(k.submission_id + 0) FROM denpyo_keys k
                     WHERE k.supersedes = g.id)),
           g.created_at, g.synced_at, %(archived_to)s::text
    FROM gone g
    ORDER BY g.id
    ON CONFLICT (channel, key) DO UPDATE SET
        idempotency_key = EXCLUDED.idempotency_key, submission_id = EXCLUDED.submission_id,
        status = EXCLUDED.status, attempts = EXCLUDED.attempts,
        error_kind = EXCLUDED.error_kind, remote_id = EXCLUDED.remote_id,
        resolution = EXCLUDED.resolution, supersedes = EXCLUDED.supersedes,
        superseded_by = EXCLUDED.superseded_by, created_at = EXCLUDED.created_at,
        synced_at = EXCLUDED.synced_at, removed_at = EXCLUDED.removed_at,
        archived_to = EXCLUDED.archived_to
), counted AS (
    INSERT INTO denpyo_removed_counts (day, channel, status, error_kind, n)
    SELECT (created_at AT TIME ZONE 'UTC')::date, channel, status, COALESCE(error_kind, ''),
           COUNT(*)
    FROM gone
    GROUP BY 1, 2, 3, 4
    ON CONFLICT (day, channel, status, error_kind)
    DO UPDATE SET n = denpyo_removed_counts.n + EXCLUDED.n
), events AS (  -- no foreign key since schema 4: the history goes with its row here
    DELETE FROM denpyo_events e USING gone WHERE e.submission_id = gone.id
)
SELECT COUNT(*) AS removed FROM gone;

-- expire_keys: one batch of remembered keys whose rows were created before the cutoff, oldest first (keys_kept_for)
DELETE FROM denpyo_keys WHERE (channel, key) IN (
    SELECT channel, key FROM denpyo_keys
    WHERE created_at < now() - make_interval(secs => %(older_than)s::float8)
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING submission_id;

-- mark_key_resent: a person resent a removed row as :new_id: its memory records the resolution and the new row (nothing when it was resent already, or its payload forgotten)
UPDATE denpyo_keys SET resolution = %(resolution)s, superseded_by = %(new_id)s
WHERE submission_id = %(id)s AND superseded_by IS NULL AND forgotten_at IS NULL;

-- get_key: a removed row's key and outcome, by channel and business key
SELECT * FROM denpyo_keys
WHERE channel = %(channel)s AND key = %(key)s AND removed_at IS NOT NULL;

-- get_key_by_id: a removed row's key and outcome, by the row's id
SELECT * FROM denpyo_keys WHERE submission_id = %(id)s AND removed_at IS NOT NULL;

-- find_key_superseding: the removed resend that replaced a submission, if any
SELECT * FROM denpyo_keys WHERE supersedes = %(id)s AND removed_at IS NOT NULL
ORDER BY submission_id LIMIT 1;

-- get_keys_by_idempotency_keys: removed rows of a list of idempotency keys (the audit)
SELECT * FROM denpyo_keys
WHERE idempotency_key = ANY(%(keys)s::text[]) AND removed_at IS NOT NULL;

-- get_keys_recorded_before: the remembered keys of a batch's channels and keys that no live row holds, with the item's place in the batch (a bulk insert skipped them)
SELECT k.*, n.ord
FROM unnest(%(channel)s::text[], %(key)s::text[]) WITH ORDINALITY AS n(channel, key, ord)
JOIN denpyo_keys k ON k.channel = n.channel AND k.key = n.key
WHERE NOT EXISTS (
    SELECT 1 FROM denpyo_submissions s WHERE s.channel = n.channel AND s.key = n.key)
ORDER BY n.ord;

-- count_report: rows per day of creation (UTC), channel, status and error kind in [since, until) (days): the live rows where they stand now, and the removed ones as they were counted when they went
SELECT day, channel, status, error_kind, SUM(n)::bigint AS n FROM (
    SELECT (created_at AT TIME ZONE 'UTC')::date AS day, channel, status,
           COALESCE(error_kind, '') AS error_kind, COUNT(*) AS n
    FROM denpyo_submissions
    WHERE created_at >= %(since)s::date::timestamp AT TIME ZONE 'UTC'
      AND created_at < %(until)s::date::timestamp AT TIME ZONE 'UTC'
      AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
    GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT day, channel, status, error_kind, n FROM denpyo_removed_counts
    WHERE day >= %(since)s::date AND day < %(until)s::date
      AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
) AS counted
GROUP BY day, channel, status, error_kind
ORDER BY day, channel, status, error_kind;

-- The writes: PostgreSQL does in one statement what the other databases do in several
-- (store/portable.py): fewer round trips on the hot path.

-- record_submission: insert a row with its created (and first attempt) events, and wake the workers; nothing when (channel, key) exists, or existed and is remembered (denpyo_keys)
-- A remembered key's row may be gone: the unique index no longer stops the insert, the
-- NOT EXISTS does, on this statement's snapshot. The removal deletes a row only once no
-- snapshot taken before its key was committed is left (PostgresStore.remove_in): either
-- this snapshot sees the key, or the row is still there for ON CONFLICT to meet.
-- traceparent, tracestate: the W3C trace context the row was written in (NULL: none).
WITH new AS (
    INSERT INTO denpyo_submissions (
        channel, key, idempotency_key, payload, status, attempts, ordering_key, supersedes,
        locked_by, locked_until, next_attempt_at, traceparent, tracestate
    )
    SELECT %(channel)s::text, %(key)s::text, %(idempotency_key)s::text, %(payload)s::jsonb,
        'requesting', 0, %(ordering_key)s::text, %(supersedes)s::bigint,
        %(locked_by)s::text, now() + make_interval(secs => %(lease)s::float8),
        now() + make_interval(secs => COALESCE(%(lease)s::float8, 0)),
        %(traceparent)s::text, %(tracestate)s::text
    WHERE NOT EXISTS (
        SELECT 1 FROM denpyo_keys WHERE channel = %(channel)s::text AND key = %(key)s::text)
    ON CONFLICT (channel, key) DO NOTHING
    RETURNING *
), events AS (
    INSERT INTO denpyo_events
        (submission_id, kind, from_status, to_status, attempt, actor, detail)
    SELECT id, 'created', NULL, 'requesting', 0, %(actor)s, %(detail)s FROM new
    UNION ALL
    SELECT id, 'attempt', 'requesting', 'requesting', 1, %(actor)s, NULL FROM new
    WHERE %(lease)s::float8 IS NOT NULL
), woken AS (
    SELECT pg_notify('denpyo', %(channel)s) FROM new WHERE %(lease)s::float8 IS NULL
)
SELECT new.*, false AS in_doubt, (SELECT COUNT(*) FROM woken) AS woken FROM new;

-- claim_submissions_ready: lock up to :limit due rows of a channel and hold them to send, with their attempt events (each counted once its call started)
WITH due AS (
    SELECT s.id, s.status FROM denpyo_submissions s
    WHERE s.channel = %(channel)s
      AND s.next_attempt_at <= now()
      AND ((s.status = 'requesting' AND s.locked_until IS NULL)
           OR (s.status = 'failed' AND s.error_kind = 'transient'
               AND s.next_attempt_at IS NOT NULL))  -- as the index `denpyo_submissions_ready`
      AND s.resolution IS NULL
      AND (s.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM denpyo_submissions h
            WHERE h.channel = s.channel AND h.ordering_key = s.ordering_key AND h.id < s.id
              AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL))
    ORDER BY s.next_attempt_at, s.id
    LIMIT %(limit)s
    FOR UPDATE OF s SKIP LOCKED
), claimed AS (
    UPDATE denpyo_submissions s SET
        status = 'requesting',
        locked_by = %(holder)s,
        locked_until = now() + make_interval(secs => %(lease)s::float8),
        next_attempt_at = now() + make_interval(secs => %(lease)s::float8),
        updated_at = now()
    FROM due WHERE s.id = due.id
    RETURNING s.*, due.status AS previous_status
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'attempt', previous_status, 'requesting', attempts + 1, %(holder)s FROM claimed
)
SELECT claimed.*, false AS in_doubt FROM claimed ORDER BY id;

-- claim_submissions_in_doubt: hold up to :limit due in-doubt rows of a channel for one verifier (status kept, no event)
WITH due AS (
    SELECT s.id FROM denpyo_submissions s
    WHERE s.channel = %(channel)s
      AND s.next_attempt_at <= now()
      AND ((s.status = 'requesting' AND s.locked_until <= now())
           OR (s.status = 'failed' AND s.error_kind = 'ambiguous'
               AND s.next_attempt_at IS NOT NULL))  -- as the index `denpyo_submissions_in_doubt`
      AND s.resolution IS NULL
    ORDER BY s.next_attempt_at, s.id
    LIMIT %(limit)s
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE denpyo_submissions s SET
    locked_by = %(holder)s,
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    next_attempt_at = now() + make_interval(secs => %(lease)s::float8),
    updated_at = now()
FROM due WHERE s.id = due.id
RETURNING s.*,
    {{in_doubt s}} AS in_doubt;

-- move_submission_one: compare-and-set one row from its expected status and holder to its next state, with its event; a row a person resolved takes only a move that resolves it again
-- The batch below, given one move (an inline submit's settle, say), is planned
-- again at each run (its plan depends on how many rows the array holds). This
-- one is planned once per session, and its only usable index is the primary key:
-- the status is compared with IS NOT DISTINCT FROM, which no index serves, so a
-- plan made on a young table with no statistics cannot pick the status index and
-- walk every row of that status.
WITH moved AS (
    UPDATE denpyo_submissions SET
        status = %(to_status)s,
        attempts = attempts + %(attempt_delta)s,
        locked_by = %(locked_by)s,
        locked_until = now() + make_interval(secs => %(lease)s::float8),
        next_attempt_at = CASE
            WHEN %(lease)s::float8 > 0 THEN now() + make_interval(secs => %(lease)s::float8)
            ELSE now() + make_interval(secs => %(retry_in)s::float8) END,
        remote_id = COALESCE(%(remote_id)s, remote_id),
        last_error = CASE WHEN %(keep_error)s THEN last_error ELSE %(last_error)s END,
        error_kind = CASE WHEN %(keep_error)s THEN error_kind ELSE %(error_kind)s END,
        resolution = COALESCE(%(resolution)s, resolution),
        synced_at = CASE WHEN %(to_status)s = 'synced' THEN now() ELSE synced_at END,
        updated_at = now()
    WHERE id = %(id)s AND status IS NOT DISTINCT FROM %(from_status)s::text
      AND (locked_by IS NOT DISTINCT FROM %(holder)s::text
           OR (%(holder)s::text IS NULL
               AND (locked_until IS NULL OR locked_until <= now())))
      AND (%(resolution)s::text IS NOT NULL OR resolution IS NULL)
    RETURNING *,
        {{in_doubt}} AS in_doubt
), events AS (
    INSERT INTO denpyo_events
        (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
    SELECT id, %(event)s::text, %(from_status)s, status,
        CASE WHEN %(event)s::text = 'attempt' THEN attempts + 1 ELSE attempts END,  -- moves.event_attempt
        %(actor)s, %(detail)s, %(duration_ms)s::int
    FROM moved WHERE %(event)s::text IS NOT NULL
)
SELECT id, channel, key, idempotency_key,
    CASE WHEN %(payload_known)s THEN NULL ELSE payload END AS payload,  -- the mover has it
    status, attempts, next_attempt_at, locked_by, locked_until, remote_id, last_error,
    error_kind, ordering_key, created_at, updated_at, synced_at, resolution, supersedes,
    in_doubt, %(ord)s::int AS ord
FROM moved;

-- move_submissions_batch: compare-and-set many rows at once (as move_submission_one), with their events
-- The moves arrive as one JSON array of objects. Typed arrays, one per field, were
-- measured as no cheaper: psycopg builds arrays in Python, the JSON in C (bench/CHANGES.md).
WITH m AS (
    SELECT * FROM jsonb_to_recordset(%(moves)s::jsonb) AS m(
        ord int, id bigint, from_status text, to_status text, holder text,
        locked_by text, lease float8, attempt_delta int, retry_in float8, remote_id text,
        keep_error bool, error_kind text, last_error text, resolution text, event text,
        actor text, detail text, duration_ms int, payload_known bool)
), moved AS (
    UPDATE denpyo_submissions s SET
        status = m.to_status,
        attempts = s.attempts + m.attempt_delta,
        locked_by = m.locked_by,
        locked_until = now() + make_interval(secs => m.lease),
        next_attempt_at = CASE
            WHEN m.lease > 0 THEN now() + make_interval(secs => m.lease)
            ELSE now() + make_interval(secs => m.retry_in) END,
        remote_id = COALESCE(m.remote_id, s.remote_id),
        last_error = CASE WHEN m.keep_error THEN s.last_error ELSE m.last_error END,
        error_kind = CASE WHEN m.keep_error THEN s.error_kind ELSE m.error_kind END,
        resolution = COALESCE(m.resolution, s.resolution),
        synced_at = CASE WHEN m.to_status = 'synced' THEN now() ELSE s.synced_at END,
        updated_at = now()
    FROM m
    WHERE s.id = ANY(%(ids)b::bigint[])  -- reach the rows by primary key, whatever the statistics
      AND s.id = m.id AND s.status = m.from_status
      AND (s.locked_by IS NOT DISTINCT FROM m.holder
           OR (m.holder IS NULL
               AND (s.locked_until IS NULL OR s.locked_until <= now())))
      AND (m.resolution IS NOT NULL OR s.resolution IS NULL)
    RETURNING s.*, m.ord, m.event, m.actor AS event_actor, m.detail AS event_detail,
        m.duration_ms AS event_duration_ms, m.from_status AS event_from, m.payload_known,
        {{in_doubt s}} AS in_doubt
), events AS (
    INSERT INTO denpyo_events
        (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
    SELECT id, event, event_from, status,
        CASE WHEN event = 'attempt' THEN attempts + 1 ELSE attempts END,  -- moves.event_attempt
        event_actor, event_detail, event_duration_ms
    FROM moved WHERE event IS NOT NULL
)
-- A mover that has the row (the worker) gets back only what a move can change:
-- the columns a move never changes are NULL, and come from its copy.
SELECT id, ord, status, attempts, next_attempt_at, locked_by, locked_until, remote_id,
    last_error, error_kind, updated_at, synced_at, resolution, in_doubt, payload_known,
    CASE WHEN payload_known THEN NULL ELSE channel END AS channel,
    CASE WHEN payload_known THEN NULL ELSE key END AS key,
    CASE WHEN payload_known THEN NULL ELSE idempotency_key END AS idempotency_key,
    CASE WHEN payload_known THEN NULL ELSE payload END AS payload,
    CASE WHEN payload_known THEN NULL ELSE ordering_key END AS ordering_key,
    CASE WHEN payload_known THEN NULL ELSE created_at END AS created_at,
    CASE WHEN payload_known THEN NULL ELSE supersedes END AS supersedes
FROM moved;

-- settle_submissions_many: end attempts their holders still hold (`requesting` to how each ended, each call counted), with their settle events: the worker's commit of finished calls
-- The common move of the hot path, lean: one typed array per thing a settle
-- changes (an array of NULLs goes as one NULL: unnest pads it), the event written
-- from what the statement already has, and back only what the mover cannot know.
-- A lone settle (an inline submit's) takes settle_submission_one, planned once.
WITH m AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(holders)s::text[], %(statuses)s::text[],
                         %(remote_ids)s::text[], %(retry_ins)s::float8[],
                         %(error_kinds)s::text[], %(last_errors)s::text[],
                         %(durations)s::int[])
        AS m(id, holder, to_status, remote_id, retry_in, error_kind, last_error, duration_ms)
), moved AS (
    UPDATE denpyo_submissions s SET
        status = m.to_status,
        attempts = s.attempts + 1,
        locked_by = NULL,
        locked_until = NULL,
        next_attempt_at = now() + make_interval(secs => m.retry_in),
        remote_id = COALESCE(m.remote_id, s.remote_id),
        last_error = m.last_error,
        error_kind = m.error_kind,
        synced_at = CASE WHEN m.to_status = 'synced' THEN now() ELSE s.synced_at END,
        updated_at = now()
    FROM m  -- joined by id alone: on a large table with no statistics yet, the plan
            -- still walks the arrays and reaches each row by its primary key
    WHERE s.id = m.id AND s.status = 'requesting' AND s.locked_by = m.holder
    RETURNING s.id, s.status, s.attempts, s.next_attempt_at, s.remote_id, s.updated_at,
        s.synced_at, s.resolution, m.last_error, m.duration_ms,
        COALESCE(m.last_error, m.remote_id) AS detail,
        {{in_doubt s}} AS in_doubt
), events AS (
    INSERT INTO denpyo_events
        (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
    SELECT id, 'settle', 'requesting', status, attempts, %(actor)s, detail, duration_ms
    FROM moved
)
SELECT id, next_attempt_at, remote_id, updated_at, synced_at, resolution, in_doubt FROM moved;

-- settle_submission_one: end one attempt its holder still holds, with its settle event: settle_submissions_many for a lone row (an inline submit's settle), planned once per session as move_submission_one is, and as lean
WITH moved AS (
    UPDATE denpyo_submissions SET
        status = %(to_status)s,
        attempts = attempts + 1,
        locked_by = NULL,
        locked_until = NULL,
        next_attempt_at = now() + make_interval(secs => %(retry_in)s::float8),
        remote_id = COALESCE(%(remote_id)s, remote_id),
        last_error = %(last_error)s,
        error_kind = %(error_kind)s,
        synced_at = CASE WHEN %(to_status)s = 'synced' THEN now() ELSE synced_at END,
        updated_at = now()
    WHERE id = %(id)s AND status = 'requesting' AND locked_by = %(holder)s
    RETURNING id, status, attempts, next_attempt_at, remote_id, updated_at, synced_at,
        resolution, {{in_doubt}} AS in_doubt
), events AS (
    INSERT INTO denpyo_events
        (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
    SELECT id, 'settle', 'requesting', status, attempts, %(actor)s,
        COALESCE(%(last_error)s, %(remote_id)s), %(duration_ms)s::int
    FROM moved
)
SELECT id, next_attempt_at, remote_id, updated_at, synced_at, resolution, in_doubt FROM moved;

-- record_submissions_many: insert many rows for the workers, with their events, in one statement; keys that exist, or existed and are remembered (denpyo_keys), are skipped (as record_submission)
WITH input AS (
    SELECT * FROM unnest(
        %(channel)b::text[], %(key)b::text[], %(idempotency_key)b::text[], %(payload)b::text[],
        %(ordering_key)b::text[], %(traceparent)b::text[], %(tracestate)b::text[]
    ) WITH ORDINALITY AS i(
        channel, key, idempotency_key, payload, ordering_key, traceparent, tracestate, n)
), new AS (
    INSERT INTO denpyo_submissions (
        channel, key, idempotency_key, payload, status, attempts, ordering_key, next_attempt_at,
        traceparent, tracestate
    )
    SELECT channel, key, idempotency_key, payload::jsonb, 'requesting', 0, ordering_key, now(),
        traceparent, tracestate
    FROM input
    WHERE NOT EXISTS (
        SELECT 1 FROM denpyo_keys k WHERE k.channel = input.channel AND k.key = input.key)
    ORDER BY n
    ON CONFLICT (channel, key) DO NOTHING
    RETURNING id, channel
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'created', NULL, 'requesting', 0, %(actor)s FROM new
), woken AS (
    SELECT pg_notify('denpyo', channel) FROM (SELECT DISTINCT channel FROM new) AS channels
)
SELECT (SELECT COUNT(*) FROM new) AS created, (SELECT COUNT(*) FROM woken) AS woken;

-- copy_submissions: rows for the workers, streamed in (text format; each row has 'requesting', 0, 'now': `now` is the transaction's start, as now(); then its trace context)
COPY denpyo_submissions (
    channel, key, idempotency_key, payload, ordering_key, status, attempts, next_attempt_at,
    traceparent, tracestate
) FROM STDIN;

-- record_submissions_copied: the created events of the rows one COPY wrote, from the row of :first to the row of :last, and wake the workers; nothing written, and `remembered` true, when a copied key is remembered (denpyo_keys: its row was removed), for the copy to be undone
-- COPY returns no ids. Its rows took their ids from this session in the order
-- they were written (a session's ids only grow), so they lie between the ids of
-- its first and last rows, and they were written by the same (sub)transaction as
-- those two; rows other sessions inserted meanwhile have ids in that range too,
-- never that xmin. The range is bounded on both sides, so that even on a table
-- without statistics the planner reads it from the primary key.
-- COPY has no WHERE: a remembered key whose row is gone goes in, and is found here.
-- The removal deleted that row only once no snapshot older than its key was left
-- (PostgresStore.remove_in), so the snapshot this statement reads (its own, or the
-- transaction's in REPEATABLE READ) is younger than the key, and sees it.
WITH copied AS (
    SELECT f.id AS first_id, l.id AS last_id, f.xmin
    FROM denpyo_submissions f, denpyo_submissions l
    WHERE f.idempotency_key = %(first)s AND l.idempotency_key = %(last)s
), new AS (
    SELECT s.id, s.channel, s.key FROM denpyo_submissions s
    WHERE s.id BETWEEN (SELECT first_id FROM copied) AND (SELECT last_id FROM copied)
      AND s.xmin = (SELECT xmin FROM copied)
), remembered AS (
    SELECT EXISTS (
        SELECT 1 FROM new JOIN denpyo_keys k ON k.channel = new.channel AND k.key = new.key
    ) AS found
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'created', NULL, 'requesting', 0, %(actor)s FROM new
    WHERE NOT (SELECT found FROM remembered)
    ORDER BY id
), woken AS (
    SELECT pg_notify('denpyo', channel) FROM (SELECT DISTINCT channel FROM new) AS channels
    WHERE NOT (SELECT found FROM remembered)
)
SELECT (SELECT COUNT(*) FROM new) AS created, (SELECT COUNT(*) FROM woken) AS woken,
    (SELECT found FROM remembered) AS remembered;

-- get_submissions_recorded_before: the rows that hold a batch's channels and keys under other idempotency keys than the batch's (recorded before it, or by an earlier item of it), with the item's place in the batch
SELECT s.*,
    {{in_doubt s}} AS in_doubt,
    n.ord
FROM unnest(%(channel)s::text[], %(key)s::text[], %(idempotency_key)s::text[])
    WITH ORDINALITY AS n(channel, key, idempotency_key, ord)
JOIN denpyo_submissions s ON s.channel = n.channel AND s.key = n.key
WHERE s.idempotency_key <> n.idempotency_key
ORDER BY n.ord;

-- compact_submission_counts: fold the running counts into one row per channel, status, kind and resolution
WITH gone AS (DELETE FROM denpyo_status_counts RETURNING channel, status, kind, resolved, n)
INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
SELECT channel, status, kind, resolved, SUM(n) FROM gone
GROUP BY channel, status, kind, resolved HAVING SUM(n) <> 0;

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
FROM (SELECT id FROM denpyo_submissions
      WHERE channel = %(channel)s AND key >= %(prefix)s
        AND (%(after)s::text IS NULL OR key > %(after)s::text)
      ORDER BY key LIMIT %(scan)s) AS k
JOIN denpyo_submissions s ON s.id = k.id
WHERE substr(s.key, 1, length(%(prefix)s::text)) = %(prefix)s::text
ORDER BY s.key
LIMIT %(limit)s;

-- list_submission_needs_person_page: the needs-a-person queue below id :before, newest first: unresolved rows waiting for a person (index denpyo_submissions_attention), and rows whose lease ran out (index denpyo_submissions_in_doubt)
SELECT * FROM (
    SELECT *,
        {{in_doubt}} AS in_doubt
    FROM denpyo_submissions
    WHERE {{attention_index}} AND id < %(before)s
    ORDER BY id DESC LIMIT %(limit)s) AS waiting
UNION ALL
SELECT * FROM (
    SELECT *, true AS in_doubt
    FROM denpyo_submissions
    WHERE status = 'requesting' AND locked_until IS NOT NULL AND locked_until <= now()
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
    WHERE id > %(after)s AND at <= now() - make_interval(secs => %(lag)s::float8)
    ORDER BY id LIMIT %(limit)s) AS batch;

-- add_outcome_fold: add a batch of events to the outcomes per minute: each call that ended (a settle, or a verify that found a call its sender never settled at the provider) once as `sent` and once by the status it reached
INSERT INTO denpyo_outcome_minutes (minute, channel, outcome, n)
SELECT date_trunc('minute', e.at), s.channel, counted.outcome, COUNT(*)
FROM denpyo_events e JOIN denpyo_submissions s ON s.id = e.submission_id
CROSS JOIN LATERAL (VALUES ('sent'), (e.to_status)) AS counted(outcome)
WHERE e.id > %(after)s AND e.id <= %(upto)s
  AND (e.kind = 'settle'
       OR (e.kind = 'verify' AND e.from_status = 'requesting' AND e.to_status = 'synced'))
GROUP BY 1, 2, 3
ON CONFLICT (minute, channel, outcome)
DO UPDATE SET n = denpyo_outcome_minutes.n + excluded.n;

-- advance_outcome_fold: record where the fold stopped
UPDATE denpyo_outcome_cursor SET last_event_id = %(upto)s WHERE id = 1;

-- trim_outcome_fold: forget minutes older than 25 hours
DELETE FROM denpyo_outcome_minutes WHERE minute < now() - interval '25 hours';

-- count_outcomes_per_minute: outcomes per minute since :hours ago (optionally one channel)
SELECT minute, outcome, SUM(n) AS n FROM denpyo_outcome_minutes
WHERE minute >= date_trunc('minute', now() - make_interval(hours => %(hours)s))
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
GROUP BY minute, outcome
ORDER BY minute, outcome;

-- What the fleet shares about each channel (store/controls.py): read once per poll,
-- written when something happens. A channel's row is made by its first write.

-- ensure_channel: the channel's row, made if missing (active, no history)
INSERT INTO denpyo_channels (channel) VALUES (%(channel)s) ON CONFLICT (channel) DO NOTHING;

-- list_channels: every channel's state, and the database clock it was read by
SELECT *, now() AS now FROM denpyo_channels ORDER BY channel;

-- lock_channel: lock one channel's row for a fleet limit's claim or reservation: the fleet rate limit's next start, and the database clock
SELECT next_start, now() AS now FROM denpyo_channels WHERE channel = %(channel)s FOR UPDATE;

-- start_channel_after: the fleet rate limit's clock moved on: no call of the channel starts before :at but those reserved
UPDATE denpyo_channels SET next_start = %(at)s WHERE channel = %(channel)s;

-- count_channel_held: the channel's rows held now under a live lease, by any worker (the fleet's calls in flight, and the rows claimed to start next)
SELECT COUNT(*) AS n FROM denpyo_submissions
WHERE channel = %(channel)s AND status = 'requesting' AND locked_until > now();

-- pause_channel: a person pauses the channel (nothing when it is paused already)
UPDATE denpyo_channels SET paused_at = now(), paused_by = %(actor)s, paused_note = %(note)s,
    updated_at = now()
WHERE channel = %(channel)s AND paused_at IS NULL;

-- resume_channel: a person resumes the channel (nothing when it is not paused)
UPDATE denpyo_channels SET paused_at = NULL, paused_by = NULL, paused_note = NULL,
    updated_at = now()
WHERE channel = %(channel)s AND paused_at IS NOT NULL;

-- throttle_channel: the provider asked the channel to wait :seconds (a Retry-After): no call starts before then, unless a longer wait is already asked
UPDATE denpyo_channels SET throttled_until = now() + make_interval(secs => %(seconds)s::float8),
    throttled_note = %(note)s, updated_at = now()
WHERE channel = %(channel)s
  AND (throttled_until IS NULL OR throttled_until < now() + make_interval(secs => %(seconds)s::float8));

-- mark_channel_down: the provider is down: one probe call in :seconds (nothing when it is down already)
UPDATE denpyo_channels SET down_since = now(),
    probe_at = now() + make_interval(secs => %(seconds)s::float8),
    down_note = %(note)s, probe_every = %(seconds)s::float8, updated_at = now()
WHERE channel = %(channel)s AND down_since IS NULL;

-- probe_channel: take the next probe call of a channel that is down, if it is due; the one after it waits :seconds (nothing when another took it)
UPDATE denpyo_channels SET probe_at = now() + make_interval(secs => %(seconds)s::float8),
    probe_every = %(seconds)s::float8, updated_at = now()
WHERE channel = %(channel)s AND down_since IS NOT NULL AND probe_at <= now();

-- mark_channel_up: a call succeeded: the provider is up again (nothing when it was not down)
UPDATE denpyo_channels SET down_since = NULL, down_note = NULL, probe_at = NULL, probe_every = NULL,
    updated_at = now()
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
    %(kind)s::text, %(scope)s::text, %(target)s::text, %(params)s::text, %(plan)s::text,
    %(state)s::text, %(actor)s::text, %(note)s::text,
    CASE WHEN %(lapses_in)s::float8 IS NULL THEN NULL
         ELSE now() + make_interval(secs => %(lapses_in)s::float8) END,
    %(total)s::bigint, %(holder)s::text,
    CASE WHEN %(holder)s::text IS NULL THEN NULL
         ELSE now() + make_interval(secs => %(lease)s::float8) END
)
RETURNING id;

-- add_action_row: one row behind an action
INSERT INTO denpyo_action_rows (action_id, submission_id) VALUES (%(action_id)s::bigint, %(submission_id)s::bigint);

-- freeze_action_rows: every row an operator's filter finds now, behind an action (a bulk action's set, frozen as its ids)
INSERT INTO denpyo_action_rows (action_id, submission_id)
SELECT %(action_id)s::bigint, id FROM denpyo_submissions WHERE {{list_filter}};

-- total_action: an action counts the rows behind it
UPDATE denpyo_actions
SET total = (SELECT COUNT(*) FROM denpyo_action_rows WHERE action_id = %(id)s::bigint)
WHERE id = %(id)s::bigint;

-- get_action: one action, and the database clock
SELECT *, now() AS now FROM denpyo_actions WHERE id = %(id)s::bigint;

-- list_actions: the action log, newest first: by person (whatever the case of the name), kind, state and time (each optional)
SELECT *, now() AS now FROM denpyo_actions
WHERE id < %(before)s::bigint
  AND (%(actor)s::text IS NULL OR lower(actor) = lower(%(actor)s::text))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
ORDER BY id DESC
LIMIT %(limit)s::bigint;

-- count_action_rows_pending: the next rows of an action not yet done nor skipped, in id order from :after
SELECT submission_id FROM denpyo_action_rows
WHERE action_id = %(id)s::bigint AND submission_id > %(after)s::bigint AND outcome IS NULL
ORDER BY submission_id
LIMIT %(limit)s::bigint;

-- get_action_rows_of_batch: the rows of an action's batch, :first to :last, not yet done nor skipped
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id IN (SELECT submission_id FROM denpyo_action_rows
             WHERE action_id = %(id)s::bigint AND submission_id BETWEEN %(first)s::bigint AND %(last)s::bigint
               AND outcome IS NULL);

-- list_action_rows: the rows behind an action and what happened to each, in id order from :after (:outcome 'pending' for those not yet done)
SELECT * FROM denpyo_action_rows
WHERE action_id = %(id)s::bigint AND submission_id > %(after)s::bigint
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text
       OR (%(outcome)s::text = 'pending' AND outcome IS NULL))
ORDER BY submission_id
LIMIT %(limit)s::bigint;

-- set_action_row_outcome: what an action did to one of its rows (nothing when it was recorded already)
UPDATE denpyo_action_rows SET outcome = %(outcome)s::text, reason = %(reason)s::text
WHERE action_id = %(action_id)s::bigint AND submission_id = %(submission_id)s::bigint AND outcome IS NULL;

-- progress_action: a batch of an action's rows is done, under the holder's lease (nothing when the action was paused, cancelled or taken over: the batch rolls back); done when no row is left
UPDATE denpyo_actions
SET state = CASE WHEN total <= done + %(done)s::bigint + skipped + %(skipped)s::bigint THEN 'done' ELSE state END,
    finished_at = CASE WHEN total <= done + %(done)s::bigint + skipped + %(skipped)s::bigint
                       THEN now() ELSE NULL END,
    done = done + %(done)s::bigint, skipped = skipped + %(skipped)s::bigint,
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    updated_at = now()
WHERE id = %(id)s::bigint AND locked_by = %(holder)s::text AND state = 'in_progress';

-- take_action: become an action's holder: an action in progress nobody carries out (no locked_by, or its lease ran out)
UPDATE denpyo_actions
SET locked_by = %(holder)s::text,
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    updated_at = now()
WHERE id = %(id)s::bigint AND state = 'in_progress'
  AND (locked_by IS NULL OR locked_by = %(holder)s::text
       OR locked_until < now());

-- let_go_action: the holder stops carrying out the action (it stays as it is for the next)
UPDATE denpyo_actions SET locked_by = NULL, locked_until = NULL
WHERE id = %(id)s::bigint AND locked_by = %(holder)s::text;

-- move_action: a person pauses, resumes or cancels an action, or an approved request starts (:from1 to :from4: the states it may leave)
UPDATE denpyo_actions
SET state = %(state)s::text,
    finished_at = CASE WHEN %(state)s::text IN ('cancelled', 'done')
                       THEN now() ELSE finished_at END,
    locked_by = NULL, locked_until = NULL,
    updated_at = now()
WHERE id = %(id)s::bigint
  AND state IN (%(from1)s::text, %(from2)s::text, %(from3)s::text, %(from4)s::text);

-- decide_action: a second person approves (state in_progress) or declines a request: never the one who asked, and not once it lapsed
UPDATE denpyo_actions
SET state = %(state)s::text, approver = %(approver)s::text, decision_note = %(note)s::text,
    decided_at = now(),
    finished_at = CASE WHEN %(state)s::text = 'declined'
                       THEN now() ELSE NULL END,
    updated_at = now()
WHERE id = %(id)s::bigint AND state = 'awaiting_approval' AND actor <> %(approver)s::text
  AND (lapses_at IS NULL OR lapses_at > now());

-- lapse_actions: requests nobody decided in time
UPDATE denpyo_actions
SET state = 'lapsed', finished_at = now(),
    updated_at = now()
WHERE state = 'awaiting_approval' AND lapses_at <= now();

-- set_action_plan: a dry run's counts and samples, and the state it leaves the action in (from planned: awaiting_approval or in_progress)
UPDATE denpyo_actions
SET plan = %(plan)s::text, state = %(state)s::text, approver = NULL,
    lapses_at = CASE WHEN %(lapses_in)s::float8 IS NULL THEN lapses_at
                      ELSE now() + make_interval(secs => %(lapses_in)s::float8) END,
    updated_at = now()
WHERE id = %(id)s::bigint AND state = %(from_state)s::text;

-- analyze_action_rows: the rows behind the actions counted again after a bulk action froze its rows; without statistics, the planner takes a just frozen action for one row and reads all its rows for each batch instead of the primary key under the LIMIT
ANALYZE denpyo_action_rows;

-- add_action_row_done: one row behind an action, with what happened to it (an action carried out in its own transaction)
INSERT INTO denpyo_action_rows (action_id, submission_id, outcome, reason)
VALUES (%(action_id)s::bigint, %(submission_id)s::bigint, %(outcome)s::text, %(reason)s::text);

-- count_action_done: an action carried out in one transaction: its counts, and done
UPDATE denpyo_actions
SET total = %(total)s::bigint, done = %(done)s::bigint, skipped = %(skipped)s::bigint,
    state = 'done', finished_at = now(), updated_at = now()
WHERE id = %(id)s::bigint;

-- Forgetting (`denpyo forget`, store/forgetting.py): a person erases the payloads of
-- closed rows and every text quoting them; the slip (status, attempts, times, ids,
-- remote id, the history of moves) stays. A person's rare errand: the searches read
-- the table by primary key, a page at a time, and no index is kept for them. The
-- same statements serve the partitioned layout.

-- match_forget_page: one page of live rows after id :after, in id order, whose payload has the string :value at :path (the field's names, an array), of one channel or all
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > %(after)s::bigint AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND jsonb_typeof(payload #> %(path)s::text[]) = 'string'
  AND payload #>> %(path)s::text[] = %(value)s::text
ORDER BY id
LIMIT %(limit)s;

-- list_forget_sealed_page: one page of live rows after id :after, in id order, whose payload is encrypted (its one key `denpyo:sealed`), of one channel or all: read as every row is, and matched one by one
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id > %(after)s::bigint AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND payload ? 'denpyo:sealed'
ORDER BY id
LIMIT %(limit)s;

-- lock_forget: lock a batch's rows and read them as they are now
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id = ANY(%(ids)s::bigint[])
FOR UPDATE;

-- forget_payload: erase a closed row's payload (JSON null) and last error, its resolution replaced; nothing when it is open again (requesting, due, or held) or forgotten already. Its status, counts and times stay
UPDATE denpyo_submissions
SET payload = 'null'::jsonb, last_error = NULL, resolution = %(resolution)s::text,
    forgotten_at = now()
WHERE id = %(id)s::bigint AND forgotten_at IS NULL
  AND status <> 'requesting' AND next_attempt_at IS NULL
  AND (locked_until IS NULL OR locked_until <= now());

-- add_forget_event: the `forgotten` line of a row's history: who, and the person's note (no move: its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (%(submission_id)s::bigint, 'forgotten', %(status)s::text, %(status)s::text,
        %(attempt)s::int, %(actor)s::text, %(detail)s::text);

-- list_forget_event_details: the details of a batch's histories, to be replaced
SELECT id, submission_id, detail FROM denpyo_events
WHERE submission_id = ANY(%(ids)s::bigint[]) AND detail IS NOT NULL;

-- scrub_forget_events: one event's detail, replaced
UPDATE denpyo_events SET detail = %(detail)s::text
WHERE submission_id = %(submission_id)s::bigint AND id = %(id)s::bigint;

-- list_forget_action_texts: the texts of the actions on a batch's rows but the forget's own (:action_id); the action rows found by the row (index denpyo_action_rows_by_row)
SELECT id, kind, note, decision_note, params, plan FROM denpyo_actions
WHERE id <> %(action_id)s::bigint
  AND id IN (SELECT action_id FROM denpyo_action_rows
             WHERE submission_id = ANY(%(ids)s::bigint[]));

-- scrub_forget_actions: one action's texts, replaced
UPDATE denpyo_actions
SET note = %(note)s::text, decision_note = %(decision_note)s::text,
    params = %(params)s::text, plan = %(plan)s::text
WHERE id = %(id)s::bigint;

-- list_forget_action_reasons: why actions skipped a batch's rows, to be replaced
SELECT action_id, submission_id, reason FROM denpyo_action_rows
WHERE submission_id = ANY(%(ids)s::bigint[]) AND reason IS NOT NULL;

-- scrub_forget_action_reasons: why an action skipped one row, replaced
UPDATE denpyo_action_rows SET reason = %(reason)s::text
WHERE action_id = %(action_id)s::bigint AND submission_id = %(submission_id)s::bigint;

-- forget_key: a removed row's memory forgotten now (its archive rewritten first), its resolution replaced; nothing when it was forgotten already (or, in the partitioned layout, the row is live)
UPDATE denpyo_keys SET forgotten_at = now(), resolution = %(resolution)s::text
WHERE submission_id = %(id)s::bigint AND removed_at IS NOT NULL AND forgotten_at IS NULL;

-- list_forget_archives: where removed rows were archived, of one channel or all: the archives a search by a payload's field reads
SELECT DISTINCT archived_to FROM denpyo_keys
WHERE archived_to IS NOT NULL AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
ORDER BY archived_to;

-- find_forget_pruned: whether a row (of one channel or all) was pruned and not forgotten: a search by a payload's field cannot find it (the partitioned layout keeps the live rows' keys here too)
SELECT 1 AS pruned FROM denpyo_keys
WHERE removed_at IS NOT NULL AND archived_to IS NULL AND forgotten_at IS NULL
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
LIMIT 1;

-- find_forget_action_of: the latest forget that erased a row's payload (who, when, why: a removed row has no history left)
SELECT a.* FROM denpyo_actions a
JOIN denpyo_action_rows r ON r.action_id = a.id
WHERE r.submission_id = %(id)s::bigint AND a.kind = 'forget' AND r.outcome = 'done'
ORDER BY a.id DESC
LIMIT 1;

-- find_forgotten_among: which of a batch's rows are forgotten: a person's action that raced a forget rolls back
SELECT id FROM denpyo_submissions
WHERE id = ANY(%(ids)s::bigint[]) AND forgotten_at IS NOT NULL;

-- Payload keys (store/payload_keys.py): `rotate-key` re-encrypts every payload with the
-- current key, a batch at a time; only the payload column changes.

-- list_payload_batch: the next rows after an id, in id order (of one channel, or all), whose payload is kept (not forgotten), with the payload as stored, as text
SELECT id, channel, key, payload::text AS payload FROM denpyo_submissions
WHERE id > %(after)s::bigint AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND forgotten_at IS NULL
ORDER BY id
LIMIT %(limit)s;

-- lock_payload: which of a batch's rows this transaction may rewrite; a row another transaction has locked (a claim or a settle in flight) is skipped, never waited for
SELECT id FROM denpyo_submissions
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- make_payload_due_now: the rows of a channel given back unsent for want of a payload key that is configured now (their last error begins as :pattern says), due now; the ready rows' index (denpyo_submissions_ready), not the table
UPDATE denpyo_submissions SET next_attempt_at = now()
WHERE channel = %(channel)s::text AND status = 'requesting' AND locked_until IS NULL
  AND next_attempt_at > now()
  AND resolution IS NULL AND last_error LIKE %(pattern)s::text;

-- reseal_payload: a row's payload re-encrypted, if it is still the one read (compare-and-set; jsonb compares by value)
UPDATE denpyo_submissions SET payload = %(new)s::jsonb
WHERE id = %(id)s::bigint AND payload = %(old)s::jsonb;

-- The providers' webhooks (store/provider_events.py): each event recorded once, with
-- the row it named (NULL: none, which the audit lists).

-- insert_provider_event: record one provider's event (nothing when (provider, event_id) was recorded already: a second delivery)
INSERT INTO denpyo_provider_events
    (provider, event_id, kind, submission_id, idempotency_key, remote_id, detail)
VALUES (%(provider)s::text, %(event_id)s::text, %(kind)s::text, %(submission_id)s::bigint,
        %(idempotency_key)s::text, %(remote_id)s::text, %(detail)s::text)
ON CONFLICT (provider, event_id) DO NOTHING;

-- list_provider_event_history: the line a provider's event adds to the history of a row it does not move (its status on both sides)
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
VALUES (%(submission_id)s::bigint, 'provider', %(status)s::text, %(status)s::text,
        %(attempt)s::int, %(actor)s::text, %(detail)s::text);

-- find_provider_event_unknown: the events received in [since, until) that named no row, oldest first (index denpyo_provider_events_unknown)
SELECT * FROM denpyo_provider_events
WHERE submission_id IS NULL AND received_at >= %(since)s AND received_at < %(until)s
ORDER BY received_at, id LIMIT %(limit)s;

-- list_provider_events: the events that named one row, oldest first
SELECT * FROM denpyo_provider_events WHERE submission_id = %(submission_id)s::bigint ORDER BY id;

-- get_submission_by_remote_id: the newest row that recorded a provider's id (index denpyo_submissions_remote_id)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE remote_id = %(remote_id)s::text ORDER BY id DESC LIMIT 1;

-- forget_provider_events: the details of a batch's provider events replaced
UPDATE denpyo_provider_events SET detail = %(detail)s::text
WHERE submission_id = ANY(%(ids)s::bigint[]) AND detail IS NOT NULL;
