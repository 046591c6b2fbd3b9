"""Draw the trace a request and the worker's call make, as a collector receives it
(docs/screenshots/trace.png, on docs/guide/tracing.md).

    PYTHONPATH=src .venv/bin/python bench/trace_picture.py [--db sqlite:///trace.db]
        [--out docs/screenshots/trace.png]

Nothing is staged: an application span `POST /orders` enqueues an invoice e-mail
(`Ledger.enqueue`), and a worker (`Ledger.work`) sends it later through
`HttpChannel` to a provider on loopback that is instrumented too (it continues the
`traceparent` it receives, as a provider's own tracing would). Both export with
the OTLP HTTP exporter to the receiver the tests use (tests/trace_servers.py), and
the spans it received are drawn as a waterfall: one row per span, by start time,
indented under its parent, the trace first, then the worker's own spans (its
claims and settles, roots of traces of their own).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import (  # noqa: E402
    TraceContextTextMapPropagator,
)

import denpyo  # noqa: E402
from denpyo.channels.http import HttpChannel  # noqa: E402
from denpyo.engine import tracing  # noqa: E402
from trace_servers import OtlpReceiver, ReceivedSpan  # noqa: E402


def exporting(service: str, endpoint: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint)))
    return provider


class Provider:
    """A mail provider on loopback whose own tracing continues the caller's trace."""

    def __init__(self, tracer: trace.Tracer) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parent = TraceContextTextMapPropagator().extract(dict(self.headers.items()))
                with outer.tracer.start_as_current_span(
                    "POST /send", context=parent, kind=trace.SpanKind.SERVER
                ):
                    time.sleep(0.04)  # the provider's own work
                body = b'{"id": "msg_7Hq2"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.tracer = tracer
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/send"


def run(db_url: str, receiver: OtlpReceiver) -> None:
    shop = exporting("shop", receiver.endpoint)
    mail = exporting("mail-provider", receiver.endpoint)
    tracing.use(shop)
    provider = Provider(mail.get_tracer("mail-provider"))
    app = shop.get_tracer("shop")
    try:
        with denpyo.Ledger(db_url) as ledger:
            ledger.migrate()
            ledger.channel("invoice-email")(HttpChannel(provider.url).send)
            with app.start_as_current_span("POST /orders", kind=trace.SpanKind.SERVER):
                with app.start_as_current_span("INSERT orders"):
                    time.sleep(0.01)  # the application's own write
                ledger.enqueue("invoice-email", "order:42", {"to": "ada@example.com"})
                time.sleep(0.005)
            time.sleep(0.15)  # the worker comes later (here: a moment; often hours)
            ledger.work(until_idle=True)
        shop.force_flush()
        mail.force_flush()
    finally:
        tracing.use(None)
        shop.shutdown()
        mail.shutdown()
        provider.server.shutdown()


def rows_of(spans: list[ReceivedSpan]) -> list[tuple[ReceivedSpan, int]]:
    """Spans in waterfall order: each trace from its root, children under their parent
    by start time; the request's trace first."""
    by_parent: dict[str, list[ReceivedSpan]] = {}
    ids = {span.span_id for span in spans}
    roots = []
    for span in sorted(spans, key=lambda s: s.start_ns):
        if span.parent_span_id and span.parent_span_id in ids:
            by_parent.setdefault(span.parent_span_id, []).append(span)
        else:
            roots.append(span)
    roots.sort(key=lambda s: (s.name != "POST /orders", s.start_ns))
    ordered: list[tuple[ReceivedSpan, int]] = []

    def walk(span: ReceivedSpan, depth: int) -> None:
        ordered.append((span, depth))
        for child in by_parent.get(span.span_id, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return ordered


COLOURS = {"shop": "#4c72b0", "mail-provider": "#dd8452"}


def draw(spans: list[ReceivedSpan], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rows_of(spans)
    start = min(span.start_ns for span in spans)
    trace_id = rows[0][0].trace_id
    fig, ax = plt.subplots(figsize=(12, 0.4 * len(rows) + 0.9))
    for y, (span, depth) in enumerate(rows):
        left = (span.start_ns - start) / 1e6
        width = max((span.end_ns - span.start_ns) / 1e6, 0.4)
        own = span.trace_id == trace_id
        colour = COLOURS.get(span.service, "#888888") if own else "#b0b0b0"
        ax.barh(y, width, left=left, color=colour, height=0.6)
        ax.text(
            left + width + 2,
            y,
            f"{(span.end_ns - span.start_ns) / 1e6:.1f} ms",
            va="center",
            fontsize=8,
        )
        mark = "" if own else "  (a trace of its own)"
        label = "  " * depth + ("└ " if depth else "") + f"{span.name} [{span.service}]{mark}"
        # Left-aligned, in a fixed-width font: the indentation shows who is whose child.
        ax.text(
            -0.58,
            y,
            label,
            transform=ax.get_yaxis_transform(),
            ha="left",
            va="center",
            fontsize=8.5,
            family="monospace",
        )
    ax.set_yticks([])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("ms since the request began")
    ax.set_title(
        f"trace {trace_id[:16]}…: the request, the worker's call, the provider", fontsize=10
    )
    ax.grid(axis="x", alpha=0.3)
    fig.subplots_adjust(left=0.38, right=0.96, top=0.9, bottom=0.15)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", default=None, help="a database URL (default: a new SQLite file)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots" / "trace.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, OtlpReceiver() as receiver:
        run(args.db or f"sqlite:///{folder}/trace.db", receiver)
        spans = list(receiver.spans)
    for span, depth in rows_of(spans):
        print(
            f"{'  ' * depth}{span.name} [{span.service}] trace {span.trace_id[:8]} "
            f"{(span.end_ns - span.start_ns) / 1e6:.1f} ms {span.attributes}"
        )
    draw(spans, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
