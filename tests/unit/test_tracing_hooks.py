"""engine/tracing.py on its own: without OpenTelemetry (`DENPYO_TRACING=off`, which
behaves as if it were not installed) every hook is a constant no-op, and nothing is
kept or sent even inside an application's span; OpenTelemetry is imported by that
module only; the command line's log lines show a record's trace ids."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from denpyo.engine import tracing

SRC = Path(__file__).resolve().parents[2] / "src" / "denpyo"

OFF_SCRIPT = """
import sqlite3, sys, tempfile
from opentelemetry.sdk.trace import TracerProvider

import denpyo
from denpyo.engine import tracing
from denpyo.domain.submission import Submission
from denpyo.domain.status import Status

assert tracing.ENABLED is False
sub = Submission(1, "email", "k", "idem", {}, Status.REQUESTING, traceparent="00-" + "1" * 32
                 + "-" + "2" * 16 + "-01")
with TracerProvider().get_tracer("app").start_as_current_span("request"):
    assert tracing.row_context() is tracing.NO_CONTEXT
    span = tracing.attempt_span("email", sub, inline=True)
    assert span is tracing.NO_SPAN
    assert tracing.verify_span("email", sub, inline=False, asks=True) is tracing.NO_SPAN
    assert span.current() is span.current()  # one shared no-op: nothing allocated
    span.failed(ValueError("x"))
    span.end()
    assert tracing.claim_span("email", limit=1, in_doubt=False) is tracing.NO_BATCH
    assert tracing.settle_span(3) is tracing.NO_BATCH
    headers = {"Accept": "application/json"}
    tracing.inject(headers)
    assert headers == {"Accept": "application/json"}
    assert tracing.traced(headers) is headers
    assert tracing.carried(print) is print

    path = tempfile.mkdtemp() + "/ledger.db"
    with denpyo.Ledger("sqlite:///" + path) as ledger:
        ledger.migrate()
        ledger.channel("email")(lambda sub: "r")
        ledger.enqueue("email", "order:1", {})
        ledger.submit("email", "order:2", {})
    rows = sqlite3.connect(path).execute(
        "SELECT traceparent, tracestate FROM denpyo_submissions").fetchall()
    assert rows == [(None, None), (None, None)], rows
assert not any(isinstance(f, tracing.TraceIds) for f in __import__("logging").getLogger(
    "denpyo.alerts").filters)
print("ok")
"""


def test_switched_off_every_hook_is_a_constant_no_op_and_nothing_is_kept() -> None:
    env = {**os.environ, tracing.SWITCH: "off", "PYTHONPATH": str(SRC.parent)}
    done = subprocess.run(
        [sys.executable, "-c", OFF_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_only_the_tracing_module_imports_opentelemetry() -> None:
    importing = re.compile(r"^\s*(from|import)\s+opentelemetry\b", re.MULTILINE)
    found = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if importing.search(path.read_text(encoding="utf-8"))
    )
    assert found == ["engine/tracing.py"]


def test_denpyos_loggers_carry_the_trace_ids_of_the_current_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    assert tracing.ENABLED
    for name in tracing.LOGGERS:
        assert [f for f in logging.getLogger(name).filters if isinstance(f, tracing.TraceIds)]
    record = logging.LogRecord("denpyo.engine", logging.WARNING, __file__, 1, "lost", (), None)
    with TracerProvider().get_tracer("test").start_as_current_span("attempt") as span:
        logging.getLogger("denpyo.engine").filter(record)
    context = span.get_span_context()
    assert record.__dict__["trace_id"] == f"{context.trace_id:032x}"
    assert record.__dict__["span_id"] == f"{context.span_id:016x}"
    untraced = logging.LogRecord("denpyo.engine", logging.INFO, __file__, 1, "idle", (), None)
    logging.getLogger("denpyo.engine").filter(untraced)
    assert "trace_id" not in untraced.__dict__


def test_the_command_lines_log_lines_show_the_trace_ids_when_a_record_has_them() -> None:
    formatter = tracing.TraceIdsFormatter("%(message)s")
    record = logging.LogRecord("denpyo.alerts", logging.WARNING, __file__, 1, "rejected", (), None)
    assert formatter.format(record) == "rejected"
    record.__dict__.update(trace_id="a" * 32, span_id="b" * 16)
    assert formatter.format(record) == f"rejected trace={'a' * 32} span={'b' * 16}"
