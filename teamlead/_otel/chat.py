"""A ``chat`` span per request through the relay: model, usage, pacing and 429s.

:class:`ChatObserver` is the relay's request observer for one run (see
:mod:`teamlead._relay.observe`). Each Messages API request gets a :class:`ChatTrace`: it
takes the usage the relay read out of the reply it streamed back (``message_start`` gives
the input and cache tokens and the model, ``message_delta`` the output tokens and stop
reason; a JSON reply, read here, gives them at once), counts the governor wait and the
429/529s, and at the end writes one ``chat {model}`` span (kind CLIENT) under the agent
whose request it was, plus the conventions' token and duration metrics. Nothing of the
request or reply text is kept; a compressed reply's usage is unknown, not zero.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._governor import Usage, UsageScan
from ..clock import SYSTEM_CLOCK, wall_ns
from ..events import RateLimited
from . import conventions as c

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from .._relay import RequestInfo
    from .setup import Telemetry

__all__ = ["ChatObserver", "ChatTrace"]

#: Largest JSON (non-streamed) reply read for its usage.
_MAX_JSON = 1024 * 1024
_MESSAGES_PATHS = ("/v1/messages",)


#: Places one finished request's span: calls the writer with the parent context of the
#: agent id's requests (``None``: the lead), now, or once the agent's place in the run is
#: known (a workflow's agent is named by its requests long before its workflow claims it).
PlaceFn = Callable[[str | None, Callable[["Context"], None]], None]
#: Told each finished request's agent id, usage and model (the run sums them per agent).
UsageSink = Callable[[str | None, Usage, str | None], None]


@dataclass
class ChatObserver:
    """The relay's request observer for one run: a :class:`ChatTrace` per Messages request.

    Attributes:
        telemetry: where spans and metrics go.
        place: writes a request's span under its agent's (see :data:`PlaceFn`).
        on_usage: told each request's usage when it ends.
    """

    telemetry: Telemetry
    place: PlaceFn
    on_usage: UsageSink

    def request(
        self, path: str, info: RequestInfo, session_id: str | None, agent_id: str | None
    ) -> ChatTrace | None:
        if not path.endswith(_MESSAGES_PATHS):
            return None  # token counts, model lists: not a model call
        return ChatTrace(self, info, session_id, agent_id)


@dataclass
class ChatTrace:
    """One request's observations, written as a span when it ends."""

    observer: ChatObserver
    info: RequestInfo
    session_id: str | None
    agent_id: str | None
    started_ns: int = field(default_factory=wall_ns)
    started: float = field(default_factory=SYSTEM_CLOCK.monotonic)
    waited_s: float | None = None
    attempts: int = 1
    status: int | None = None
    #: each 429 or overload met, as its span event: when, its name and attributes
    limits: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    _streamed: bool = False
    _json: bytearray | None = None

    def pinned(self, info: RequestInfo) -> None:
        self.info = info

    def limited(self, event: RateLimited) -> None:
        outcome: dict[str, Any] = {
            "http.response.status_code": event.status,
            "teamlead.outcome": event.outcome,
            "teamlead.source": event.source,
        }
        self.observer.telemetry.instruments.rate_limited.add(
            1, {**outcome, c.REQUEST_MODEL: event.model}
        )
        if event.retry_after_s is not None:
            outcome["teamlead.retry_after_s"] = event.retry_after_s
        name = "rate_limited" if event.status == 429 else "overloaded"
        self.limits.append((wall_ns(), name, outcome))

    def opened(self, waited_s: float, attempts: int) -> None:
        self.waited_s, self.attempts = waited_s, attempts

    def response(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        kind = encoding = b""
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-type":
                kind = value.lower()
            elif lower == b"content-encoding":
                encoding = value.lower()
        if encoding not in (b"", b"identity"):
            return  # compressed: the usage stays unknown
        if kind.startswith(b"text/event-stream"):
            self._streamed = True
        elif kind.startswith(b"application/json"):
            self._json = bytearray()

    def chunk(self, data: bytes) -> None:
        if self._json is not None:
            if len(self._json) + len(data) > _MAX_JSON:
                self._json = None
            else:
                self._json += data

    def end(self, error: str | None, scan: UsageScan) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        if not self._streamed:  # the relay read a stream; a JSON reply is read here
            scan = UsageScan()
            if self._json:
                with contextlib.suppress(ValueError, RecursionError):  # too deep: unknown
                    scan.message(json.loads(bytes(self._json)))
        telemetry = self.observer.telemetry
        usage = scan.usage
        duration = SYSTEM_CLOCK.monotonic() - self.started
        model = self.info.model
        failed = error or (
            str(self.status) if self.status is not None and self.status >= 400 else None
        )
        metric: dict[str, Any] = {
            c.OPERATION: c.CHAT,
            c.PROVIDER_NAME: c.PROVIDER,
            c.REQUEST_MODEL: model,
        }
        attributes: dict[str, Any] = {
            **metric,
            "teamlead.role": self.info.role,
            "teamlead.relay.attempts": self.attempts,
        }
        optional: dict[str, Any] = {
            c.CONVERSATION_ID: self.session_id,
            c.AGENT_ID: self.agent_id,
            c.RESPONSE_MODEL: scan.model,
            c.RESPONSE_ID: scan.response_id,
            c.INPUT_TOKENS: usage.input_tokens,
            c.OUTPUT_TOKENS: usage.output_tokens,
            c.CACHE_READ_TOKENS: usage.cache_read_input_tokens,
            c.CACHE_CREATION_TOKENS: usage.cache_creation_input_tokens,
            "teamlead.relay.wait_s": self.waited_s,
            "http.response.status_code": self.status,
            c.ERROR_TYPE: failed,
        }
        attributes.update({k: v for k, v in optional.items() if v is not None})
        if scan.stop_reason:
            attributes[c.FINISH_REASONS] = [scan.stop_reason]
        ended_ns = wall_ns()

        def write(parent: Context) -> None:
            span = telemetry.tracer.start_span(
                f"{c.CHAT} {model}",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=self.started_ns,
            )
            for at, name, limit_attributes in self.limits:
                span.add_event(name, limit_attributes, timestamp=at)
            if failed:
                span.set_status(Status(StatusCode.ERROR, failed))
            span.end(end_time=ended_ns)

        self.observer.place(self.agent_id, write)
        if scan.model:
            metric[c.RESPONSE_MODEL] = scan.model
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            if count is not None:
                telemetry.instruments.token_usage.record(count, {**metric, c.TOKEN_TYPE: kind})
        if failed:
            metric[c.ERROR_TYPE] = failed
        telemetry.instruments.duration.record(duration, metric)
        self.observer.on_usage(self.agent_id, usage, scan.model)
