"""One run's agent ledger, kept by the relay: every request counted for one agent, governed.

Claude Code sends ``X-Claude-Code-Session-Id`` on every request and ``x-claude-code-agent-id``
on every subagent's (Agent-tool and workflow agents alike; the lead's carry none). So the
relay can attribute each request, the tokens of its reply and the 429s met on the way to
one agent, whichever tool spawned it, and apply the run's limits where the spawn gate's hook
cannot see an agent. The decisions are the run's admission's
(:class:`teamlead._gate.Admission`); the book counts, asks it and tells it:

- **Admission.** A workflow agent fires no hook, so its *first* request waits for the
  admission's answer (:meth:`~teamlead._gate.Admission.admit_workflow_agent`); refused, it
  does not start, and past the spawn budget its later requests are refused too. The book
  holds no slot: the admission frees it when the run says the agent's work ended.
- **The timeout.** An agent running longer than ``agent_timeout_s`` has its request in flight
  ended and every later one refused with a clear error, so it ends at once; the admission
  is told (on a client run it stops the agent's task).
- **The model.** An agent is pinned, at its first request, to the model the admission names
  for it (:meth:`~teamlead._gate.Admission.agent_model`): every one of its requests goes
  upstream with that ``model``, so agents already running keep theirs after an amend.
- **The budgets.** Tokens and requests are counted from the upstream's own usage. Each
  request is checked and reserved in one synchronous step before it is forwarded, keeping
  room for the wrap-up's own request; once a budget is reached no subagent request goes on
  and the admission is told (:meth:`~teamlead._gate.Admission.budget_reached`).
- **Usage.** Each agent's :class:`~teamlead.events.AgentUsage` is published after each of
  its requests.

One :class:`AgentBook` belongs to one run (the relay's path token tells runs apart, never a
header): a session id of another run or a forged agent id is counted in *this* run's book
under its own key, and an agent id that is not a plausible id is counted as invalid. The book
holds at most :data:`MAX_AGENTS` entries (later ids fold into one overflow entry), so memory
per agent stays flat. Like the governor it belongs to one event loop and is not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._gate import AgentLimits, ExhaustReason
from .._governor import UsageScan
from ..clock import Clock, move_on_at
from ..events import AgentUsage, RelayedAgentKind
from .count import AgentCount

if TYPE_CHECKING:
    from .._gate import Admission
from .request import (
    LEAD,
    Answer,
    Forward,
    Refused,
    Send,
    Ticket,
    agent_key,
    is_workflow_agent,
    last_tool_of,
    model_of,
    with_model,
)

__all__ = ["MAX_AGENTS", "AgentBook", "AgentCount"]

log = logging.getLogger("teamlead.relay")

#: Entries one run's book keeps; requests of further agent ids count in one overflow entry.
MAX_AGENTS = 4096
_OVERFLOW = "?overflow"
#: Tokens kept for the wrap-up when no lead request was measured yet.
_DEFAULT_WRAP_TOKENS = 4000

#: How a refused request is answered: a 400 of this type, which the CLI does not retry.
_REFUSED = "invalid_request_error"
_NO_RETRY = {b"x-should-retry": b"false"}


class AgentBook:
    """One run's agent ledger and the limits the relay applies (see the module docstring).

    Args:
        clock: the run's clock (timeouts run on it).
        admission: the run's admission: its limits (the per-agent timeout, the budgets) are
            applied, a workflow agent's first request waits for it, it names the model of
            a new agent and is told a budget reached and an agent timed out; ``None``: no
            limit, every agent starts at once, on the model it asked for.
        publish: where each agent's :class:`~teamlead.events.AgentUsage` goes after each of
            its requests (the run's event bus); ``None``: nowhere.
    """

    def __init__(
        self,
        clock: Clock,
        admission: Admission | None = None,
        *,
        publish: Callable[[AgentUsage], None] | None = None,
    ) -> None:
        self.clock = clock
        self.limits = admission.limits if admission is not None else AgentLimits()
        self._admission = admission
        self._publish = publish
        self.entries: dict[tuple[str, str], AgentCount] = {}
        self._by_agent: dict[str, AgentCount] = {}
        self._started: dict[str, float] = {}  # agents the stream saw start before a request
        self.requests = 0
        self.tokens = 0
        self.unknown_usage = 0
        self._reserved_tokens = 0
        self._first_peak: dict[RelayedAgentKind, int] = {}  # the largest first request, per kind
        self._lead_peak = 0
        self.wrapping = False
        self.closed = False

    # -- what the run tells the book ----------------------------------------------------------
    def agent_started(self, agent_id: str) -> None:
        """The stream says ``agent_id`` started: its start until its first request is
        admitted, when its timeout starts again (a wait for a slot is not counted)."""
        count = self._by_agent.get(agent_id)
        if count is not None:
            if count.started_at is None:
                count.started_at = self.clock.monotonic()
        elif agent_id not in self._started and len(self._started) < MAX_AGENTS:
            self._started[agent_id] = self.clock.monotonic()

    def close(self) -> None:
        """The run ends: later requests are only counted (none waits for admission)."""
        self.closed = True

    def agent(self, agent_id: str, session_id: str | None = None) -> AgentCount | None:
        """The counters of ``agent_id`` in ``session_id`` (default: the first session it
        was seen in), if it sent a request."""
        if session_id is not None:
            return self.entries.get((session_id, agent_id))
        return self._by_agent.get(agent_id)

    @property
    def exhausted(self) -> ExhaustReason | None:
        """The run budget reached, if one is (the admission's)."""
        return self._admission.exhaust_reason if self._admission is not None else None

    @property
    def timed_out(self) -> list[str]:
        """The agent ids that passed their timeout."""
        return [a for a, c in self._by_agent.items() if c.timed_out]

    @property
    def denied(self) -> dict[str, str]:
        """The workflow agents the run's spawn budget kept from starting, and why."""
        return {a: c.denied for a, c in self._by_agent.items() if c.denied is not None}

    # -- the relay's request path -----------------------------------------------------------
    async def relay(
        self,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
        role: str,
        send: Send,
        answer: Answer,
        exchange: Forward,
        scan: UsageScan | None = None,
    ) -> None:
        """Govern and count one request: refuse it, hold it, or run ``exchange`` on it.

        Args:
            headers: the request's headers (the session and agent ids are read from them).
            body: the request body (read only for a new agent: is it a workflow agent's?).
            role: the relay's role for it (``lead``, ``subagent``, ``other``).
            send: the ASGI send of the response.
            answer: ``answer(send, status, kind, message, extra)`` writes a refusal.
            exchange: ``exchange(send, on_limited, body)`` forwards the request (with
                ``body`` instead of its own when not ``None``) and streams back.
            scan: reads the reply's usage as the relay streams it back (the ticket's own,
                fed by no one, when ``None``).
        """
        try:
            entered = await self._enter(agent_key(headers), body, role)
        except Exception:  # a fault in the ledger must never break a request: forward it
            log.exception("the agent ledger failed on a request; forwarding it uncounted")
            await exchange(send, None, None)
            return
        if isinstance(entered, Refused):
            await answer(send, 400, _REFUSED, entered.message, _NO_RETRY)
            return
        ticket = entered
        ticket.scan = scan or ticket.scan
        try:
            until = self._timeout_at(ticket.count)
            if until is None:  # no timeout: no timer on the hot path
                await exchange(ticket.watch(send), ticket.limited, ticket.body)
                return
            with move_on_at(self.clock, until) as scope:
                await exchange(ticket.watch(send), ticket.limited, ticket.body)
            if scope.cancelled_caught:
                refusal = self._time_out(ticket.key[1], ticket.count)
                if ticket.status is None:
                    await answer(send, 400, _REFUSED, refusal.message, _NO_RETRY)
                # else: the stream is cut short; the CLI's retry is refused
        finally:
            self._settle(ticket)

    async def _enter(self, key: tuple[str, str], body: bytes, role: str) -> Ticket | Refused:
        count = self.entries.get(key)
        if count is None:
            kind: RelayedAgentKind = "lead" if key[1] == LEAD else "agent"
            if kind == "agent" and is_workflow_agent(body):
                kind = "workflow_agent"
            count = self._entry(key, kind)
            known = self._by_agent.get(key[1]) if key[1] != LEAD else None
            if known is not None and known is not count:
                count.started_at = known.started_at
            if count.started_at is None:
                count.started_at = self._started.pop(key[1], None) or self.clock.monotonic()
            if kind == "workflow_agent" and not self.closed:
                refused = self._check(key[1], count, role)
                if refused is not None:
                    return refused
                if self._admission is not None:
                    refusal = await self._admission.admit_workflow_agent(key[1])
                    if refusal is not None and refusal.code == "spawn_budget":
                        count.denied = refusal.reason
                        return self._denied_refusal(refusal.reason)
                    if refusal is not None:
                        return Refused(refusal.reason)
            if kind != "lead":  # read once it really starts; the same agent keeps its model
                count.sent_model = model_of(body)
                admission = self._admission
                pinned = admission.agent_model(key[1], count.sent_model) if admission else None
                known_model = known.model if known is not None and known is not count else None
                count.model = known_model or pinned
                # its timeout runs from when it may run, not from its wait for a slot
                count.started_at = self.clock.monotonic()
        refused = self._check(key[1], count, role)
        if refused is not None:
            return refused
        reserve = self._estimate(count)
        self._reserved_tokens += reserve
        if count.requests == 0:  # its first request goes on now (after any hold)
            count.first_at = self.clock.time()
        count.requests += 1
        count.last_at = self.clock.time()
        if count.kind != "lead":
            count.last_tool = last_tool_of(body) or count.last_tool
        self.requests += 1
        return Ticket(key, count, reserve, body=with_model(body, count.model))

    def _check(self, agent_id: str, count: AgentCount, role: str) -> Refused | None:
        """The timeout and the budgets, checked in one synchronous step with the reservation
        that follows it in :meth:`_enter` (nothing awaits between the two)."""
        if count.denied is not None:
            return self._denied_refusal(count.denied)
        if count.timed_out:
            return self._timeout_refusal(agent_id)
        until = self._timeout_at(count)
        if until is not None and self.clock.monotonic() >= until:
            return self._time_out(agent_id, count)
        lead = count.kind == "lead" and role != "subagent"
        if lead and self.wrapping:
            # the wrap-up's own request: the room kept for it is its to spend
            budget = self.limits.request_budget
            if budget is not None and self.requests + 1 > budget:
                return self._exhaust("request_budget")
            return None
        if self.exhausted is not None:
            return self._refusal(self.exhausted)
        limits = self.limits
        if limits.request_budget is not None and self.requests + 1 > limits.request_budget - 1:
            return self._exhaust("request_budget")
        if limits.token_budget is not None:
            used = self.tokens + self._reserved_tokens + self._estimate(count)
            if used >= limits.token_budget - self._wrap_tokens():
                return self._exhaust("token_budget")
        return None

    def _estimate(self, count: AgentCount) -> int:
        """The tokens a request will likely cost, reserved until its usage is known: the
        agent's last request (its context only grows), or for an agent's first request the
        largest first request of another agent of this kind so far."""
        if count.requests:
            return count.last_total
        return self._first_peak.get(count.kind, 0)

    def _wrap_tokens(self) -> int:
        """Tokens kept for the wrap-up's own request: twice the lead's largest request so
        far (the wrap-up resends the lead's conversation), or a tenth of the budget (at most
        :data:`_DEFAULT_WRAP_TOKENS`) before the lead was measured."""
        if self._lead_peak:
            return 2 * self._lead_peak
        return min(_DEFAULT_WRAP_TOKENS, (self.limits.token_budget or 0) // 10)

    def _timeout_at(self, count: AgentCount) -> float | None:
        timeout = self.limits.agent_timeout_s
        if timeout is None or count.kind == "lead" or count.started_at is None:
            return None
        return count.started_at + timeout

    def _time_out(self, agent_id: str, count: AgentCount) -> Refused:
        if not count.timed_out:
            count.timed_out = True
            for other in self.entries.values():  # the same agent in another session key
                if other is not count and self._by_agent.get(agent_id) is other:
                    other.timed_out = True
            if self._admission is not None:
                try:
                    self._admission.agent_timed_out(agent_id, count.kind)
                except Exception:
                    log.exception("the admission failed on an agent's timeout")
        return self._timeout_refusal(agent_id)

    @staticmethod
    def _denied_refusal(reason: str) -> Refused:
        return Refused(f"teamlead: this agent does not start: {reason}")

    def _timeout_refusal(self, agent_id: str) -> Refused:
        seconds = self.limits.agent_timeout_s or 0
        return Refused(
            f"teamlead: agent {agent_id} ran past its timeout of {seconds:g} s and was "
            "stopped: go on with the other agents",
        )

    def _exhaust(self, reason: ExhaustReason) -> Refused:
        if self.exhausted is None and self._admission is not None:
            try:
                self._admission.budget_reached(reason)
            except Exception:
                log.exception("the admission failed on a budget reached")
        return self._refusal(reason)

    def _refusal(self, reason: ExhaustReason) -> Refused:
        if reason == "token_budget":
            text = f"teamlead: the run's token budget ({self.limits.token_budget}) is spent"
        else:
            text = f"teamlead: the run's request budget ({self.limits.request_budget}) is spent"
        return Refused(text + "; no new agent requests, the run wraps up")

    def _entry(self, key: tuple[str, str], kind: RelayedAgentKind) -> AgentCount:
        if key not in self.entries and len(self.entries) >= MAX_AGENTS:
            key = (key[0], _OVERFLOW)
        count = self.entries.get(key)
        if count is None:
            now = self.clock.time()
            count = self.entries[key] = AgentCount(kind, now, now)
            if key[1] != LEAD and key[1] not in self._by_agent:
                self._by_agent[key[1]] = count
        return count

    def _settle(self, ticket: Ticket) -> None:
        """``ticket``'s request ended: count its usage, publish it, check the budgets."""
        count = ticket.count
        self._reserved_tokens -= ticket.reserve
        count.last_at = self.clock.time()
        usage = ticket.scan.usage
        ok = ticket.status is not None and 200 <= ticket.status < 300
        if ticket.scan.seen:
            if usage.prompt_tokens is not None:
                count.input_tokens = (count.input_tokens or 0) + usage.prompt_tokens
            if usage.output_tokens is not None:
                count.output_tokens = (count.output_tokens or 0) + usage.output_tokens
            total = (usage.prompt_tokens or 0) + (usage.output_tokens or 0)
            if count.requests == 1:
                peak = self._first_peak.get(count.kind, 0)
                self._first_peak[count.kind] = max(peak, total)
            count.last_total = total
            self.tokens += total
            if count.kind == "lead":
                self._lead_peak = max(self._lead_peak, total)
        elif ok:
            count.unknown_usage += 1
            self.unknown_usage += 1
        if self._publish is not None:
            self._publish(
                AgentUsage(
                    agent_id=ticket.key[1],
                    kind=count.kind,
                    requests=count.requests,
                    input_tokens=count.input_tokens,
                    output_tokens=count.output_tokens,
                    unknown_usage=count.unknown_usage,
                    rate_limited=count.absorbed + count.passed,
                    last_tool=count.last_tool,
                )
            )
        tokens, requests = self.limits.token_budget, self.limits.request_budget
        if tokens is not None and self.tokens >= tokens - self._wrap_tokens():
            self._exhaust("token_budget")  # only the first budget reached counts
        if requests is not None and self.requests >= requests - 1:
            self._exhaust("request_budget")
