"""Where a run's root span hangs, and the labels runs started in a context carry.

:func:`parent_context` is the caller's current span (an app's own span, an experiment's
trial span), else the ``TRACEPARENT`` this process was started with (teamlead run under a
traced CI job or another agent), else nothing: a new trace. :func:`run_labels` sets
``teamlead.*`` attributes (the strategy, a trial's keys) on every run started in the block,
through a context variable, so no signature down the call chain changes for them.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["labels", "parent_context", "run_labels"]

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
