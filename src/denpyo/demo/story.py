"""The invoice-email story, replayed on SQLite against fake providers, in a few seconds.

1. The naive way: a child process sends invoice emails (call, then INSERT) and is
   killed with SIGKILL part-way. The table says fewer were sent than the
   provider received (the lie); support resends what the table lacks, and the
   provider sends those customers a second email.
2. The denpyo way: the same emails through `Ledger.submit`, killed the same way.
   The rows the kill interrupted are `requesting` with a lease that runs out:
   in doubt, in plain sight.
3. `reconcile` asks the provider about each of them (the lookup endpoint): the
   ones that arrived become `synced` with the provider's id, the ones that never
   did are sent again under their own key. The job then runs again for every
   order, which calls the provider only for orders the ledger never recorded.
   Counts match the provider's exactly, and no customer gets two emails.

Each path has its own fake provider, and neither honours idempotency keys (as
many real providers do not): denpyo's "no double effect" here comes from the
ledger and `verify`, not from the provider's deduplication. Every figure on
screen is shown next to the SQL (or the provider endpoint) that gives it, and
that SQL is what the demo ran.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from denpyo.demo.senders import (
    CHANNEL,
    LEASE,
    NAIVE_TABLE,
    demo_ledger,
    invoice,
    order_key,
    send_naive,
)
from denpyo.engine import operator as op
from denpyo.errors import DemoError
from denpyo.testing import FakeProvider

NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
SQL = {
    "naive_count": "SELECT COUNT(*) FROM invoice_emails",
    "naive_present": "SELECT order_id FROM invoice_emails",
    "by_status": "SELECT status, COUNT(*) FROM denpyo_submissions GROUP BY status ORDER BY status",
    "leases_live": "SELECT COUNT(*) FROM denpyo_submissions "
    f"WHERE status = 'requesting' AND locked_until > {NOW}",
    "in_doubt": "SELECT id, key, attempts FROM denpyo_submissions "
    f"WHERE (status = 'requesting' AND locked_until <= {NOW}) "
    "OR (status = 'failed' AND error_kind = 'ambiguous') ORDER BY id",
    "verified": "SELECT COUNT(*) FROM denpyo_events WHERE kind = 'verify' AND to_status = 'synced'",
    "resent": "SELECT COUNT(DISTINCT submission_id) FROM denpyo_events "
    "WHERE kind = 'attempt' AND actor LIKE 'reconciler:%'",
    "idempotency_keys": "SELECT idempotency_key FROM denpyo_submissions",
    "synced": "SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'",
    "synced_ids": "SELECT idempotency_key, remote_id FROM denpyo_submissions "
    "WHERE status = 'synced'",
}
STATS = "the provider: GET /stats"


@dataclass(frozen=True, slots=True)
class DemoResult:
    """The figures of one run; `to_json` is what `denpyo demo --json` prints."""

    orders: int
    naive_table: int  # rows in invoice_emails after the kill
    provider_naive: int  # distinct emails the provider had accepted by then
    naive_resent: int  # orders support resent because the table lacked them
    duplicates_after_resend: int  # customers the provider emailed twice
    naive_table_after: int  # rows in invoice_emails after the resend: "all fine"
    denpyo_rows_after_kill: int
    denpyo_synced_after_kill: int
    provider_denpyo_after_kill: int
    denpyo_sent_unrecorded: int  # accepted by the provider, with no row in the ledger
    in_doubt_found: int  # rows the kill left in doubt
    resolved_by_verify: int  # in doubt, found at the provider: synced, not resent
    resent_after_verify: int  # in doubt, never arrived: sent again under their key
    resubmitted_calls: int  # calls when the job ran again for every order
    denpyo_synced: int
    provider_denpyo: int  # distinct emails the provider accepted on the denpyo path
    provider_denpyo_duplicates: int
    remote_ids_matching: int  # synced rows whose remote_id is the provider's id for the key
    seconds: float

    @property
    def naive_lost(self) -> int:
        return self.provider_naive - self.naive_table

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "naive_lost": self.naive_lost}


class Reporter(Protocol):
    """How the story is told; the CLI draws it with rich, `--json` tells nothing."""

    def chapter(self, title: str, text: str) -> None: ...
    def fact(self, value: object, what: str, proof: str) -> None: ...
    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...
    def say(self, text: str) -> None: ...
    def waiting(self, text: str) -> AbstractContextManager[object]: ...
    def finale(self, result: DemoResult) -> None: ...


class Quiet:
    def chapter(self, title: str, text: str) -> None:
        pass

    def fact(self, value: object, what: str, proof: str) -> None:
        pass

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        pass

    def say(self, text: str) -> None:
        pass

    def waiting(self, text: str) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def finale(self, result: DemoResult) -> None:
        pass


def run_demo(
    workdir: Path,
    *,
    orders: int = 200,
    reporter: Reporter | None = None,
    concurrency: int = 8,
    pause: float = 0.05,
    prepare: float = 0.02,
) -> DemoResult:
    """Play the story in `workdir` (its SQLite file is ``app.db``).

    The senders take about `prepare` seconds before each call and `pause` after
    each reply (see `senders`): a kill in the pause leaves a call that arrived
    and was never recorded; a kill in the preparation, a denpyo row whose call
    never left."""
    if orders < 20:
        raise DemoError("the demo needs at least 20 orders")
    tell: Reporter = reporter or Quiet()
    started = time.monotonic()
    db = _Db(workdir / "app.db")
    kill_at = orders * 3 // 5
    story = Story(db, workdir, orders, tell, concurrency, (prepare, pause), kill_at)
    with (
        FakeProvider(honour_idempotency=False) as naive,
        FakeProvider(honour_idempotency=False) as denpyo,
    ):
        story.naive(naive)
        story.denpyo(denpyo)
    result = DemoResult(**story.figures, seconds=round(time.monotonic() - started, 2))
    tell.finale(result)
    return result


class Story:
    def __init__(
        self,
        db: _Db,
        workdir: Path,
        orders: int,
        tell: Reporter,
        concurrency: int,
        waits: tuple[float, float],
        kill_at: int,
    ) -> None:
        self.db, self.workdir, self.orders, self.tell = db, workdir, orders, tell
        self.concurrency, self.waits, self.kill_at = concurrency, waits, kill_at
        self.figures: dict[str, int] = {"orders": orders}

    def naive(self, provider: FakeProvider) -> None:
        tell, db, n = self.tell, self.db, self.orders
        db.script(NAIVE_TABLE)
        tell.chapter(
            "1. The naive way: call the provider, then INSERT",
            f"A sender emails {n} invoices, {self.concurrency} at a time, and records each in "
            "invoice_emails after the provider answers. It is killed (SIGKILL) part-way, "
            "as an OOM kill or a deploy would.",
        )
        self.run_and_kill("naive", provider, ["--send-url", provider.send_url])
        table = self.figures["naive_table"] = db.one(SQL["naive_count"])
        sent = self.figures["provider_naive"] = provider.stats().distinct_keys
        tell.fact(table, "the table says were sent", SQL["naive_count"])
        tell.fact(sent, "the provider actually sent", f"{STATS} → distinct_keys")
        tell.say(
            f"The lie: {sent - table} customers have their invoice, and the table says "
            "it was never sent."
        )
        present = {row[0] for row in db.all(SQL["naive_present"])}
        missing = [i for i in range(1, n + 1) if i not in present]
        self.figures["naive_resent"] = len(missing)
        send_naive(provider.send_url, str(db.path), missing, self.concurrency)
        after = self.figures["naive_table_after"] = db.one(SQL["naive_count"])
        twice = self.figures["duplicates_after_resend"] = provider.stats().duplicates
        tell.say('Support: "resend whatever the table lacks".')
        tell.fact(len(missing), "orders resent", f"{n} orders minus {SQL['naive_present']}")
        tell.fact(after, "the table now says were sent: all fine?", SQL["naive_count"])
        tell.fact(twice, "customers emailed twice", f"{STATS} → duplicates")

    def denpyo(self, provider: FakeProvider) -> None:
        tell, db, n = self.tell, self.db, self.orders
        url = f"sqlite:///{db.path}"
        ledger = demo_ledger(url, provider.send_url, provider.lookup_url)
        try:
            ledger.migrate()
            tell.chapter(
                "2. The denpyo way: write the slip, then call",
                f"The same {n} invoices through ledger.submit(): each row is committed "
                "`requesting` before its call. The sender is killed the same way.",
            )
            self.run_and_kill(
                "denpyo",
                provider,
                ["--send-url", provider.send_url, "--lookup-url", provider.lookup_url],
            )
            counts = db.all(SQL["by_status"])
            self.figures["denpyo_rows_after_kill"] = sum(c for _, c in counts)
            self.figures["denpyo_synced_after_kill"] = dict(counts).get("synced", 0)
            sent = self.figures["provider_denpyo_after_kill"] = provider.stats().distinct_keys
            tell.table("denpyo_submissions after the kill", ["status", "rows"], counts)
            tell.say(SQL["by_status"])
            tell.fact(sent, "the provider actually sent", f"{STATS} → distinct_keys")
            recorded = {row[0] for row in db.all(SQL["idempotency_keys"])}
            unrecorded = sum(1 for key in provider.accepted_keys() if key not in recorded)
            self.figures["denpyo_sent_unrecorded"] = unrecorded
            tell.fact(
                unrecorded,
                "sent, with no row in the ledger",
                f"GET /accepted against {SQL['idempotency_keys']}",
            )
            with tell.waiting(f"waiting for the killed sender's leases ({LEASE:g} s) to run out"):
                self.wait_for_leases()
            doubt = db.all(SQL["in_doubt"])
            self.figures["in_doubt_found"] = len(doubt)
            tell.table(
                "in doubt: the call may or may not have arrived", ["id", "key", "tries"], doubt
            )
            tell.say(SQL["in_doubt"])
            self.recover(ledger, provider)
        finally:
            ledger.close()

    def recover(self, ledger: Any, provider: FakeProvider) -> None:
        tell, db, n = self.tell, self.db, self.orders
        tell.chapter(
            "3. denpyo reconcile, then the job again",
            "The reconciler asks the provider about each row in doubt (GET /lookup/<key>): "
            "found → synced with its id; never arrived → sent again under the same key.",
        )
        summary = op.reconcile(ledger)
        verified = self.figures["resolved_by_verify"] = db.one(SQL["verified"])
        resent = self.figures["resent_after_verify"] = db.one(SQL["resent"])
        tell.fact(summary.checked, "rows in doubt checked", "denpyo reconcile")
        tell.fact(verified, "had arrived: now synced, not sent again", SQL["verified"])
        tell.fact(resent, "never arrived: sent again under their key", SQL["resent"])
        before = provider.stats().requests
        for order_id in range(1, n + 1):  # the job, run again for every order: safe now
            ledger.submit(CHANNEL, order_key(order_id), invoice(order_id))
        calls = self.figures["resubmitted_calls"] = provider.stats().requests - before
        tell.say(
            f"The job runs again for all {n} orders: {calls} calls, for the orders the "
            "ledger had never recorded; every other one is recognised by its key."
        )
        stats = provider.stats()
        synced = self.figures["denpyo_synced"] = db.one(SQL["synced"])
        self.figures["provider_denpyo"] = stats.distinct_keys
        self.figures["provider_denpyo_duplicates"] = stats.duplicates
        matching = sum(
            1
            for key, remote_id in db.all(SQL["synced_ids"])
            if provider.accepted_ids_for(key) == [remote_id]
        )
        self.figures["remote_ids_matching"] = matching
        tell.fact(synced, "rows synced", SQL["synced"])
        tell.fact(stats.distinct_keys, "the provider actually sent", f"{STATS} → distinct_keys")
        tell.fact(stats.duplicates, "customers emailed twice", f"{STATS} → duplicates")
        tell.fact(
            matching,
            "synced rows whose remote_id is the provider's id for that key",
            f"{SQL['synced_ids']}, each against GET /accepted",
        )

    def run_and_kill(self, way: str, provider: FakeProvider, args: list[str]) -> None:
        """Start a sender; SIGKILL it once the provider has accepted `kill_at` calls."""
        log = self.workdir / f"{way}-sender.log"
        command = [
            sys.executable,
            "-m",
            "denpyo.demo",
            way,
            *args,
            "--db",
            str(self.db.path),
            "--orders",
            str(self.orders),
            "--concurrency",
            str(self.concurrency),
            "--prepare",
            str(self.waits[0]),
            "--pause",
            str(self.waits[1]),
        ]
        with (
            self.tell.waiting(f"sending; SIGKILL after the provider's {self.kill_at}th email"),
            log.open("wb") as errors,
        ):
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
            try:
                deadline = time.monotonic() + 60
                while provider.stats().accepted < self.kill_at:
                    if child.poll() is not None:
                        raise DemoError(
                            f"the {way} sender ended (exit {child.returncode}) before it was "
                            f"killed: {log.read_text(errors='replace')[-2000:]}"
                        )
                    if time.monotonic() > deadline:
                        raise DemoError(f"the {way} sender made no progress; see {log}")
                    time.sleep(0.001)
                child.send_signal(signal.SIGKILL)
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()

    def wait_for_leases(self) -> None:
        deadline = time.monotonic() + LEASE + 30
        while self.db.one(SQL["leases_live"]):
            if time.monotonic() > deadline:
                raise DemoError("leases did not run out")
            time.sleep(0.1)


class _Db:
    """Plain sqlite3 on the demo's file, for the SQL shown on screen."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            yield conn
        finally:
            conn.close()

    def one(self, sql: str) -> int:
        with self._connect() as conn:
            return int(conn.execute(sql).fetchone()[0])

    def all(self, sql: str) -> list[tuple[Any, ...]]:
        with self._connect() as conn:
            return [tuple(row) for row in conn.execute(sql).fetchall()]

    def script(self, sql: str) -> None:
        with self._connect() as conn:
            conn.executescript(sql)
