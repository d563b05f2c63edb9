"""The session: the three drivers and the collect-and-resume loop (the private Coordinator).

:class:`Coordinator` runs one coordinated session. A driver runs the first round
(:meth:`~Coordinator.run` for a query, :meth:`~Coordinator.run_client` for a connected
``ClaudeSDKClient``) or rebuilds a finished session (:meth:`~Coordinator.resume`); then
the resume loop collects what is outstanding, resumes the lead with it, retries
transient failures, and stops when nothing is outstanding or the policy says so. Each
job it hands off has its own module: :mod:`.round`, :mod:`.collect`, :mod:`.retry`,
:mod:`.resume_prompt` and :mod:`.ledger`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from .._claude.team import claude_config_dir
from .._procs import stop_marked
from .._redact import redact
from ..clock import SYSTEM_CLOCK, Clock
from ..events import Finished, ResumeFailed, Resuming
from ..policy import Policy
from ..tracker import Tracker
from .collect import Collector
from .gate_events import SpawnRecord
from .ledger import Ledger
from .resume_prompt import Delivery, render_resume_prompt
from .retry import retry_delay
from .round import Round, RoundOutcome
from .spawning import GateFeed, find_gate, install_gate, no_tools
from .wrapup import WrapFn, wrap_up

logger = logging.getLogger("teamlead.coordinator")

__all__ = ["Client", "Coordinator", "QueryFn", "prepare_options"]

#: The shape of ``claude_agent_sdk.query``: keyword ``prompt`` and ``options``.
QueryFn = Callable[..., AsyncIterator[Any]]


class Client(Protocol):
    """The part of ``ClaudeSDKClient`` that :func:`teamlead.receive_all` uses."""

    options: ClaudeAgentOptions

    async def query(self, prompt: str, session_id: str = ...) -> None: ...

    async def stop_task(self, task_id: str) -> None: ...

    def receive_messages(self) -> AsyncIterator[Any]: ...


def prepare_options(
    options: ClaudeAgentOptions | None, policy: Policy, *, client: bool = False
) -> ClaudeAgentOptions:
    """A copy of ``options`` whose CLI will not stop background agents before our deadline.

    With ``client=True`` (for ``ClaudeSDKClient`` + :func:`receive_all`) the CLI also
    reports its session state, so the helper knows exactly when the CLI is idle rather
    than guessing from results (queued notification turns can follow a result).
    User-set values of either variable are kept. With the spawn gate on
    (``policy.spawn``), its PreToolUse hook on ``Agent`` is merged into the user's hooks:
    a client's hooks are fixed when it connects, so :func:`teamlead.receive_all` finds
    the gate there.

    It does not start the request relay: the client's CLI lives as long as the user's
    client, so open the client inside :func:`teamlead.relay_for` to have its requests paced.
    """
    options = options or ClaudeAgentOptions()
    env = dict(options.env)
    env.setdefault("CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS", str(policy.bg_wait_ceiling_ms))
    if client:
        env.setdefault("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS", "1")
    options = dataclasses.replace(options, env=env)
    return install_gate(options, policy) if client else options


RoundFn = Callable[[str], Round]
RUN_MARK_VAR = "TEAMLEAD_RUN_MARK"


@dataclass
class Coordinator:
    """One coordinated session. Users call :func:`teamlead.query` or :func:`teamlead.receive_all`.

    Args:
        options: the SDK options; the coordinator never mutates them.
        query_fn: the streaming query generator to wrap.
        policy: limits and waits.
        clock: time source for deadlines and backoff.
    """

    options: ClaudeAgentOptions
    query_fn: QueryFn | None = None
    policy: Policy = field(default_factory=Policy)
    clock: Clock = SYSTEM_CLOCK
    tracker: Tracker = field(default_factory=Tracker)
    ledger: Ledger = field(default_factory=Ledger)
    _deadline: float = 0.0
    _wrap_at: float = 0.0
    _cli_state: str | None = None

    def __post_init__(self) -> None:
        self.options = prepare_options(self.options, self.policy)
        if self.query_fn is not None:  # a client's options got their gate when it connected
            self.options = install_gate(self.options, self.policy, self.clock)
        gate = find_gate(self.options) if self.policy.spawn.enabled else None
        self.feed: GateFeed | None = GateFeed(gate) if gate is not None else None
        # marks this run's CLI processes, so the wrap-up can end exactly their tree
        self._mark = uuid.uuid4().hex
        env = {**self.options.env, RUN_MARK_VAR: self._mark}
        self.options = dataclasses.replace(self.options, env=env)
        env = {**os.environ, **dict(self.options.env)}
        self.config_dir: Path = claude_config_dir(env)
        self.collected = Collector(config_dir=self.config_dir, policy=self.policy, clock=self.clock)
        # Keep the CLI's last stderr lines, so a CLI that dies is reported with its own words.
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        user_stderr = self.options.stderr

        def on_stderr(line: str) -> None:
            if line.strip():
                self._stderr_tail.append(line.strip())
            if user_stderr is not None:
                user_stderr(line)

        self.options = dataclasses.replace(self.options, stderr=on_stderr)

    # -- the drivers -----------------------------------------------------------------------
    async def run(self, prompt: str) -> AsyncGenerator[Any, None]:
        """Run the first query, then collect and resume until done. Yields messages and events."""
        query_fn = self._require_query_fn("run")
        self._start_clock()
        first = self._round(query_fn(prompt=prompt, options=self.options))
        async for item in first:
            yield item
        self._process_ended()
        self._after_first(first)
        if self._wrap_due(first.outcome):
            async for item in self._wrap_up([], self._wrap_query_round):
                yield item
            return
        async for item in self._resume_loop(self._query_round):
            yield item

    def _start_clock(self) -> None:
        """The run's deadline, and the wrap-up point the spawn gate reserves before it."""
        self._deadline = self.clock.monotonic() + self.policy.deadline_s
        self._wrap_at = self._deadline
        if self.feed is not None:
            self.feed.gate.set_deadline(self.policy.deadline_s)
            self._wrap_at -= self.policy.spawn.reserve_for(self.policy.deadline_s)

    def _process_ended(self) -> None:
        if self.feed is not None:
            self.feed.gate.process_ended()

    async def resume(self, session_id: str) -> AsyncGenerator[Any, None]:
        """Collect and resume a session that ended earlier with work outstanding.

        The session's state is rebuilt from its transcript (see
        :func:`teamlead._claude.session.load_session`), then the usual collect-and-resume loop runs.
        """
        from .._claude.session import load_session

        self._require_query_fn("resume")
        self._start_clock()
        self.tracker = load_session(self.config_dir, session_id)
        self.ledger.last_round_ok = self.tracker.last_success is not None
        async for item in self._resume_loop(self._query_round):
            yield item

    async def run_client(self, client: Client) -> AsyncGenerator[Any, None]:
        """Drive a connected ``ClaudeSDKClient`` whose query was already sent."""
        self.ledger.one_process = True
        self._start_clock()
        first = self._round(client.receive_messages(), settle=True)
        async for item in first:
            yield item
        self._after_first(first)
        if self._cli_state is None:
            logger.warning(
                "the client's CLI reports no session state, so its idle moment is guessed; "
                "build the client's options with teamlead.prepare_options(..., client=True)"
            )

        def client_round(prompt_text: str) -> Round:
            # the same session, on the same CLI process: send, then read until settled
            return self._round(
                client.receive_messages(), settle=True, send=lambda: client.query(prompt_text)
            )

        async def wrap_round(prompt_text: str, stop: list[str]) -> Round:
            # a live client keeps its tools: its tasks are stopped, the gate denies spawns
            for task_id in stop:
                with anyio.move_on_after(5), contextlib.suppress(Exception):
                    await client.stop_task(task_id)
            return self._round(
                client.receive_messages(),
                settle=True,
                send=lambda: client.query(prompt_text),
                deadline=self._deadline,
            )

        if self._wrap_due(first.outcome):
            async for item in self._wrap_up([], wrap_round):
                yield item
            return
        async for item in self._resume_loop(client_round, process_alive=True, wrap=wrap_round):
            yield item

    def _require_query_fn(self, what: str) -> QueryFn:
        if self.query_fn is None:
            raise TypeError(f"Coordinator.{what} needs a query_fn")
        return self.query_fn

    def _round(
        self,
        stream: AsyncIterator[Any],
        *,
        settle: bool = False,
        send: Callable[[], Awaitable[None]] | None = None,
        deadline: float | None = None,
    ) -> Round:
        return Round(
            stream,
            send=send,
            tracker=self.tracker,
            policy=self.policy,
            clock=self.clock,
            deadline=self._wrap_at if deadline is None else deadline,
            settle=settle,
            cli_state=self._cli_state,
            stderr_tail=self._stderr_tail,
            observer=self.feed.observe if self.feed is not None else None,
            on_cut=self._end_cli if self._cuts(deadline) else None,
        )

    def _cuts(self, deadline: float | None) -> bool:
        """Whether a round ends its CLI at the wrap-up point: a query round's process
        (a client's CLI stays; its tasks are stopped with ``stop_task``)."""
        return self.feed is not None and deadline is None and self.query_fn is not None

    async def _end_cli(self) -> None:
        """The wrap-up point: end this run's CLI process tree (its agents end with it)."""
        await anyio.to_thread.run_sync(stop_marked, RUN_MARK_VAR, self._mark)

    def _query_round(self, prompt_text: str) -> Round:
        """One resume round: a new CLI process with ``resume=session_id``."""
        options = dataclasses.replace(self.options, resume=self.tracker.session_id or "")
        return self._round(self._require_query_fn("run")(prompt=prompt_text, options=options))

    async def _wrap_query_round(self, prompt_text: str, stop: list[str]) -> Round:
        """The wrap-up round: a new CLI process on the session, with no tools (the one
        that ran ``stop`` has ended already)."""
        options = no_tools(self.options, self.tracker.session_id or "")
        stream = self._require_query_fn("run")(prompt=prompt_text, options=options)
        return self._round(stream, deadline=self._deadline)

    # -- the deadline's wrap-up ------------------------------------------------------------
    def _wrap_due(self, outcome: RoundOutcome) -> bool:
        """The wrap-up point cut a round: wrap up, if the lead can still be resumed."""
        return (
            self.feed is not None
            and outcome.error_kind == "deadline"
            and bool(self.tracker.session_id)
            and self.clock.monotonic() < self._deadline
        )

    async def _wrap_up(self, pending: list[Delivery], wrap_round: WrapFn) -> AsyncIterator[Any]:
        """The deadline's wrap-up (see :func:`.wrapup.wrap_up`), then :class:`Finished`."""
        assert self.feed is not None
        steps = wrap_up(
            self.feed,
            self.tracker,
            self.collected,
            self.ledger,
            self.policy,
            clock=self.clock,
            deadline=self._deadline,
            pending=pending,
            wrap_round=wrap_round,
        )
        async for item in steps:
            yield item
        yield self.finish()

    def _after_first(self, first: Round) -> None:
        self._cli_state = first.cli_state
        self.ledger.after_round(first.outcome, first=True)

    # -- the resume loop -------------------------------------------------------------------
    async def _resume_loop(
        self,
        round_fn: RoundFn,
        *,
        process_alive: bool = False,
        wrap: WrapFn | None = None,
    ) -> AsyncIterator[Any]:
        """Collect, then resume with what was collected, until nothing is outstanding.

        ``round_fn(prompt)`` is one resumed lead turn. A round failing with a transient
        API error is retried with the policy's backoff.
        """
        while True:
            pending: list[Delivery] = []
            collecting = self.collected.collect(
                self.tracker, pending, deadline=self._wrap_at, process_alive=process_alive
            )
            async for event in collecting:
                yield event
            if self.feed is not None and pending and self._past_wrap_point():
                async for item in self._wrap_up(pending, wrap or self._wrap_query_round):
                    yield item
                return
            if not pending or not self._may_resume(pending):
                break
            prompt_text, pending = self._prompt_for(pending)
            self.ledger.resumes += 1
            round_no = self.ledger.resumes
            attempt = 0
            while True:
                attempt += 1
                session = self.tracker.session_id or ""
                yield Resuming(
                    session_id=session,
                    round=round_no,
                    attempt=attempt,
                    deliveries=[d.key for d in pending],
                    reasons=[f"{len(pending)} result(s) not yet used by the lead"],
                )
                this_round = round_fn(prompt_text)
                async for item in this_round:
                    yield item
                if not process_alive:
                    self._process_ended()
                self._cli_state = this_round.cli_state
                outcome = this_round.outcome
                if self._wrap_due(outcome):
                    self.ledger.after_round(outcome, first=False)
                    async for item in self._wrap_up([], wrap or self._wrap_query_round):
                        yield item
                    return
                if outcome.ok:
                    break
                retry = self._retry_delay(outcome, attempt)
                yield ResumeFailed(
                    session_id=session,
                    round=round_no,
                    attempt=attempt,
                    error=redact(outcome.error or "the resumed turn failed"),
                    transient=outcome.transient,
                    retry_in_s=retry,
                )
                if retry is None:
                    break
                self.ledger.add_cost(outcome)
                await self.clock.sleep(retry)
            self.ledger.after_round(outcome, first=False)
            if not outcome.ok:
                self.ledger.stopped(
                    "resume_failed",
                    f"resume round {round_no} failed after {attempt} attempt(s): "
                    f"{redact(outcome.error or 'unknown error')}; resume later with "
                    f"`teamlead resume {self.tracker.session_id}`",
                )
                break
            self.ledger.reasons += await self.collected.absorb(pending)
        yield self.finish()

    def _retry_delay(self, outcome: RoundOutcome, attempt: int) -> float | None:
        return retry_delay(
            retry=self.policy.resume_retry,
            attempt=attempt,
            transient=outcome.transient,
            now=self.clock.monotonic(),
            deadline=self._deadline,
            spent_usd=self.ledger.cost_usd + outcome.cost_usd,
            max_cost_usd=self.policy.max_cost_usd,
            retry_after=outcome.retry_after,
        )

    def _prompt_for(self, pending: list[Delivery]) -> tuple[str, list[Delivery]]:
        """The resume prompt and the deliveries it carries; the rest wait for the next round.

        Only what the prompt really holds may be marked absorbed (and its inbox entry
        deleted) after the round, so results over the size cap are carried, not dropped.
        """
        missing = self.collected.missing_lines()
        text, used = render_resume_prompt(pending, missing, self.policy)
        self.collected.carry = pending[used:]
        return text, pending[:used]

    def _may_resume(self, pending: list[Delivery]) -> bool:
        unused = len(pending)
        if not self.tracker.session_id:
            self.ledger.stopped(
                "no_session_id", "no session id was seen, so the lead cannot be resumed"
            )
            return False
        if self.ledger.resumes >= self.policy.max_resumes:
            limit = self.policy.max_resumes
            self.ledger.stopped(
                "max_resumes", f"max resumes ({limit}) reached with {unused} result(s) unused"
            )
            return False
        budget = self.policy.max_cost_usd
        if budget is not None and self.ledger.cost_usd >= budget:
            self.ledger.stopped(
                "cost_budget",
                f"cost budget ${budget:g} reached (${self.ledger.cost_usd:.4f} spent) "
                f"with {unused} result(s) unused",
            )
            return False
        if self.clock.monotonic() >= self._deadline:
            self.ledger.stopped(
                "deadline", f"deadline of {self.policy.deadline_s:g} s reached before resuming"
            )
            return False
        return True

    def _past_wrap_point(self) -> bool:
        return self.tracker.session_id is not None and (
            self._wrap_at <= self.clock.monotonic() < self._deadline
        )

    def finish(self) -> Finished:
        """The final :class:`Finished` event for the state reached (the gate is closed)."""
        records: list[SpawnRecord] = []
        if self.feed is not None:
            self.feed.gate.close()
            records = self.feed.gate.records()
        return self.ledger.finish(
            self.tracker, self.collected, wait_s=self.policy.wait_s, calls=records
        )
