"""What the tests of PostgreSQL's partitioned layout share: rows made as if created
days ago, so that they lie in an earlier day's partition."""

from __future__ import annotations

import psycopg

DAY_NS = 86_400 * 10**9
"""A day in ids: an id is its row's creation time in nanoseconds."""

AGE = """
UPDATE denpyo_keys SET submission_id = submission_id - %(ns)s,
    created_at = created_at - %(days)s * interval '1 day'
WHERE key LIKE %(prefix)s;
UPDATE denpyo_events SET submission_id = submission_id - %(ns)s
WHERE submission_id IN (SELECT id FROM denpyo_submissions WHERE key LIKE %(prefix)s);
UPDATE denpyo_submissions SET id = id - %(ns)s,
    created_at = created_at - %(days)s * interval '1 day'
WHERE key LIKE %(prefix)s
"""


def age(url: str, prefix: str, days: int) -> None:
    """Make the rows whose keys start with `prefix` as if created `days` ago: their
    ids (their creation time) move them, their events and keys to that day's partition."""
    params = {"prefix": prefix + "%", "days": days, "ns": days * DAY_NS}
    with psycopg.connect(url) as conn:
        for statement in AGE.split(";"):
            conn.execute(statement, params)
