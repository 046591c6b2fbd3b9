-- Named queries for PostgreSQL. Each query starts with a line `-- name: what it does`.
-- Times come from the database clock (now()); claims skip rows other workers hold.

-- schema_version_create: the table that records which migrations ran
CREATE TABLE IF NOT EXISTS denpyo_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- schema_version_get: the newest migration applied
SELECT COALESCE(MAX(version), 0) AS version FROM denpyo_schema_version;

-- schema_version_add: record one applied migration
INSERT INTO denpyo_schema_version (version) VALUES (%(version)s);

-- schema_lock: serialise migrations across processes until the transaction ends
SELECT pg_advisory_xact_lock(7316001);

-- clock_now: the database clock
SELECT now() AS now;

-- submission_insert: record a new submission; nothing when (channel, key) exists
INSERT INTO denpyo_submissions (
    channel, key, idempotency_key, payload, status, attempts, ordering_key, supersedes,
    locked_by, locked_until, next_attempt_at
) VALUES (
    %(channel)s, %(key)s, %(idempotency_key)s, %(payload)s::jsonb, 'requesting', %(attempts)s,
    %(ordering_key)s, %(supersedes)s, %(locked_by)s,
    now() + make_interval(secs => %(lease)s::float8),
    now() + make_interval(secs => COALESCE(%(lease)s::float8, 0))
)
ON CONFLICT (channel, key) DO NOTHING
RETURNING *, false AS in_doubt;

-- submission_notify: wake the workers listening for this channel when the transaction commits
SELECT pg_notify('denpyo', %(channel)s);

-- submission_get: one submission by id
SELECT *,
    (status = 'requesting' AND locked_until <= now())
    OR (status = 'failed' AND error_kind = 'ambiguous') AS in_doubt
FROM denpyo_submissions WHERE id = %(id)s;

-- submission_get_by_key: one submission by channel and business key
SELECT *,
    (status = 'requesting' AND locked_until <= now())
    OR (status = 'failed' AND error_kind = 'ambiguous') AS in_doubt
FROM denpyo_submissions WHERE channel = %(channel)s AND key = %(key)s;

-- submission_find_ready: due rows of one channel that a sender may attempt now
SELECT s.id, s.status FROM denpyo_submissions s
WHERE s.channel = %(channel)s
  AND s.next_attempt_at <= now()
  AND ((s.status = 'requesting' AND s.locked_until IS NULL)
       OR (s.status = 'failed' AND s.error_kind = 'transient'))
  AND (s.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM denpyo_submissions h
        WHERE h.channel = s.channel AND h.ordering_key = s.ordering_key AND h.id < s.id
          AND h.status IN ('requesting', 'failed') AND h.resolution IS NULL))
ORDER BY s.next_attempt_at, s.id
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- submission_find_in_doubt: due in-doubt rows of one channel (lease run out, or ambiguous failure)
SELECT s.id, s.status FROM denpyo_submissions s
WHERE s.channel = %(channel)s
  AND s.next_attempt_at <= now()
  AND ((s.status = 'requesting' AND s.locked_until <= now())
       OR (s.status = 'failed' AND s.error_kind = 'ambiguous'))
ORDER BY s.next_attempt_at, s.id
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- submission_move: compare-and-set one row from its expected status and holder to its next state
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
WHERE id = %(id)s AND status = %(from_status)s
  AND (locked_by IS NOT DISTINCT FROM %(expect_locked_by)s::text
       OR (%(expect_locked_by)s::text IS NULL
           AND (locked_until IS NULL OR locked_until <= now())))
RETURNING *,
    (status = 'requesting' AND locked_until <= now())
    OR (status = 'failed' AND error_kind = 'ambiguous') AS in_doubt;

-- event_insert: one line of a submission's history
INSERT INTO denpyo_events
    (submission_id, kind, from_status, to_status, attempt, actor, detail, duration_ms)
VALUES (%(submission_id)s, %(kind)s, %(from_status)s, %(to_status)s, %(attempt)s, %(actor)s,
        %(detail)s, %(duration_ms)s);

-- event_list: a submission's history, oldest first
SELECT * FROM denpyo_events WHERE submission_id = %(submission_id)s ORDER BY id;
