-- Named queries of the distributed SQL profile (store/distributed.py): they replace
-- the queries of the same name in postgresql.sql, whose fragments they use, and add
-- the re-reads of a commit whose outcome is unknown. Here: no pg_notify (workers
-- poll), no advisory lock, no running counts kept by triggers (the counts are
-- computed from the rows), a claim by one atomic UPDATE instead of SKIP LOCKED, and
-- SERIALIZABLE sessions, as CockroachDB runs them.

-- lock_schema: nothing to take: no advisory locks here (CockroachDB's are no-ops); run one `migrate` at a time, as a deployment step
SELECT 1 AS locked;

-- make_session_read_committed: run once on each connection of denpyo's: its transactions run SERIALIZABLE, as CockroachDB's do; a transaction that loses to a concurrent one (40001) runs again (store/conflicts.py)
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE;

-- record_submission: insert a row with its created (and first attempt) events; nothing when (channel, key) exists, or existed and is remembered (denpyo_keys); no NOTIFY: workers poll
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
)
SELECT new.*, false AS in_doubt, 0 AS woken FROM new;

-- record_submissions_many: insert many rows for the workers, with their events, in one statement; keys that exist, or existed and are remembered (denpyo_keys), are skipped; no NOTIFY: workers poll
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
)
SELECT (SELECT COUNT(*) FROM new) AS created, 0 AS woken;

-- claim_submissions_ready: hold up to :limit due rows of a channel to send, with their attempt events, in one UPDATE: no SKIP LOCKED (CockroachDB's may skip rows no one locked); the UPDATE checks each row is still due, so two claimers never hold the same row (under SERIALIZABLE the loser gets 40001 and claims again)
WITH claimed AS (
    UPDATE denpyo_submissions s SET
        status = 'requesting',
        locked_by = %(holder)s,
        locked_until = now() + make_interval(secs => %(lease)s::float8),
        next_attempt_at = now() + make_interval(secs => %(lease)s::float8),
        updated_at = now()
    FROM (  -- at random among the 4 * :limit oldest due rows: claimers that meet spread
            -- over them instead of all aiming at the same :limit rows and losing in turn
      SELECT id, status FROM (
        SELECT d.id, d.status FROM denpyo_submissions d
        WHERE d.channel = %(channel)s
          AND d.next_attempt_at <= now()
          AND ((d.status = 'requesting' AND d.locked_until IS NULL)
               OR (d.status = 'failed' AND d.error_kind = 'transient'
                   AND d.next_attempt_at IS NOT NULL))  -- as the index `denpyo_submissions_ready`
          AND d.resolution IS NULL
          AND (d.ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM denpyo_submissions h
                WHERE h.channel = d.channel AND h.ordering_key = d.ordering_key AND h.id < d.id
                  AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL))
        ORDER BY d.next_attempt_at, d.id
        LIMIT 4 * %(limit)s
      ) AS oldest
      ORDER BY random()
      LIMIT %(limit)s
    ) AS due
    WHERE s.id = due.id
      AND s.status = due.status  -- still as read: a row claimed meanwhile is left
      AND s.next_attempt_at <= now()
      AND ((s.status = 'requesting' AND s.locked_until IS NULL)
           OR (s.status = 'failed' AND s.error_kind = 'transient'
               AND s.next_attempt_at IS NOT NULL))
      AND s.resolution IS NULL
    RETURNING s.*, due.status AS previous_status
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'attempt', previous_status, 'requesting', attempts + 1, %(holder)s FROM claimed
)
SELECT claimed.*, false AS in_doubt FROM claimed ORDER BY id;

-- claim_submissions_in_doubt: hold up to :limit due in-doubt rows of a channel for one verifier (status kept, no event), in one UPDATE that checks each row is still due (no SKIP LOCKED)
UPDATE denpyo_submissions s SET
    locked_by = %(holder)s,
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    next_attempt_at = now() + make_interval(secs => %(lease)s::float8),
    updated_at = now()
WHERE s.id IN (
        SELECT d.id FROM denpyo_submissions d
        WHERE d.channel = %(channel)s
          AND d.next_attempt_at <= now()
          AND ((d.status = 'requesting' AND d.locked_until <= now())
               OR (d.status = 'failed' AND d.error_kind = 'ambiguous'
                   AND d.next_attempt_at IS NOT NULL))  -- as the index `denpyo_submissions_in_doubt`
          AND d.resolution IS NULL
        ORDER BY d.next_attempt_at, d.id
        LIMIT %(limit)s)
  AND s.channel = %(channel)s
  AND s.next_attempt_at <= now()
  AND ((s.status = 'requesting' AND s.locked_until <= now())
       OR (s.status = 'failed' AND s.error_kind = 'ambiguous' AND s.next_attempt_at IS NOT NULL))
  AND s.resolution IS NULL
RETURNING s.*,
    {{in_doubt s}} AS in_doubt;

-- count_submissions_by_status: how many rows each channel has in each status, counted from the rows (no running counts without triggers)
SELECT channel, status, COUNT(*) AS n
FROM denpyo_submissions
WHERE (%(channel)s::text IS NULL OR channel = %(channel)s::text)
GROUP BY channel, status
ORDER BY channel, status;

-- count_submissions_needs_person: in-doubt, exhausted, open-rejected, needs-a-person and pending counts, the oldest pending row's creation, and the database clock, counted from the rows (as the running counts would say)
WITH counted_rows AS (
    SELECT status, resolution IS NOT NULL AS resolved,
        CASE  -- the kind the running counts of PostgreSQL's schema 4 keep (denpyo_count_kind)
            WHEN status <> 'failed' THEN ''
            WHEN error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL THEN 'ambiguous_due'
            WHEN error_kind = 'ambiguous' THEN 'ambiguous_held'
            WHEN next_attempt_at IS NULL THEN 'exhausted'
            ELSE 'retrying' END AS kind
    FROM denpyo_submissions
    WHERE (%(channel)s::text IS NULL OR channel = %(channel)s::text)
), counted AS (
    SELECT
        COUNT(*) FILTER (WHERE status = 'failed'
                           AND kind IN ('ambiguous_due', 'ambiguous_held')) AS ambiguous,
        COUNT(*) FILTER (WHERE status = 'failed' AND kind = 'exhausted'
                           AND NOT resolved) AS exhausted,
        COUNT(*) FILTER (WHERE status = 'failed' AND NOT resolved
                           AND kind IN ('ambiguous_due', 'ambiguous_held', 'exhausted'))
            AS failed_open,
        COUNT(*) FILTER (WHERE status = 'rejected' AND NOT resolved) AS rejected_open,
        COUNT(*) FILTER (WHERE status = 'requesting'
                            OR (status = 'failed'
                                AND kind IN ('retrying', 'ambiguous_due'))) AS pending,
        COUNT(*) FILTER (WHERE resolved) AS resolved
    FROM counted_rows
), held AS (  -- rows being sent or verified, and those whose sender is gone
    SELECT COUNT(*) AS expired, COUNT(*) FILTER (WHERE resolution IS NULL) AS expired_open
    FROM denpyo_submissions
    WHERE status = 'requesting' AND locked_until IS NOT NULL AND locked_until <= now()
      AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
), oldest AS (
    SELECT MIN(created_at) AS created_at FROM denpyo_submissions
    WHERE (status = 'requesting'
           OR (status = 'failed' AND error_kind IN ('transient', 'ambiguous')
               AND next_attempt_at IS NOT NULL))
      AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
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

-- remember_keys: what the rows about to be removed leave behind, one row per key: their outcome, and the resend that replaced each; a key already remembered takes the row's values now; back how many (DistributedStore.remove_in deletes them in the same serializable transaction)
WITH kept AS (
    INSERT INTO denpyo_keys (
        channel, key, idempotency_key, submission_id, status, attempts, error_kind,
        remote_id, resolution, supersedes, superseded_by, created_at, synced_at, archived_to
    )
    SELECT s.channel, s.key, s.idempotency_key, s.id, s.status, s.attempts, s.error_kind,
           s.remote_id, s.resolution, s.supersedes,
           COALESCE((SELECT MIN(n.id + 0) FROM denpyo_submissions n WHERE n.supersedes = s.id),
                    (SELECT MIN(k.submission_id + 0) FROM denpyo_keys k
                     WHERE k.supersedes = s.id)),
           s.created_at, s.synced_at, %(archived_to)s::text
    FROM denpyo_submissions s
    WHERE s.id = ANY(%(ids)s::bigint[])
      AND {{removable s}}
    ORDER BY s.id
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
SELECT COUNT(*) AS kept FROM kept;

-- list_submissions_held_by: the rows of a channel one claim's holder holds (a claim whose commit was not confirmed, re-read)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE channel = %(channel)s AND locked_by = %(holder)s AND status = 'requesting'
ORDER BY id;

-- get_submissions_many: rows by id (a move whose commit was not confirmed, re-read)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions WHERE id = ANY(%(ids)s::bigint[]);
