"""The run's drivers and its collect-and-resume loop, on one :class:`~.state.RunState`.

A driver runs the first round (:func:`run_query`, :func:`run_client`) or rebuilds a
finished session (:func:`run_resume`); then the resume loop collects what is outstanding,
resumes the lead with it, retries transient failures (at least the API's Retry-After), and
stops when nothing is outstanding or the policy says so, ending with the one
:class:`~teamlead.events.Finished` (:func:`~.result.finish`). A resume round is a new CLI
process in ``query`` mode, the same client in ``client`` mode.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from typing import Any, Protocol

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from .._redact import redact
from ..errors import UsageError
from ..events import Finished, ResumeFailed, Resuming
from .collect import Collection, absorb
from .options import round_options
from .outcome import RoundOutcome
from .readback import read_back
from .result import finish
from .resume_prompt import Delivery, render_resume_prompt
from .retry import retry_delay
from .round import Round
from .state import RunState
from .wrapup import WrapFn, wrap_up

logger = logging.getLogger("teamlead.coordinator")

__all__ = ["Client", "QueryFn", "interrupted", "run_client", "run_query", "run_resume"]

#: The shape of ``claude_agent_sdk.query``: keyword ``prompt`` and ``options``.
QueryFn = Callable[..., AsyncIterator[Any]]
RoundFn = Callable[[str], Round]


class Client(Protocol):
    """The part of ``ClaudeSDKClient`` that :func:`teamlead.receive_all` uses."""

    options: ClaudeAgentOptions

    async def query(self, prompt: str, session_id: str = ...) -> None: ...

    async def stop_task(self, task_id: str) -> None: ...

    def receive_messages(self) -> AsyncIterator[Any]: ...


# -- the drivers ---------------------------------------------------------------------------
async def run_query(
    state: RunState, query_fn: QueryFn, prompt: str | AsyncIterable[dict[str, Any]]
) -> AsyncGenerator[Any, None]:
    """Run the user's ``prompt`` on a fresh ``query``-mode run, then collect and resume
    until done (each round one call of ``query_fn``). Yields messages and events."""
    resume, wrap = _query_resumes(state, query_fn)
    await _begin(state)  # the first round starts on the run's options as they are then
    first = _query_round(state, query_fn, prompt, state.ask.options)
    async for item in _drive(state, first, resume, wrap):
        yield item


async def run_resume(
    state: RunState, query_fn: QueryFn, session_id: str
) -> AsyncGenerator[Any, None]:
    """Collect and resume a session that ended earlier with work outstanding, on a fresh
    ``query``-mode run: its state is rebuilt from its transcript (brought from the session
    store first where this machine lacks it or is behind), then the loop runs as after a
    first round.

    Raises:
        UsageError: the session does not exist under the config dir (nor in the store).
    """
    from .._claude import load_session

    resume, wrap = _query_resumes(state, query_fn)
    await _begin(state)
    if state.ask.store is not None:  # one given up at the start answers at once
        await state.ask.store.bring_home(session_id)
    state.stream.tracker = load_session(state.ask.config_dir, session_id, clock=state.clock)
    state.delivered.ledger.last_round_ok = state.stream.tracker.last_success is not None
    async for item in _drive(state, None, resume, wrap):
        yield item


async def run_client(state: RunState, client: Client) -> AsyncGenerator[Any, None]:
    """Drive a connected ``ClaudeSDKClient`` whose query was already sent, on a ``client``
    run: fresh, or a :class:`~teamlead.ClientRun`'s whose earlier turns ended."""
    await _begin(state)
    if state.ask.turns == 1:  # the client's agents, stopped on timeout for the run's life
        state.admission.stop_with(lambda task_id: client.stop_task(task_id))

    def client_round(prompt_text: str, deadline: float | None = None) -> Round:
        # the same session, on the same CLI process: send, then read until settled; the
        # wrap-up's own round (a ``deadline``) is cut by that deadline alone, as a query
        # run's: neither the graceful stop that asked for it nor a budget cuts it
        return Round(
            state,
            client.receive_messages(),
            settle=True,
            send=lambda: client.query(prompt_text),
            deadline=deadline,
            budget_cut=deadline is None,
        )

    async def wrap_round(prompt_text: str, stop: list[str]) -> Round:
        # a live client keeps its tools: its tasks are stopped, the gate denies spawns
        for task_id in stop:
            with anyio.move_on_after(5), contextlib.suppress(Exception):
                await client.stop_task(task_id)
        return client_round(prompt_text, state.deadline.at)

    first = Round(state, client.receive_messages(), settle=True)
    async for item in _drive(state, first, client_round, wrap_round):
        yield item


async def _begin(state: RunState) -> None:
    """A turn of the run begins: its clock starts, its session store opens."""
    state.ask.turns += 1
    if state.ask.turns > 1 and not (state.stop.requested or state.stop.wrapping):
        state.agents.next_turn()  # a client's next turn: the last one's wrap-up is over
    state.start_clock()
    await state.ask.open_store()


async def _drive(
    state: RunState, first: Round | None, resume: RoundFn, wrap: WrapFn
) -> AsyncIterator[Any]:
    """The first round (none for a rebuilt session), then the wrap-up when it was cut at
    the wrap-up point, else the resume loop."""
    if first is not None:
        async for item in _played(state, first):
            yield item
        state.delivered.ledger.after_round(first.outcome, first=True)
        if state.stop.requested:
            yield interrupted(state)
            return
        if state.ask.mode == "client" and state.stream.cli_state is None:
            logger.warning(
                "the client's CLI reports no session state, so its idle moment is guessed; "
                "build the client's options with teamlead.ClientRun (or "
                "teamlead.prepare_options(..., client=True))"
            )
        if _wrap_due(state, first.outcome):
            async for item in _wrap_up(state, [], wrap):
                yield item
            return
    async for item in _resume_loop(state, resume, wrap=wrap):
        yield item


def _query_round(
    state: RunState,
    query_fn: QueryFn,
    prompt: str | AsyncIterable[dict[str, Any]],
    options: ClaudeAgentOptions,
    deadline: float | None = None,
) -> Round:
    """One round of a ``query`` run: a new CLI process from ``query_fn``. The wrap-up point
    (the deadline, with the gate off) ends the run's CLI process tree, so closing a round's
    stream never waits the SDK's graceful exit past it."""
    # with the gate on, a budget reached cuts a round but the wrap-up (which follows)
    stream = query_fn(prompt=prompt, options=options)
    budget_cut = deadline is None and state.admission.gated
    return Round(state, stream, deadline=deadline, on_cut=state.end_cli, budget_cut=budget_cut)


def _query_resumes(state: RunState, query_fn: QueryFn) -> tuple[RoundFn, WrapFn]:
    """A ``query`` run's resume round (a new CLI process with ``resume=session_id``) and its
    wrap-up round (a new CLI process on the session, with no tools: the one that ran
    ``stop`` has ended already; cut by the deadline alone)."""

    def resume(prompt_text: str) -> Round:
        options = round_options(state.ask.options, state.stream.tracker.session_id or "")
        return _query_round(state, query_fn, prompt_text, options)

    async def wrap(prompt_text: str, stop: list[str]) -> Round:
        session = state.stream.tracker.session_id or ""
        options = round_options(state.ask.options, session, tools_off=True)
        return _query_round(state, query_fn, prompt_text, options, state.deadline.at)

    return resume, wrap


async def _played(state: RunState, this_round: Round) -> AsyncIterator[Any]:
    """``this_round``'s messages, then the run takes in its end: a query round's CLI
    process has ended, the CLI's last state, and what a broken stream never showed
    (:func:`~.readback.read_back`)."""
    async for item in this_round:
        yield item
    if state.ask.mode != "client":
        state.admission.process_ended()
    state.stream.cli_state = this_round.outcome.cli_state
    read_back(state, this_round.outcome)


# -- the deadline's wrap-up ----------------------------------------------------------------
def _wrap_due(state: RunState, outcome: RoundOutcome) -> bool:
    """The wrap-up point (or a budget reached) cut a round: wrap up, if the lead can still
    be resumed."""
    exhausted = state.agents.exhaust_reason is not None
    cut = outcome.error_kind in ("deadline", "budget", "stopping")
    return (
        state.admission.gated
        and (cut or exhausted or state.stop.wrapping)
        and bool(state.stream.tracker.session_id)
        and state.clock.monotonic() < state.deadline.at
    )


async def _wrap_up(state: RunState, carried: list[Delivery], wrap: WrapFn) -> AsyncIterator[Any]:
    """The deadline's wrap-up (see :func:`.wrapup.wrap_up`), then :class:`Finished`."""
    async for item in wrap_up(state, carried, wrap):
        yield item
    yield interrupted(state) if state.stop.requested else finish(state)


def _not_yet_used(delivered: list[Delivery]) -> str:
    """Why the lead is resumed, counting only what hands it a result."""
    results = sum(1 for d in delivered if d.carries_result)
    stopped = sum(1 for d in delivered if d.continue_task and d.status == "partial")
    lost = sum(1 for d in delivered if d.continue_task and d.status != "partial")
    rest = len(delivered) - results - stopped - lost
    failed = f"; {rest} failed or left nothing to deliver" if rest else ""
    to_continue = f"; {stopped} agent(s) stopped at a limit to continue" if stopped else ""
    if lost:
        to_continue += f"; {lost} agent(s) lost with their CLI to continue"
    return f"{results} result(s) not yet used by the lead{to_continue}{failed}"


# -- the resume loop -----------------------------------------------------------------------
async def _resume_loop(state: RunState, round_fn: RoundFn, *, wrap: WrapFn) -> AsyncIterator[Any]:
    """Collect, then resume with what was collected, until nothing is outstanding.

    ``round_fn(prompt)`` is one resumed lead turn. A round failing with a transient API
    error is retried with the policy's backoff (at least the API's Retry-After).
    """
    ledger, tracker = state.delivered.ledger, state.stream.tracker
    client = state.ask.mode == "client"
    carried: list[Delivery] = []
    while True:
        collection = Collection(
            state, carried=carried, deadline=state.deadline.wrap_at, process_alive=client
        )
        async for event in collection:
            yield event
        if state.stop.requested:
            yield interrupted(state)
            return
        pending = collection.deliveries
        now = state.clock.monotonic()
        past_wrap_point = tracker.session_id is not None and (
            state.deadline.wrap_at <= now < state.deadline.at
        )
        wrap_now = past_wrap_point or state.stop.wrapping
        if state.admission.gated and pending and wrap_now:
            async for item in _wrap_up(state, pending, wrap):
                yield item
            return
        if not pending or state.stop.wrapping or not _may_resume(state, pending):
            break
        prompt_text, delivered, carried = _prompt_for(state, pending)
        ledger.resumes += 1
        round_no = ledger.resumes
        attempt = 0
        while True:
            attempt += 1
            session = tracker.session_id or ""
            yield Resuming(
                session_id=session,
                round=round_no,
                attempt=attempt,
                deliveries=[d.key for d in delivered],
                reasons=[_not_yet_used(delivered)],
                without_result=[d.key for d in delivered if not d.carries_result],
            )
            this_round = round_fn(prompt_text)
            async for item in _played(state, this_round):
                yield item
            outcome = this_round.outcome
            if state.stop.requested:
                ledger.after_round(outcome, first=False)
                yield interrupted(state)
                return
            if _wrap_due(state, outcome):
                ledger.after_round(outcome, first=False)
                async for item in _wrap_up(state, [], wrap):
                    yield item
                return
            if outcome.ok:
                break
            retry = retry_delay(
                retry=state.ask.policy.resume_retry,
                attempt=attempt,
                transient=outcome.transient,
                now=state.clock.monotonic(),
                deadline=state.deadline.at,
                spent_usd=ledger.cost_usd + outcome.cost_usd,
                max_cost_usd=state.ask.policy.max_cost_usd,
                retry_after=outcome.retry_after,
            )
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
            ledger.add_cost(outcome)
            with state.stop.cancels():
                await state.clock.sleep(retry)
            if state.stop.requested:
                yield interrupted(state)
                return
        ledger.after_round(outcome, first=False)
        if not outcome.ok:
            ledger.stopped(
                "resume_failed",
                f"resume round {round_no} failed after {attempt} attempt(s): "
                f"{redact(outcome.error or 'unknown error')}; resume later with "
                f"`teamlead resume {tracker.session_id}`",
            )
            break
        ledger.reasons += await absorb(state, delivered)
    yield finish(state)


def _prompt_for(
    state: RunState, pending: list[Delivery]
) -> tuple[str, list[Delivery], list[Delivery]]:
    """The resume prompt, the deliveries it carries, and the rest for the next round.

    Only what the prompt really holds may be marked absorbed (and its inbox entry
    deleted) after the round, so results over the size cap are carried, not dropped.
    """
    missing = state.delivered.collected.missing_lines() + state.agents.missing_lines(
        state.stream.tracker
    )
    text, used = render_resume_prompt(pending, missing, state.ask.policy, spill=state.spill)
    return text, pending[:used], pending[used:]


def _may_resume(state: RunState, pending: list[Delivery]) -> bool:
    ledger, policy = state.delivered.ledger, state.ask.policy
    unused = len(pending)
    session_id = state.stream.tracker.session_id
    if not session_id:
        ledger.stopped("no_session_id", "no session id was seen, so the lead cannot be resumed")
        return False
    if state.ask.wiring.verbatim and not _saved(state, session_id):
        ledger.stopped(
            "no_session_id",
            f"session {session_id} was not saved where its CLI could resume it (no "
            "transcript under the config dir, no session store), so the lead cannot be resumed",
        )
        return False
    if ledger.resumes >= policy.max_resumes:
        limit = policy.max_resumes
        ledger.stopped(
            "max_resumes", f"max resumes ({limit}) reached with {unused} result(s) unused"
        )
        return False
    budget = policy.max_cost_usd
    if budget is not None and ledger.cost_usd >= budget:
        ledger.stopped(
            "cost_budget",
            f"cost budget ${budget:g} reached (${ledger.cost_usd:.4f} spent) "
            f"with {unused} result(s) unused",
        )
        return False
    if state.clock.monotonic() >= state.deadline.at:
        ledger.stopped("deadline", f"deadline of {policy.deadline_s:g} s reached before resuming")
        return False
    return True


def _saved(state: RunState, session_id: str) -> bool:
    """Whether the CLI can resume ``session_id``: its transcript is under the run's config
    dir, or the options' session store holds it. The drop-in's run, on options teamlead did
    not make (a custom transport, no persistence), checks this before it resumes: a resume
    that cannot work would only turn the app's answer into the CLI's error."""
    from .._claude import find_session_file

    if state.ask.user_options.session_store is not None:
        return True
    try:
        find_session_file(state.ask.config_dir, session_id)
    except UsageError:
        return False
    return True


def interrupted(state: RunState) -> Finished:
    """The :class:`Finished` of a run stopped from outside (:attr:`RunState.stop`): its
    running tasks are ``stopped``, the calls still queued in the gate ``rejected``."""
    reason = state.stop.reason or "stopped"
    stopped = state.stream.tracker.stop_open_tasks(state.clock.monotonic())
    # every call still queued in the gate is rejected now, before its CLI is ended (which
    # would cancel their hooks)
    state.admission.stopped(reason)
    names = ", ".join(f'"{redact(t.description or t.task_id)}"' for t in stopped) or "none"
    text = f"the run was stopped ({reason}); stopped unfinished: {names}"
    if state.stream.tracker.session_id:
        text += f"; resume later with `teamlead resume {state.stream.tracker.session_id}`"
    state.delivered.ledger.stopped("interrupted", text)
    return finish(state)
