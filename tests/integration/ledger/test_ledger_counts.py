"""PostgreSQL's counts (by status, and of what needs a person) come from
running counts and indexes: they must equal a scan of the rows."""

from __future__ import annotations

from ledger_helpers import NOW

import denpyo
from denpyo import Submission


def test_running_counts_match_the_rows(postgres_url: str) -> None:
    """PostgreSQL's counts by status come from triggers; they must equal COUNT(*)
    after sends, failures, a prune and the application's own SQL."""
    import psycopg

    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c", backoff=NOW, max_attempts=2)(lambda sub: _flaky(sub))
        ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(60)])
        ledger.work(until_idle=True, poll_interval=0.01)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE denpyo_submissions SET created_at = now() - interval '100 days' "
                "WHERE key LIKE 'k1%'"
            )
            conn.execute("UPDATE denpyo_submissions SET status = 'rejected' WHERE key = 'k59'")
        ledger.prune(older_than=90 * 86400)
        counted = {(c, s.value): n for c, s, n in ledger.store.count_by_status()}
        with psycopg.connect(postgres_url) as conn:
            real = {
                (c, s): n
                for c, s, n in conn.execute(
                    "SELECT channel, status, COUNT(*) FROM denpyo_submissions GROUP BY 1, 2"
                ).fetchall()
            }
    assert counted == real and sum(real.values()) < 60


def _flaky(sub: Submission) -> str:
    n = int(sub.key[1:])
    if n % 4 == 0:
        raise denpyo.Rejected("no")
    if n % 3 == 0:
        raise denpyo.Transient("503")
    return "r"


ATTENTION_BY_SCANNING = """
SELECT
    COUNT(*) FILTER (WHERE (status = 'requesting' AND locked_until <= now())
                        OR (status = 'failed' AND error_kind = 'ambiguous')) AS in_doubt,
    COUNT(*) FILTER (WHERE status = 'failed' AND next_attempt_at IS NULL
                       AND resolution IS NULL
                       AND COALESCE(error_kind, '') <> 'ambiguous') AS exhausted,
    COUNT(*) FILTER (WHERE status = 'rejected' AND resolution IS NULL) AS rejected_open,
    COUNT(*) FILTER (WHERE resolution IS NULL
                       AND ((status = 'requesting' AND locked_until <= now())
                            OR (status = 'failed'
                                AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL))
                            OR status = 'rejected')) AS needs_person,
    COUNT(*) FILTER (WHERE status = 'requesting'
                        OR (status = 'failed' AND next_attempt_at IS NOT NULL)) AS pending,
    MIN(created_at) FILTER (WHERE status = 'requesting'
                               OR (status = 'failed' AND next_attempt_at IS NOT NULL))
        AS oldest_pending,
    COUNT(*) FILTER (WHERE resolution IS NOT NULL AND status <> 'synced') AS resolved
FROM denpyo_submissions
"""


def test_attention_counts_match_a_scan_of_the_rows(postgres_url: str) -> None:
    """PostgreSQL counts what needs a person from running counts and the claim
    indexes; the figures must equal a scan of every row, whatever mix of states
    the rows are in (the application's own SQL included)."""
    import psycopg
    from psycopg.rows import dict_row

    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c", backoff=NOW, max_attempts=2)(lambda sub: _flaky(sub))
        ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(80)])
        ledger.work(until_idle=True, poll_interval=0.01)
        ledger.enqueue_many("c", [(f"w{i}", {"i": i}) for i in range(5)])  # waiting
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for sql in (
                # sent by a process that died: lease run out
                "UPDATE denpyo_submissions SET locked_by = 'gone/1', attempts = 1,"
                " locked_until = now() - interval '1 minute' WHERE key IN ('w0', 'w1')",
                # an ambiguous failure, due for verification, and one left for a person
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'ambiguous',"
                " next_attempt_at = now() WHERE key = 'k1'",
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'ambiguous',"
                " next_attempt_at = NULL WHERE key = 'k2'",
                # a transient failure waiting for its retry
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'transient',"
                " next_attempt_at = now() + interval '1 hour' WHERE key = 'k5'",
                # resolved by a person: a rejected row, an exhausted one, an in-doubt one
                "UPDATE denpyo_submissions SET resolution = 'abandoned: x'"
                " WHERE key IN ('k4', 'k3', 'w1', 'k2')",
            ):
                conn.execute(sql)
        counts = ledger.store.count_attention()
        by_channel = ledger.store.count_attention("c")
        other = ledger.store.count_attention("nothing-here")
        with psycopg.connect(postgres_url, row_factory=dict_row) as conn:
            real = conn.execute(ATTENTION_BY_SCANNING).fetchone()
    assert real is not None
    for name in (
        "in_doubt",
        "exhausted",
        "rejected_open",
        "needs_person",
        "pending",
        "resolved",
        "oldest_pending",
    ):
        assert counts[name] == real[name], name
        assert by_channel[name] == real[name], name
    assert counts["in_doubt"] >= 3 and counts["resolved"] == 4 and counts["exhausted"] > 0
    assert other["pending"] == other["needs_person"] == 0 and other["oldest_pending"] is None
