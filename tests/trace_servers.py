"""Servers the tracing tests (and bench/trace_picture.py) start on loopback: an OTLP
HTTP receiver that keeps the spans an exporter sends it, and a provider that keeps
the headers of the calls it receives."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as an OTLP exporter sent it (ids in hex, times in ns since the epoch)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    status_code: int
    service: str


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


def decode(body: bytes) -> Iterator[ReceivedSpan]:
    """The spans of one `ExportTraceServiceRequest`."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes={a.key: _value(a.value) for a in span.attributes},
                    links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                    status_code=span.status.code,
                    service=str(resource.get("service.name", "")),
                )


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    raw = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
    encoding = handler.headers.get("Content-Encoding", "")
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    return raw


class _Server:
    """A threading HTTP server on a free loopback port, as a context manager."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class _OtlpHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        receiver: OtlpReceiver = self.server.owner  # type: ignore[attr-defined]
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        spans = list(decode(_body(self)))
        with receiver.lock:
            receiver.spans.extend(spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read what arrived."""


class OtlpReceiver(_Server):
    """`POST /v1/traces` (OTLP over HTTP, protobuf), as a collector takes it: every
    span received is kept in `spans`. `endpoint` is the exporter's URL."""

    def __init__(self) -> None:
        super().__init__(_OtlpHandler)
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"{self.url}/v1/traces"

    def named(self, name: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.name == name]


class _ProviderHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        provider: RecordingProvider = self.server.owner  # type: ignore[attr-defined]
        _body(self)
        with provider.lock:
            provider.received.append({k.lower(): v for k, v in self.headers.items()})
            count = len(provider.received)
        reply = json.dumps({"id": f"remote-{count}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class RecordingProvider(_Server):
    """A provider that answers every POST 200 with a new id and keeps each request's
    headers in `received` (names in lower case)."""

    def __init__(self) -> None:
        super().__init__(_ProviderHandler)
        self.received: list[dict[str, str]] = []
        self.lock = threading.Lock()
