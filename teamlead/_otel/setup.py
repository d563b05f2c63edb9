"""When teamlead exports telemetry, and the tracer and meter it exports with.

:meth:`TelemetrySource.get` decides once per run, cheaply, and imports OpenTelemetry only
when the answer is yes:

1. ``OTEL_SDK_DISABLED=true``: never.
2. **The app's own providers.** An app that has set a global tracer provider gets
   teamlead's spans in it, and its metrics in its global meter provider (read from
   ``sys.modules``: an app that never imported OpenTelemetry pays nothing).
3. **The standard variables.** Otherwise teamlead exports only when an exporter
   (``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``) or an OTLP endpoint
   (``OTEL_EXPORTER_OTLP_ENDPOINT``, or its ``_TRACES_`` / ``_METRICS_`` form) is set. It
   then builds providers of its own (a library does not take over the global ones), with
   the exporters, resource, batching and timeouts the SDK's own configuration reads from
   the same variables (:func:`_exporters`).

Export never holds a run back: spans and metrics leave in the SDK's background threads,
and at exit what is buffered gets one bounded flush (:data:`FLUSH_AT_EXIT_S`). When the
variables ask for export but the ``otel`` extra is missing, one warning line says how to
install it. The ``console`` exporters write to stderr: stdout is the user's answer (or,
with ``--json``, nothing but NDJSON).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._version import __version__

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.trace import Tracer

__all__ = ["FLUSH_AT_EXIT_S", "Instruments", "Telemetry", "TelemetrySource", "export_wanted"]

log = logging.getLogger("teamlead.otel")

#: The longest the interpreter's exit waits for buffered spans and metrics to leave.
FLUSH_AT_EXIT_S = 3.0
_SCOPE = "teamlead"
_SERVICE = "teamlead"
_OFF = frozenset({"", "none"})
#: The GenAI conventions' bucket boundaries for the two histograms.
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                     40.96, 81.92, 163.84, 327.68, 655.36)  # fmt: skip


class Instruments:
    """teamlead's metric instruments, made once per meter: the GenAI conventions' token
    and duration histograms, and teamlead's governor limit, spawn-gate queue length and
    429/529 count (each described in docs/opentelemetry.md). Their attributes are
    low-cardinality by construction: no id of a run, agent or request.
    """

    def __init__(self, meter: Meter) -> None:
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.governor_limit = meter.create_gauge(
            "teamlead.governor.limit",
            unit="{request}",
            description="The relay governor's effective concurrency limit per bucket",
        )
        self.gate_queue = meter.create_up_down_counter(
            "teamlead.gate.queue.length",
            unit="{call}",
            description="Agent calls waiting in the spawn gate",
        )
        self.rate_limited = meter.create_counter(
            "teamlead.relay.rate_limited",
            unit="{response}",
            description="429 and 529 responses the relay met, absorbed or passed on",
        )


@dataclass
class Telemetry:
    """Where a run's spans and metrics go.

    Attributes:
        tracer: teamlead's tracer.
        instruments: the metric instruments made on teamlead's meter.
    """

    tracer: Tracer
    instruments: Instruments


def export_wanted(environ: Mapping[str, str]) -> tuple[bool, bool]:
    """Whether the variables ask for (traces, metrics): an exporter or an OTLP endpoint.

    Example:
        >>> export_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
        (True, True)
        >>> export_wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"})
        (True, False)
        >>> export_wanted({})
        (False, False)
    """
    endpoint = bool(_get(environ, "OTEL_EXPORTER_OTLP_ENDPOINT"))

    def wanted(signal: str) -> bool:
        exporter = _get(environ, f"OTEL_{signal}_EXPORTER").lower()
        if exporter:
            return exporter not in _OFF
        return endpoint or bool(_get(environ, f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))

    return wanted("TRACES"), wanted("METRICS")


def _get(environ: Mapping[str, str], name: str) -> str:
    return (environ.get(name) or "").strip()


class TelemetrySource:
    """Where the runs of one process state get their :class:`Telemetry`: the app's global
    providers when it set its own, else the providers teamlead builds from the variables,
    built once (a :class:`~teamlead.ProcessState` holds one; nothing is kept at module
    level)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._own: Telemetry | None = None
        self._built = False  # tried, whether or not it worked
        self._app: tuple[int, int, Telemetry] | None = None
        self._shutdown: Callable[[], None] | None = None

    def close(self) -> None:
        """Shut down the providers this source built (flushing what they hold, within
        :data:`FLUSH_AT_EXIT_S` for metrics); the next run builds them again. The app's own
        providers are the app's to shut down."""
        with self._lock:
            shutdown, self._shutdown = self._shutdown, None
            self._own, self._built = None, False
        if shutdown is not None:
            shutdown()

    def get(self) -> Telemetry | None:
        """The telemetry for a run starting now, or ``None`` (then nothing is imported);
        see the module docstring for the rules."""
        env = os.environ
        if _get(env, "OTEL_SDK_DISABLED").lower() == "true":
            return None
        app = self._app_telemetry()
        if app is not None:
            return app
        traces, metrics = export_wanted(env)
        if not (traces or metrics):
            return None
        return self._own_telemetry(env, traces, metrics)

    def _app_telemetry(self) -> Telemetry | None:
        """The app's global providers, when it set a tracer provider of its own."""
        trace_api = sys.modules.get("opentelemetry.trace")
        if trace_api is None:
            return None
        provider = trace_api.get_tracer_provider()
        if isinstance(provider, (trace_api.ProxyTracerProvider, trace_api.NoOpTracerProvider)):
            return None
        from opentelemetry import metrics as metrics_api

        meter_provider = metrics_api.get_meter_provider()
        cached = self._app
        if cached is not None and cached[:2] == (id(provider), id(meter_provider)):
            return cached[2]
        made = _telemetry_of(provider, meter_provider)
        self._app = (id(provider), id(meter_provider), made)
        return made

    def _own_telemetry(
        self, env: Mapping[str, str], traces: bool, metrics: bool
    ) -> Telemetry | None:
        with self._lock:
            if self._built:
                return self._own
            self._built = True
            try:
                self._own, self._shutdown = _build(env, traces, metrics)
            except ImportError as exc:
                log.warning(
                    "OpenTelemetry export is asked for (OTEL_*) but not installed (%s): "
                    "pip install -e '.[otel]' in the teamlead checkout",
                    exc.name or exc,
                )
            except Exception as exc:  # noqa: BLE001 - telemetry never stops the run
                # RuntimeError is the SDK's for an unknown exporter or protocol; anything
                # else would be an SDK whose configuration helpers (private) have changed
                log.warning("OpenTelemetry export off: %s", exc)
            return self._own


def _build(
    env: Mapping[str, str], traces: bool, metrics: bool
) -> tuple[Telemetry, Callable[[], None]]:
    """Providers built from the variables, and what shuts them down (also at exit)."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import NoOpTracerProvider

    named = _get(env, "OTEL_SERVICE_NAME") or "service.name=" in _get(
        env, "OTEL_RESOURCE_ATTRIBUTES"
    )
    resource = Resource.create({} if named else {"service.name": _SERVICE})
    tracer_provider: Any = NoOpTracerProvider()
    meter_provider: Any = NoOpMeterProvider()
    shutdowns: list[Callable[[], object]] = []
    if traces:
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        for exporter in _exporters(env, "traces"):
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        shutdowns.append(tracer_provider.shutdown)
    if metrics:
        readers: list[MetricReader] = [
            exporter  # a pull exporter (Prometheus) is a reader itself
            if isinstance(exporter, MetricReader)
            else PeriodicExportingMetricReader(exporter)
            for exporter in _exporters(env, "metrics")
        ]
        meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
        shutdowns.append(lambda: meter_provider.shutdown(timeout_millis=FLUSH_AT_EXIT_S * 1000))
    return _telemetry_of(tracer_provider, meter_provider), _flush_at_exit(shutdowns)


def _telemetry_of(tracer_provider: Any, meter_provider: Any) -> Telemetry:
    return Telemetry(
        tracer=tracer_provider.get_tracer(_SCOPE, __version__),
        instruments=Instruments(meter_provider.get_meter(_SCOPE, __version__)),
    )


def _exporters(env: Mapping[str, str], kind: Literal["traces", "metrics"]) -> list[Any]:
    """The exporters ``OTEL_<KIND>_EXPORTER`` names (``otlp`` by default), chosen and
    loaded as the SDK's own configuration does: ``otlp`` by the protocol variables, each
    name from the exporter entry points (so any installed exporter works). With no protocol
    set, ``otlp`` is OTLP/HTTP: the SDK's default, gRPC, is not in the ``otel`` extra."""
    from opentelemetry.sdk._configuration import _get_exporter_entry_point, _import_exporters

    signal = kind.upper()
    protocol = _get(env, f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or _get(
        env, "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    value = _get(env, f"OTEL_{signal}_EXPORTER").lower() or "otlp"
    names = [
        "otlp_proto_http"
        if name == "otlp" and not protocol
        else _get_exporter_entry_point(name, kind)
        for name in (part.strip() for part in value.split(","))
        if name not in _OFF
    ]
    traces, metrics, _ = _import_exporters(
        *((names, [], []) if kind == "traces" else ([], names, []))
    )
    classes: dict[str, Any] = traces if kind == "traces" else metrics
    return [cls(out=sys.stderr) if name == "console" else cls() for name, cls in classes.items()]


def _flush_at_exit(shutdowns: list[Callable[[], object]]) -> Callable[[], None]:
    """Run ``shutdowns`` (the providers', flushing what they hold) once: at exit, within
    FLUSH_AT_EXIT_S, or earlier through the returned close (which waits for them).

    They run in a daemon thread, started now (a new thread may not start once the
    interpreter is shutting down) and waiting for the exit or the close: a collector that
    stalls keeps that thread, never the interpreter, past the budget.
    """
    exiting = threading.Event()

    def shutdown() -> None:
        exiting.wait()
        for provider_shutdown in shutdowns:
            try:
                provider_shutdown()
            except Exception:  # noqa: BLE001 - telemetry must never fail the exit
                log.debug("telemetry shutdown failed", exc_info=True)

    worker = threading.Thread(target=shutdown, name="teamlead-otel-exit", daemon=True)
    worker.start()

    def bounded() -> None:
        exiting.set()
        worker.join(FLUSH_AT_EXIT_S)

    atexit.register(bounded)

    def close() -> None:
        exiting.set()
        worker.join()

    return close
