-- Named queries of PostgreSQL's partitioned layout (migrations/postgresql-partitioned):
-- they replace the queries of the same name in postgresql.sql, whose fragments they
-- use, and add the partitions' own. Here denpyo_keys holds every key from its insert
-- on, as the layout's unique index on (channel, key) and on the idempotency key.

-- @keys_of_gone: denpyo_keys takes the outcome of the rows `gone` (a query's CTE: the rows it deletes, or the partition it drops) and remembers them removed now, archived to :archived_to; included as a CTE's body (`kept AS {{keys_of_gone}}`: the parentheses are the include's)
UPDATE denpyo_keys k SET
    status = g.status, attempts = g.attempts, error_kind = g.error_kind,
    remote_id = g.remote_id, resolution = g.resolution, supersedes = g.supersedes,
    -- `+ 0`: read by the partial index on supersedes, not by walking denpyo_keys
    superseded_by = (SELECT MIN(r.submission_id + 0) FROM denpyo_keys r
                     WHERE r.supersedes = g.id),
    synced_at = g.synced_at, removed_at = now(), archived_to = %(archived_to)s::text
FROM gone g
WHERE k.submission_id = g.id

-- record_submission: insert a row with its created (and first attempt) events, and wake the workers; nothing when denpyo_keys knows (channel, key), the row live or removed
-- The key goes in first and makes the row's id (its creation time): a key known
-- already writes nothing, and a concurrent insert of the same key waits for this one.
WITH known AS (
    INSERT INTO denpyo_keys (
        channel, key, idempotency_key, submission_id, status, attempts, supersedes, created_at
    )
    VALUES (%(channel)s::text, %(key)s::text, %(idempotency_key)s::text, denpyo_new_id(),
            'requesting', 0, %(supersedes)s::bigint, now())
    ON CONFLICT (channel, key) DO NOTHING
    RETURNING submission_id
), new AS (
    INSERT INTO denpyo_submissions (
        id, channel, key, idempotency_key, payload, status, attempts, ordering_key, supersedes,
        locked_by, locked_until, next_attempt_at, traceparent, tracestate
    )
    SELECT submission_id, %(channel)s::text, %(key)s::text, %(idempotency_key)s::text,
        %(payload)s::jsonb, 'requesting', 0, %(ordering_key)s::text,
        %(supersedes)s::bigint, %(locked_by)s::text,
        now() + make_interval(secs => %(lease)s::float8),
        now() + make_interval(secs => COALESCE(%(lease)s::float8, 0)),
        %(traceparent)s::text, %(tracestate)s::text
    FROM known
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

-- record_submissions_many: insert many rows for the workers, with their events, in one statement; keys denpyo_keys knows are skipped (as record_submission)
WITH input AS (
    SELECT * FROM unnest(
        %(channel)b::text[], %(key)b::text[], %(idempotency_key)b::text[], %(payload)b::text[],
        %(ordering_key)b::text[], %(traceparent)b::text[], %(tracestate)b::text[]
    ) WITH ORDINALITY AS i(
        channel, key, idempotency_key, payload, ordering_key, traceparent, tracestate, n)
), known AS (
    INSERT INTO denpyo_keys
        (channel, key, idempotency_key, submission_id, status, attempts, created_at)
    SELECT channel, key, idempotency_key, denpyo_new_id(), 'requesting', 0, now()
    FROM input
    ORDER BY n
    ON CONFLICT (channel, key) DO NOTHING
    RETURNING idempotency_key, submission_id
), new AS (
    INSERT INTO denpyo_submissions (
        id, channel, key, idempotency_key, payload, status, attempts, ordering_key,
        next_attempt_at, traceparent, tracestate
    )
    SELECT k.submission_id, i.channel, i.key, i.idempotency_key, i.payload::jsonb,
        'requesting', 0, i.ordering_key, now(), i.traceparent, i.tracestate
    FROM known k JOIN input i ON i.idempotency_key = k.idempotency_key
    RETURNING id, channel
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'created', NULL, 'requesting', 0, %(actor)s FROM new
), woken AS (
    SELECT pg_notify('denpyo', channel) FROM (SELECT DISTINCT channel FROM new) AS channels
)
SELECT (SELECT COUNT(*) FROM new) AS created, (SELECT COUNT(*) FROM woken) AS woken;

-- get_submission_existing: the row an insert found in its way, by channel and business key (its key's id names its partition)
SELECT s.*,
    {{in_doubt s}} AS in_doubt
FROM denpyo_keys k JOIN denpyo_submissions s ON s.id = k.submission_id
WHERE k.channel = %(channel)s AND k.key = %(key)s;

-- get_submission_by_key: one submission by channel and business key (its key's id names its partition)
SELECT s.*,
    {{in_doubt s}} AS in_doubt
FROM denpyo_keys k JOIN denpyo_submissions s ON s.id = k.submission_id
WHERE k.channel = %(channel)s AND k.key = %(key)s;

-- get_submissions_recorded_before: the rows that hold a batch's channels and keys under other idempotency keys than the batch's (recorded before it, or by an earlier item of it), with the item's place in the batch
SELECT s.*,
    {{in_doubt s}} AS in_doubt,
    n.ord
FROM unnest(%(channel)s::text[], %(key)s::text[], %(idempotency_key)s::text[])
    WITH ORDINALITY AS n(channel, key, idempotency_key, ord)
JOIN denpyo_keys k ON k.channel = n.channel AND k.key = n.key
JOIN denpyo_submissions s ON s.id = k.submission_id
WHERE s.idempotency_key <> n.idempotency_key
ORDER BY n.ord;

-- get_keys_recorded_before: the removed keys of a batch's channels and keys whose row is gone, with the item's place in the batch (a bulk insert skipped them)
SELECT k.*, n.ord
FROM unnest(%(channel)s::text[], %(key)s::text[]) WITH ORDINALITY AS n(channel, key, ord)
JOIN denpyo_keys k ON k.channel = n.channel AND k.key = n.key
WHERE k.removed_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM denpyo_submissions s WHERE s.id = k.submission_id)
ORDER BY n.ord;

-- remove_submissions: the rows of :ids that retention still lets go, deleted with their history; their keys take the outcome they had, and their places are added to the counts kept per day of creation (UTC), channel, status and error kind; back how many went
-- Every key is in denpyo_keys since its insert: nothing to wait for (the plain
-- layout's removal waits out older snapshots, PostgresStore.remove_in).
WITH gone AS (
    DELETE FROM denpyo_submissions s
    WHERE s.id = ANY(%(ids)s::bigint[])
      AND {{removable s}}
    RETURNING s.id, s.channel, s.status, s.attempts, s.error_kind, s.remote_id,
        s.resolution, s.supersedes, s.created_at, s.synced_at
), kept AS {{keys_of_gone}}, counted AS (
    INSERT INTO denpyo_removed_counts (day, channel, status, error_kind, n)
    SELECT (created_at AT TIME ZONE 'UTC')::date, channel, status, COALESCE(error_kind, ''),
           COUNT(*)
    FROM gone
    GROUP BY 1, 2, 3, 4
    ON CONFLICT (day, channel, status, error_kind)
    DO UPDATE SET n = denpyo_removed_counts.n + EXCLUDED.n
), events AS (  -- each partition's primary key, from the gone rows' ids
    DELETE FROM denpyo_events e
    WHERE e.submission_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT COUNT(*) AS removed FROM gone;

-- expire_keys: one batch of removed rows' keys created before the cutoff, oldest first (keys_kept_for); a live row's key never expires
DELETE FROM denpyo_keys WHERE (channel, key) IN (
    SELECT channel, key FROM denpyo_keys
    WHERE submission_id < denpyo_id_at(now() - make_interval(secs => %(older_than)s::float8))
      AND removed_at IS NOT NULL
    ORDER BY submission_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING submission_id;

-- maintain_partitions: have pg_partman make the partitions of the coming intervals
SELECT denpyo_partition_maintain() AS done;

-- list_partitions: the partitions of the submissions, oldest first: their ids' range [from_id, to_id), and the time it stands for
SELECT from_id, to_id,
    to_timestamp(from_id / 1e9) AS from_at, to_timestamp(to_id / 1e9) AS to_at
FROM (
    SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                         'FROM \(''(-?[0-9]+)''\) TO \(''(-?[0-9]+)''\)'))::bigint[] AS bounds
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'denpyo_submissions'::regclass
) AS parts (bounds)
CROSS JOIN LATERAL (SELECT bounds[1] AS from_id, bounds[2] AS to_id) AS b
WHERE bounds IS NOT NULL
ORDER BY from_id;

-- check_partitions: how many rows the partition [from_id, to_id) holds, and how many of them retention keeps (open, in doubt, waiting for a person, or younger than their state's age)
SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE NOT {{removable}}) AS kept
FROM denpyo_submissions
WHERE id >= %(from_id)s AND id < %(to_id)s;

-- freeze_partition: refuse (:frozen) or allow again every write to the rows of the partition [from_id, to_id) and their events, waiting at most :wait seconds for the writers at work on them
SELECT set_config('lock_timeout', (%(wait)s::float8 * 1000)::int::text, true),
    denpyo_partition_freeze(%(from_id)s, %(to_id)s, %(frozen)s) AS partitions;

-- remember_partition_keys: record in denpyo_keys the outcome of every row of the (frozen) partition [from_id, to_id), and where it was archived; back the counts its removal adds, by day of creation (UTC), channel, status, error kind, count kind and resolution
WITH gone AS (  -- the rows of the partition, which its drop takes
    SELECT * FROM denpyo_submissions WHERE id >= %(from_id)s AND id < %(to_id)s
), kept AS {{keys_of_gone}}
SELECT (created_at AT TIME ZONE 'UTC')::date AS day, channel, status,
    COALESCE(error_kind, '') AS error_kind,
    denpyo_count_kind(status, error_kind, next_attempt_at) AS kind,
    resolution IS NOT NULL AS resolved, COUNT(*) AS n
FROM gone
GROUP BY 1, 2, 3, 4, 5, 6;

-- drop_partition: detach and drop the partition [from_id, to_id) and its events' twin, adding its counts (:day, :channel, :status, :error_kind, :kind, :resolved, :n from remember_partition_keys) to the removed counts and taking them off the running counts; waits at most :wait seconds for the lock
WITH waits AS (
    SELECT set_config('lock_timeout', (%(wait)s::float8 * 1000)::int::text, true)
), counts AS (
    SELECT * FROM unnest(%(day)s::date[], %(channel)s::text[], %(status)s::text[],
                         %(error_kind)s::text[], %(kind)s::text[], %(resolved)s::boolean[],
                         %(n)s::bigint[]) AS c(day, channel, status, error_kind, kind, resolved, n)
), counted AS (
    INSERT INTO denpyo_removed_counts (day, channel, status, error_kind, n)
    SELECT day, channel, status, error_kind, SUM(n) FROM counts GROUP BY 1, 2, 3, 4
    ON CONFLICT (day, channel, status, error_kind)
    DO UPDATE SET n = denpyo_removed_counts.n + EXCLUDED.n
), running AS (
    INSERT INTO denpyo_status_counts (channel, status, kind, resolved, n)
    SELECT channel, status, kind, resolved, -SUM(n) FROM counts GROUP BY 1, 2, 3, 4
)
SELECT denpyo_partition_drop(%(from_id)s, %(to_id)s) AS dropped FROM waits;

-- get_partition_every: the layout's interval (daily or monthly)
SELECT partition AS every FROM denpyo_layout;

-- list_partition_rows: the rows of the partition [from_id, to_id) in id order, up to :limit (the archive reads a frozen partition so)
SELECT *,
    {{in_doubt}} AS in_doubt
FROM denpyo_submissions
WHERE id >= %(from_id)s AND id < %(to_id)s
ORDER BY id
LIMIT %(limit)s;

-- find_submission_window_floor: the id :window rows below :before (0: fewer are there), where a page of the list stops looking (ids are creation times, not numbered one by one)
SELECT COALESCE((
    SELECT id FROM denpyo_submissions WHERE id < %(before)s
    ORDER BY id DESC OFFSET %(window)s LIMIT 1), 0) AS floor;

-- list_events_many: the histories of many submissions (the archive's batch), oldest first; the ids' range names the partitions to read (an array parameter alone names none)
SELECT * FROM denpyo_events
WHERE submission_id = ANY(%(ids)s::bigint[])
  AND submission_id >= (SELECT MIN(i) FROM unnest(%(ids)s::bigint[]) AS i)
  AND submission_id <= (SELECT MAX(i) FROM unnest(%(ids)s::bigint[]) AS i)
ORDER BY id;
