"""A loopback OTLP/HTTP receiver: what a real exporter sends, decoded for assertions.

:class:`OtlpReceiver` serves ``POST /v1/traces`` and ``POST /v1/metrics`` (and accepts
``/v1/logs`` without keeping them) on
``127.0.0.1`` and decodes each body with OpenTelemetry's own generated protobuf classes
(``opentelemetry-proto``), the bytes the OTLP/HTTP exporter really put on the wire (gzip
too). It keeps flat :class:`ReceivedSpan` and :class:`ReceivedPoint` records. ``stall=True``
makes it accept connections and then never answer (a collector that hangs);
:func:`dead_endpoint` gives a URL where nothing listens (a collector that is down).

Example:
    >>> with OtlpReceiver() as receiver:  # doctest: +SKIP
    ...     env = receiver.env()          # OTEL_EXPORTER_OTLP_ENDPOINT, ... for a child
    ...     ...
    ...     spans = receiver.wait_for_spans(lambda spans: any(s.name == "x" for s in spans))
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from ..errors import SetupError

__all__ = ["OtlpReceiver", "ReceivedEvent", "ReceivedPoint", "ReceivedSpan", "dead_endpoint"]

_STATUS_ERROR = 2


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


@dataclass(frozen=True)
class ReceivedEvent:
    """A span event: name, attributes, time (ns since the epoch)."""

    name: str
    attributes: dict[str, Any]
    time_ns: int


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened (ids as hex)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    error: bool
    status_message: str
    resource: dict[str, Any]
    scope: str

    def event_names(self) -> list[str]:
        return [e.name for e in self.events]


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point: the metric, its attributes and its value (a histogram's
    count and sum, or a gauge's or sum's value)."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    value: float | None = None
    count: int | None = None
    total: float | None = None


@dataclass
class _Store:
    lock: threading.Condition = field(default_factory=threading.Condition)
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    requests: int = 0
    bodies: list[bytes] = field(default_factory=list)


def _decode_traces(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        events=[
                            ReceivedEvent(e.name, _attributes(e.attributes), e.time_unix_nano)
                            for e in span.events
                        ],
                        error=span.status.code == _STATUS_ERROR,
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return out


def _decode_metrics(body: bytes) -> list[ReceivedPoint]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind) if kind else None
                for point in getattr(data, "data_points", ()):
                    attributes = _attributes(point.attributes)
                    if kind == "histogram":
                        out.append(
                            ReceivedPoint(
                                metric.name,
                                metric.unit,
                                attributes,
                                count=point.count,
                                total=point.sum,
                            )  # fmt: skip
                        )
                    else:
                        which = point.WhichOneof("value")
                        value = float(getattr(point, which)) if which else None
                        out.append(ReceivedPoint(metric.name, metric.unit, attributes, value=value))
    return out


class OtlpReceiver:
    """A loopback OTLP/HTTP collector; see the module docstring.

    Args:
        stall: accept each request and never answer it (until the receiver stops).
    """

    def __init__(self, *, stall: bool = False) -> None:
        self.stall = stall
        self._store = _Store()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> OtlpReceiver:
        store, release, stall = self._store, self._release, self.stall

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if (self.headers.get("content-encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                with store.lock:
                    store.requests += 1
                    store.lock.notify_all()
                if stall:
                    release.wait(60)
                    return
                if self.path.rstrip("/").endswith("/v1/traces"):
                    spans = _decode_traces(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                    with store.lock:
                        store.spans.extend(spans)
                        store.bodies.append(body)
                        store.lock.notify_all()
                elif self.path.rstrip("/").endswith("/v1/metrics"):
                    points = _decode_metrics(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                    with store.lock:
                        store.points.extend(points)
                        store.bodies.append(body)
                        store.lock.notify_all()
                else:  # logs (Claude Code's own events): accepted, not kept
                    reply = b""
                with contextlib.suppress(OSError):  # an exporter that gave up and left
                    self.send_response(200)
                    self.send_header("content-type", "application/x-protobuf")
                    self.send_header("content-length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)

        try:
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        except OSError as exc:
            raise SetupError(f"the OTLP receiver cannot listen on 127.0.0.1: {exc}") from None
        server.daemon_threads = True
        self._server = server
        # a short poll, as the scripted server's: stop() waits one poll for the loop to end
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what a client needs ---------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        assert self._server is not None, "start the receiver first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, **extra: str) -> dict[str, str]:
        """The variables that point a process's OTLP/HTTP export here, quickly."""
        return otlp_env(self.endpoint, **extra)

    # -- what arrived ----------------------------------------------------------------------
    @property
    def requests(self) -> int:
        """Export requests received (answered or not)."""
        with self._store.lock:
            return self._store.requests

    def spans(self) -> list[ReceivedSpan]:
        with self._store.lock:
            return list(self._store.spans)

    def points(self) -> list[ReceivedPoint]:
        with self._store.lock:
            return list(self._store.points)

    def bodies(self) -> list[bytes]:
        """The raw (decompressed) export bodies, e.g. to search for a secret."""
        with self._store.lock:
            return list(self._store.bodies)

    def wait_for_spans(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30.0
    ) -> list[ReceivedSpan]:
        """The spans once ``done(spans)`` holds; the spans so far after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._store.lock:
            while not done(list(self._store.spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._store.lock.wait(left)
            return list(self._store.spans)


def otlp_env(endpoint: str, **extra: str) -> dict[str, str]:
    """OTLP/HTTP export to ``endpoint`` with short batching delays and timeouts."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "teamlead-test",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
        **extra,
    }


def dead_endpoint() -> str:
    """A loopback URL where nothing listens (a port bound, then closed)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
