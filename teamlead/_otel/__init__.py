"""OpenTelemetry for teamlead: every run, agent and request as GenAI-convention spans.

Off unless asked for (:mod:`.setup`): then :func:`trace_run` returns ``None`` after a few
dictionary lookups and nothing of OpenTelemetry is imported. The seams: the coordinator
calls :func:`trace_run` at the start of a run (the spans read the run's
:class:`~teamlead.tracker.StreamParse`); the relay's per-run request observer is
:class:`.chat.ChatObserver`; an experiment wraps each trial attempt in :func:`trial_scope`.

A run's root span hangs under :func:`parent_context`: the caller's current span, else the
``TRACEPARENT`` this process was started with, else nothing (a new trace).
:func:`run_labels` sets ``teamlead.*`` attributes on every run started in the block,
through a context variable, so no signature down the call chain changes for them.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from claude_agent_sdk import ClaudeAgentOptions

from .setup import TelemetrySource

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..tracker import StreamParse
    from .run import RunTrace

__all__ = ["TelemetrySource", "labels", "parent_context", "run_labels", "trace_run", "trial_scope"]

#: Attributes every run started in this context carries (the strategy, a trial's keys).
_labels: contextvars.ContextVar[Mapping[str, str | int] | None] = contextvars.ContextVar(
    "teamlead_otel_labels", default=None
)


@contextmanager
def run_labels(**values: str | int | None) -> Iterator[None]:
    """Runs started inside the block carry ``teamlead.<name>`` attributes (``None`` skipped).

    Example:
        >>> with run_labels(strategy="parallel"):
        ...     labels()
        {'strategy': 'parallel'}
    """
    merged = {**labels(), **{k: v for k, v in values.items() if v is not None}}
    token = _labels.set(merged)
    try:
        yield
    finally:
        _labels.reset(token)


def labels() -> Mapping[str, str | int]:
    """The labels of the current context."""
    return _labels.get() or {}


def parent_context() -> Context | None:
    """The caller's current span, else a ``TRACEPARENT`` this process was started with."""
    from opentelemetry import context as context_api
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    current = context_api.get_current()
    if get_current_span(current).get_span_context().is_valid:
        return current
    carrier = {
        name.lower(): os.environ[name]
        for name in ("TRACEPARENT", "TRACESTATE")
        if name in os.environ
    }
    if "traceparent" in carrier:
        return TraceContextTextMapPropagator().extract(carrier)
    return None


def trace_run(
    mode: str,
    options: ClaudeAgentOptions,
    run: StreamParse,
    *,
    source: TelemetrySource,
    prompt: str | None = None,
    session_id: str | None = None,
) -> RunTrace | None:
    """The spans of a run starting now, or ``None`` when telemetry is off.

    Args:
        mode: ``query``, ``resume`` or ``client``.
        options: the run's options (model, env).
        run: the run's parse of its stream (what it made of each message).
        source: the run's process state's telemetry (:attr:`ProcessState.telemetry`).
        prompt: the user's prompt (kept only under the content-capture opt-in).
        session_id: the session, when known up front (a resume).
    """
    found = source.get()
    if found is None:
        return None
    from .run import RunTrace

    return RunTrace(found, run, mode=mode, options=options, prompt=prompt, session_id=session_id)


@contextmanager
def trial_scope(
    source: TelemetrySource,
    *,
    experiment: str,
    variant: str,
    task: str,
    trial: int,
    attempt: int,
    strategy: str,
) -> Iterator[None]:
    """One experiment trial attempt as the root span of its own trace.

    ``source`` is the process state's telemetry. The run inside nests under it (its root
    span's parent is the current span) and carries the variant, task and trial as
    ``teamlead.*`` attributes too.
    """
    labels = run_labels(variant=variant, task=task, trial=trial, strategy=strategy)
    found = source.get()
    if found is None:
        with labels:
            yield
        return
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode, use_span

    span = found.tracer.start_span(
        "teamlead.trial",
        context=Context(),  # a new trace per trial, whatever span the caller has open
        attributes={
            "teamlead.experiment": experiment,
            "teamlead.variant": variant,
            "teamlead.task": task,
            "teamlead.trial": trial,
            "teamlead.attempt": attempt,
            "teamlead.strategy": strategy,
        },
    )
    with use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            with labels:
                yield
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
