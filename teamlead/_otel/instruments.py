"""teamlead's metric instruments: the conventions' two histograms and its own three.

- ``gen_ai.client.token.usage`` (histogram, ``{token}``): per relayed request, one point
  for input and one for output tokens (``gen_ai.token.type``), as the upstream reported.
- ``gen_ai.client.operation.duration`` (histogram, ``s``): per relayed request (``chat``)
  and per run (``invoke_agent``), with ``error.type`` when it failed.
- ``teamlead.governor.limit`` (gauge, ``{request}``): each bucket's effective limit, on
  every change (``teamlead.bucket`` = ``provider/model``).
- ``teamlead.gate.queue.length`` (up-down counter, ``{call}``): Agent calls waiting in the
  spawn gates of the process.
- ``teamlead.relay.rate_limited`` (counter, ``{response}``): 429s and 529s met, by
  ``teamlead.outcome`` (``absorbed`` / ``passed``), ``http.response.status_code`` and
  ``teamlead.source``.

Metric attributes are low-cardinality by construction: no id of a run, agent or request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import conventions as c

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

__all__ = ["Instruments"]


class Instruments:
    """The instruments, made once per meter."""

    def __init__(self, meter: Meter) -> None:
        self.token_usage = meter.create_histogram(
            c.TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(c.TOKEN_BUCKETS),
        )
        self.duration = meter.create_histogram(
            c.OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(c.DURATION_BUCKETS),
        )
        self.governor_limit = meter.create_gauge(
            c.GOVERNOR_LIMIT,
            unit="{request}",
            description="The relay governor's effective concurrency limit per bucket",
        )
        self.gate_queue = meter.create_up_down_counter(
            c.GATE_QUEUED,
            unit="{call}",
            description="Agent calls waiting in the spawn gate",
        )
        self.rate_limited = meter.create_counter(
            c.RATE_LIMITED,
            unit="{response}",
            description="429 and 529 responses the relay met, absorbed or passed on",
        )
