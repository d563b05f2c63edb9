"""The spawn gate: a PreToolUse hook on ``Agent`` that queues, budgets, staggers and
meets the deadline (and on ``Workflow``, whose agents fire no hook of their own).

The CLI runs each Agent call only when its PreToolUse hook returns, and the hooks of one
message run concurrently; a hook may await. So the gate decides in the hook:

* **deny** (``permissionDecision: "deny"``) with a reason that tells the lead what to do
  next: past the spawn budget, past the per-message limit, too deep (a subagent spawning),
  too close to the deadline, the run ending, or odd input / an internal fault (the gate
  never raises: it denies and records why);
* **queue** (await in the hook) while the run's limit or the process-wide
  :class:`~teamlead._gate.slots.SpawnCap` is full, FIFO, bounded by the deadline, and
  while the run is paused (:class:`~teamlead._gate.pause.Pause`);
* **admit** (return ``{}``: no opinion), after the stagger.

A ``Workflow`` call's hook decides only what must hold before the script runs (depth,
budget, a closed run, the wrap-up point); it takes no slot or budget unit and is not in
:meth:`SpawnGate.records`. Each of its agents is admitted at the relay, when its first
request arrives (:meth:`SpawnGate.admit_workflow_agent`).

A slot is held from admission until the task has really ended: the run's tracker reports
``task_started``/``task_ended`` from the stream, and a tool result that shows the agent
never ran or already finished (CLI rejection, another hook's deny, a foreground agent)
frees it too (:meth:`SpawnGate.observe`). :meth:`SpawnGate.close` denies whatever still
waits and frees every Agent call's slot; :meth:`SpawnGate.end` also frees the workflow
agents'.

Budget and per-turn units are checked and taken in one synchronous step (no await in
between), so concurrent hook calls can never both pass for the last unit; a unit taken by
a call that is then not admitted is given back.

Example:
    >>> gate = SpawnGate(SpawnPolicy(max_concurrent_agents=3, spawn_budget=5), deadline_s=600)
    >>> options = merge_hook(options, gate.hook_matcher())  # _run.options  # doctest: +SKIP
    >>> async for message in claude_agent_sdk.query(prompt=..., options=options):
    ...     gate.observe(message)  # doctest: +SKIP
    >>> gate.close()
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import SyncHookJSONOutput

from ..clock import SYSTEM_CLOCK, Clock
from ..events import DenyCode, SpawnDecided, SpawnOutcome
from ..policy import SpawnPolicy, is_model_alias
from ..tracker import (
    LAUNCH_NOTICE,
    AgentCallsSent,
    TaskEnded,
    TaskStarted,
    ToolResultSeen,
    TrackedEvent,
    parse_message,
)
from . import reasons as why
from .calls import Call, SpawnRecord
from .pause import Pause
from .reasons import WorkflowRefusal
from .slots import FifoSlots, SpawnCap, cli_subagent_cap
from .turns import Turns

__all__ = ["HOOK_TOOLS", "AgentResult", "SpawnGate", "classify_agent_result"]

#: The tools the gate's hook decides on: ``Agent`` calls, and ``Workflow`` calls (their agents).
HOOK_TOOLS = "Agent|Workflow"
_WORKFLOW = "Workflow"
_WORKFLOW_AGENT = "workflow agent"
_HOOK_MARGIN_S = 10.0  # hook timeout = longest wait + this: the gate answers before the CLI quits
_MAX_TEXT = 200
#: How long a refusal after a stop waits before it is answered (see :meth:`SpawnGate.stopped`);
#: under ``_HOOK_MARGIN_S``, so it still comes before the CLI's hook timeout.
_HELD_AFTER_STOP_S = 5.0
_MAX_WORKFLOW_DENIALS = 1000
_WORKFLOW_HOLD_S = 1800.0  # a workflow agent's longest wait for a slot with no deadline

#: launched: a background agent started (its task events follow); finished: a foreground
#: agent's answer; failed: an error result; rejected: the CLI refused to run it;
#: denied: a PreToolUse hook (this gate or another) denied it.
AgentResult = Literal["launched", "finished", "failed", "rejected", "denied"]

_CLI_LIMIT = "Concurrent subagent limit reached"
_HOOK_TIMEOUT = "PreToolUse hook did not respond before its timeout"
_HOOK_DENY = "PreToolUse:Agent hook error"


class SpawnGate:
    """The spawn gate of one run.

    Args:
        policy: the limits (:class:`~teamlead.policy.SpawnPolicy`).
        cap: the cap shared with the process's other runs (a run's gate gets its process's,
            :attr:`~teamlead.ProcessState.spawn_cap`; default: a cap of this gate's own).
        deadline_s: seconds from now until the run's deadline (``None``: no deadline).
        clock: time source for every wait.
        on_event: receives each :class:`~teamlead.events.SpawnDecided`; an
            exception from it is recorded in :attr:`errors`, never raised into the hook.
        env: the CLI's environment (``CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS``).
        max_wait_s: longest a call waits in the gate when there is no nearer deadline.
        turn_gap_s: without a message id from :meth:`note_message`, lead calls that arrive
            while another is in the hook, or within this gap after, count as one message.
        pause: the run's pause (``teamlead pause``): while it is on, a call that got its
            slots waits for it to be lifted before it is admitted (``None``: never paused).
        subagent_model: the model every admitted Agent call's agent runs on
            (``updatedInput.model``, an alias only); ``None`` leaves the call's own.
        gated: ``False``: the run has no gate (no hook, no limits): every workflow agent
            starts at once, and the limits read ``None``.
    """

    def __init__(
        self,
        policy: SpawnPolicy | None = None,
        *,
        cap: SpawnCap | None = None,
        deadline_s: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_event: Callable[[SpawnDecided], None] | None = None,
        env: Mapping[str, str] | None = None,
        max_wait_s: float = 1800.0,
        turn_gap_s: float = 1.0,
        pause: Pause | None = None,
        subagent_model: str | None = None,
        gated: bool = True,
    ) -> None:
        #: Whether the run has a spawn gate (its hook, limits, queue and wrap-up point).
        self.gated = gated
        self.policy = policy or SpawnPolicy()
        self._clock = clock
        self._cap = cap if cap is not None else SpawnCap()
        self.on_event = on_event
        self._max_wait_s = max(0.0, max_wait_s)
        self._env: dict[str, str] = dict(env or {})
        cli = cli_subagent_cap(self._env)  # the run's own limit is never above the CLI's
        self._slots = FifoSlots(min(self.policy.max_concurrent_agents or cli, cli))
        self._deadline: float | None = None
        self._reserve = 0.0
        if deadline_s is not None:
            self.set_deadline(deadline_s)
        self._calls: dict[str, Call] = {}
        #: the calls of each tool_use id as the hook got it (a repeated id has several)
        self._by_raw: dict[str, list[Call]] = {}
        self._by_task: dict[str, Call] = {}
        self._turns = Turns(turn_gap_s)
        self._used = 0
        self._last_start = -math.inf
        self._closed = False
        self._stopped = False
        self._anon = 0
        #: The model every admitted Agent call's agent runs on (``updatedInput.model``);
        #: ``None`` leaves the call's own. The run's admission changes it mid-run.
        self.subagent_model = subagent_model
        self._pause = pause
        #: workflow agent -> how many holds (a slot of each pool) it has
        self._held: dict[str, int] = {}
        self._waiting: set[anyio.CancelScope] = set()  # workflow agents waiting for slots
        self._close_reason = "the run is ending"
        #: The most workflow agents that held slots at once.
        self.max_workflow_agents = 0
        #: The Workflow calls the gate denied: ``(tool_use_id, code, reason)``, in order.
        self.workflow_denials: list[tuple[str, DenyCode, str]] = []
        #: Faults inside the gate (each denied its call) and in ``on_event``.
        self.errors: list[str] = []

    # -- configuration ---------------------------------------------------------------------
    def set_deadline(self, seconds_from_now: float) -> None:
        """(Re)set the run's deadline; the wrap-up reserve follows from the policy."""
        self._deadline = self._clock.monotonic() + max(0.0, seconds_from_now)
        self._reserve = self.policy.reserve_for(seconds_from_now)

    @property
    def limit(self) -> int | None:
        """Agents this run may have running at once (its own limit and the shared cap);
        ``None`` without the gate."""
        return self._limit if self.gated else None

    @property
    def _limit(self) -> int:
        return min(self._slots.limit, self._cap.limit)

    @property
    def cap(self) -> int | None:
        """This run's own limit on agents at once (the live cap), before the shared cap;
        ``None`` without the gate."""
        return self._slots.limit if self.gated else None

    @property
    def most(self) -> int | None:
        """The highest cap that means anything: the CLI's own subagent cap (which rejects
        past it) and the process-wide cap; ``None`` without the gate."""
        return min(cli_subagent_cap(self._env), self._cap.limit) if self.gated else None

    def set_limit(self, limit: int) -> None:
        """Change the run's limit now (the live cap): a raise admits queued calls and held
        workflow agents at once, in arrival order; a cut stops no running agent, it holds
        the next ones until enough have ended.

        Raises:
            ValueError: ``limit`` is below 1.
        """
        self._slots.set_limit(limit)

    @property
    def running(self) -> int:
        """Agents whose slot is still held (admitted calls, and held workflow agents)."""
        return self._slots.held

    @property
    def queued(self) -> int:
        """Calls waiting in the gate for a slot."""
        return sum(c.status == "queued" for c in self._calls.values())

    @property
    def spawned(self) -> int:
        """Budget units used: calls admitted (or being admitted) in this run, and workflow
        agents started."""
        return self._used

    @property
    def admit_until(self) -> float | None:
        """The run's wrap-up point (the deadline less its reserve, on the clock's monotonic
        time): no agent is admitted after it. ``None``: no deadline."""
        return None if self._deadline is None else self._deadline - self._reserve

    # -- workflow agents (no hook: their first request at the relay) ------------------------
    async def admit_workflow_agent(self, agent_id: str) -> WorkflowRefusal | None:
        """Admit a workflow agent, whose first request just reached the relay: it takes a
        unit of the spawn budget, waits first come first served for a slot of every pool
        (the run's limit, then the process-wide cap) until the wrap-up point, then its turn
        in the stagger, as an Agent call does in the hook. It holds its slots until
        :meth:`agent_ended` (or its CLI exits), never on a timer. A closed gate
        starts none, and refuses one still waiting as it closes.

        Returns:
            ``None`` once it may start (at once without the gate); else why it does not (a
            spent budget is also a denied ``spawn_decided`` event). A refused or cancelled
            agent gives back what it took. A stopped run's refusal is held as a hook's is
            (see :meth:`stopped`).
        """
        if not self.gated:
            return None
        budget = self.policy.spawn_budget
        refusal = self._closed_refusal()  # no event: it never asked while the run took agents
        if refusal is None and budget is not None and self._used >= budget:
            reason = why.budget(budget)
            self._emit(
                agent_id[:_MAX_TEXT], _WORKFLOW_AGENT, "denied", code="spawn_budget", reason=reason
            )
            refusal = WorkflowRefusal("spawn_budget", reason)
        elif refusal is None:
            self._used += 1
            started = False
            try:
                refusal = await self._hold(agent_id)
                started = refusal is None
            finally:
                if not started:  # it never starts: its unit is free again
                    self._used = max(0, self._used - 1)
        await self._held_if_stopped(refusal)
        return refusal

    async def _hold(self, agent_id: str) -> WorkflowRefusal | None:
        until = self.admit_until
        if until is None:
            until = self._clock.monotonic() + _WORKFLOW_HOLD_S
        taken: list[FifoSlots] = []
        refusal: WorkflowRefusal | None = None
        waiting = anyio.CancelScope()  # cancelled as the gate closes
        self._waiting.add(waiting)
        try:
            with waiting:
                for pool in (self._slots, self._cap):
                    if not await pool.take(until, self._clock):
                        refusal = WorkflowRefusal("no_slot", why.WORKFLOW_NO_SLOT)
                        break
                    taken.append(pool)
                if refusal is None and not await self._stagger(until):
                    refusal = WorkflowRefusal("no_slot", why.WORKFLOW_LATE_TURN)
                # a slot free at once (or handed over as the wait ran out) past the wrap-up
                # point: no agent starts after it, as in the hook
                wrap = self.admit_until
                if refusal is None and wrap is not None and self._clock.monotonic() >= wrap:
                    refusal = WorkflowRefusal("no_slot", why.WORKFLOW_NO_SLOT)
        except BaseException:
            _give_back(taken)
            raise
        finally:
            self._waiting.discard(waiting)
        # it closed while this agent waited (or as its wait ended)
        refusal = self._closed_refusal() or refusal
        if refusal is not None:
            _give_back(taken)
            return refusal
        self._held[agent_id] = self._held.get(agent_id, 0) + 1
        self.max_workflow_agents = max(self.max_workflow_agents, sum(self._held.values()))
        return None

    def _closed_refusal(self) -> WorkflowRefusal | None:
        """A workflow agent's refusal once the gate has closed (``None`` while open)."""
        if not self._closed:
            return None
        return WorkflowRefusal("no_slot", why.workflow_closed(self._close_reason))

    def agent_ended(self, agent_id: str) -> None:
        """A workflow agent's work ended (its entry done or in error, its workflow ended):
        free its slots."""
        for _ in range(self._held.pop(agent_id, 0)):
            _give_back([self._slots, self._cap])

    @property
    def hook_timeout_s(self) -> float:
        """The HookMatcher timeout: above the longest wait a call can have in the gate."""
        bound = self._max_wait_s
        if self._deadline is not None:
            left = self._deadline - self._reserve - self._clock.monotonic()
            bound = min(bound, max(0.0, left))
        return bound + _HOOK_MARGIN_S

    def hook_matcher(self, *, timeout_s: float | None = None) -> HookMatcher | None:
        """``HookMatcher(matcher="Agent|Workflow", ...)`` to add under ``PreToolUse`` (``None``
        without the gate)."""
        if not self.gated:
            return None
        timeout = self.hook_timeout_s if timeout_s is None else timeout_s
        return HookMatcher(matcher=HOOK_TOOLS, hooks=[self.hook], timeout=timeout)

    # -- what the stream shows ---------------------------------------------------------------
    def observe(self, message: Any, events: Sequence[TrackedEvent] | None = None) -> None:
        """What ``message`` (any SDK message or raw dict) means for the gate's slots: a task
        started or ended, or an Agent tool result that shows the agent never ran or already
        finished. Never raises: a malformed message is skipped (and noted in :attr:`errors`).

        Args:
            message: one SDK message, typed or raw.
            events: the message's parsed events, when the caller has them already (a round
                parses each message once, for the tracker and the gate alike).
        """
        if not self.gated:
            return
        try:
            for event in parse_message(message) if events is None else events:
                self._observe(event)
        except Exception as exc:
            self.errors.append(f"the gate skipped a message: {type(exc).__name__}: {exc}")

    def _observe(self, event: TrackedEvent) -> None:
        if isinstance(event, AgentCallsSent):
            self.note_message(event.message_id, list(event.tool_use_ids))
        elif isinstance(event, ToolResultSeen) and event.tool_use_id in self._by_raw:
            outcome = classify_agent_result(event)
            if outcome == "rejected":
                self.spawn_rejected(event.tool_use_id, event.text.strip())
            elif outcome == "denied":  # another PreToolUse hook denied a call admitted here
                call = self._call_of(
                    event.tool_use_id, lambda c: c.status == "admitted" and _holds(c)
                )
                if call is not None and call.status == "admitted":
                    call.status, call.code = "denied", "other_hook"
                    call.reason = event.text.strip()[:_MAX_TEXT]
                    self._refund(call)
                    self._free(call)
            elif outcome in ("finished", "failed"):
                self.task_ended(event.tool_use_id)
        elif isinstance(event, TaskStarted):
            if event.tool_use_id:
                self.task_started(event.tool_use_id, event.task_id)
        elif isinstance(event, TaskEnded):
            call = self._by_task.get(event.task_id)
            if call is not None:  # its call, not another of a repeated tool_use id
                self._free(call)
            elif event.tool_use_id:  # a task whose start the gate never saw
                self.task_ended(event.tool_use_id)

    def note_message(self, message_id: str, tool_use_ids: list[str]) -> None:
        """The tool_use ids of one model message, so the per-turn limit counts exactly."""
        self._turns.note(message_id, tool_use_ids)

    def task_started(self, tool_use_id: str, task_id: str) -> None:
        """The CLI started the task of an Agent call."""
        if task_id in self._by_task:  # its start again: the task keeps its call
            return
        call = self._call_of(tool_use_id, lambda c: c.task_id is None)
        if call is not None and task_id:
            call.task_id = task_id
            self._by_task[task_id] = call
            if call.model_set is not None:
                self._model_set(task_id, call.model_set)

    def _model_set(self, agent_id: str, alias: str) -> None:
        """The hook gave ``agent_id`` the model ``alias`` and its agent started (the run's
        :class:`~teamlead._gate.admission.Admission` learns what the CLI resolved it to)."""

    def task_ended(self, task_or_tool_use_id: str) -> None:
        """A task reached a terminal state (completed, failed, stopped, killed): free its slot."""
        call = self._call_of(task_or_tool_use_id, _holds) or self._by_task.get(task_or_tool_use_id)
        if call is not None:
            self._free(call)

    def spawn_rejected(self, tool_use_id: str, reason: str) -> None:
        """The CLI refused a call (its cap, a hook timeout): it never ran.

        A call still waiting in the gate (the CLI gave up on the hook but the SDK did not
        cancel it) stops waiting, so it can never take a slot for work that won't run.
        """
        call = self._call_of(tool_use_id, lambda c: c.status == "queued" or _holds(c))
        if call is not None:
            self._reject(call, reason)

    def _reject(self, call: Call, reason: str) -> None:
        if call.status in ("denied", "rejected"):
            return
        call.status = "rejected"
        call.reason = reason[:_MAX_TEXT]
        if call.waiting is not None:
            call.waiting.cancel()
        self._refund(call)
        self._free(call)
        self._emit(call.tool_use_id, call.description, "rejected", reason=call.reason)

    def stopped(self, reason: str) -> None:
        """A stop was asked of the run (``reason``): every call still queued is ``rejected``
        now, before its CLI is ended (which would cancel their hooks), and its work is
        missing; then the gate closes.

        The hooks of the calls it refuses (those queued, and any Agent or Workflow call that
        comes later) are answered only after :data:`_HELD_AFTER_STOP_S`: the run ends their
        CLI at once, which cancels them, and a refusal answered before that would make the
        CLI send the lead one more request, of a run that was stopped."""
        self._stopped = True
        reason = f"the run was stopped ({reason}) while this call waited"
        for call in list(self._calls.values()):
            if call.status == "queued":
                self._reject(call, reason)
        self.close(reason)

    def close(self, reason: str = "the run is ending") -> None:
        """No agent starts from now on: deny every queued call with ``reason``, refuse
        every workflow agent still waiting for its slot, and free every Agent call's slot
        (the running workflow agents keep theirs until :meth:`end`)."""
        if not self._closed:
            self._close_reason = reason[:_MAX_TEXT]
        self._closed = True
        for waiting in list(self._waiting):
            waiting.cancel()
        self._end_calls(reason)

    def end(self, reason: str = "the run is ending") -> None:
        """End of the run: :meth:`close`, every workflow agent's slots are freed too, and the
        pause lifted for good."""
        if self._pause is not None:
            self._pause.end()
        self.close(reason)
        self._end_workflow_agents()

    def process_ended(self, reason: str = "the CLI process ended") -> None:
        """A CLI process exited: its agents (Agent calls and workflow agents) ended with it;
        the run may resume."""
        self._end_calls(reason)
        self._end_workflow_agents()

    def _end_calls(self, reason: str) -> None:
        for call in list(self._calls.values()):
            if call.waiting is not None:
                call.close_reason = reason
                call.waiting.cancel()
            elif call.run_slot or call.cap_slot:
                self._free(call)

    def _end_workflow_agents(self) -> None:
        for agent_id in list(self._held):
            self.agent_ended(agent_id)

    def records(self) -> list[SpawnRecord]:
        """A snapshot of every Agent call seen, in arrival order."""
        return [call.snapshot() for call in self._calls.values()]

    # -- the hook ----------------------------------------------------------------------------
    async def hook(self, input_data: Any, tool_use_id: Any, context: Any) -> SyncHookJSONOutput:
        """The PreToolUse callback: ``{}`` admits, a deny output refuses. Never raises."""
        if isinstance(input_data, Mapping) and input_data.get("tool_name") == _WORKFLOW:
            verdict = self._workflow(input_data, tool_use_id)
            await self._held_if_stopped(verdict)
            return verdict
        call: Call | None = None
        try:
            call, problem = self._register(input_data, tool_use_id)
            if problem is not None:
                return self._deny(call, "bad_input", problem)
            decided = await self._decide(call)
            await self._held_if_stopped(decided)
            model = self.subagent_model
            if decided or model is None or not is_model_alias(model):
                return decided  # a model id is not an Agent input: the relay sets it
            call.model_set = model
            return _model_output(input_data["tool_input"], model)
        except Exception as exc:  # the gate must answer: deny and say why
            return self._fault(call, exc)
        except BaseException:
            if call is not None:  # cancelled (hook timeout, the run stopped) while waiting
                self._undo(call)
                if call.status == "queued":
                    call.status = "rejected"
                    call.reason = why.CANCELLED
                    self._emit(call.tool_use_id, call.description, "rejected", reason=call.reason)
            raise
        finally:
            if call is not None and call.depth == 1:
                self._turns.leave(_safe_read(self._clock.monotonic))

    async def _held_if_stopped(self, verdict: object) -> None:
        """A refusal (``verdict`` not empty) of a stopped run waits :data:`_HELD_AFTER_STOP_S`."""
        if verdict and self._stopped:
            await self._clock.sleep(_HELD_AFTER_STOP_S)

    def _workflow(self, data: Mapping[str, Any], tool_use_id: Any) -> SyncHookJSONOutput:
        """A ``Workflow`` call: denied when its agents would be too deep, the spawn budget
        is spent, the run is closing or the wrap-up point has come; else no opinion (the
        CLI's permission check still applies). Never raises."""
        try:
            key, parent, depth = self._identity(data, tool_use_id)  # depth: its agents'
            key = key or "workflow"
            policy, budget = self.policy, self.policy.spawn_budget
            now = self._clock.monotonic()
            code: DenyCode | None = None
            if self._closed:
                code, reason = "closed", why.closed("the run is ending")
            elif depth > policy.max_depth:
                code, reason = "depth", why.depth(policy.max_depth)
            elif budget is not None and self._used >= budget:
                code, reason = "spawn_budget", why.budget(budget)
            elif self._deadline is not None and now >= self._deadline - self._reserve:
                code = "deadline"
                reason = why.deadline(self._deadline - now, self._reserve)
            if code is None:
                return {}
        except Exception as exc:  # the gate must answer: deny and say why
            self.errors.append(f"{type(exc).__name__}: {exc}")
            key, code, reason = "workflow", "error", why.error(exc)
        if len(self.workflow_denials) < _MAX_WORKFLOW_DENIALS:  # a lead that insists
            self.workflow_denials.append((key[:_MAX_TEXT], code, reason))
        self._emit(key[:_MAX_TEXT], _WORKFLOW, "denied", code=code, reason=reason)
        return _deny_output(reason)

    def _fault(self, call: Call | None, exc: Exception) -> SyncHookJSONOutput:
        """A fault inside the gate: the call is denied, its units and slots given back."""
        self.errors.append(f"{type(exc).__name__}: {exc}")
        reason = why.error(exc)
        if call is not None:
            try:
                self._undo(call)
                return self._deny(call, "error", reason)
            except Exception as again:  # even the deny path failed: answer anyway
                self.errors.append(f"{type(again).__name__}: {again}")
                call.status, call.code, call.reason = "denied", "error", reason
        return _deny_output(reason)

    def _identity(self, data: Mapping[str, Any], tool_use_id: Any) -> tuple[str, str | None, int]:
        """A hook call's tool_use id (``""`` when it has none), the spawning agent's id (a
        subagent's), and the depth of the agents it starts."""
        key = tool_use_id if isinstance(tool_use_id, str) else ""
        if not key and isinstance(data.get("tool_use_id"), str):
            key = data["tool_use_id"]
        parent = data.get("agent_id") if isinstance(data.get("agent_id"), str) else None
        depth = 1 if not parent else self._depth_of(parent) + 1
        return key, parent, depth

    def _register(self, input_data: Any, tool_use_id: Any) -> tuple[Call, str | None]:
        data: Mapping[str, Any] = input_data if isinstance(input_data, Mapping) else {}
        tool_input = data.get("tool_input")
        tool_input = tool_input if isinstance(tool_input, Mapping) else {}
        raw_id, parent, depth = self._identity(data, tool_use_id)
        if not raw_id:
            self._anon += 1
            raw_id = f"unknown-{self._anon}"
        key, seen = raw_id, len(self._calls)
        while key in self._calls:  # a repeated id (an id like "a#2" may be taken already)
            seen += 1
            key = f"{raw_id}#{seen}"
        description = tool_input.get("description")
        kind = tool_input.get("subagent_type")
        call = Call(
            tool_use_id=key,
            description=str(description)[:_MAX_TEXT] if isinstance(description, str) else "",
            subagent_type=str(kind)[:_MAX_TEXT] if isinstance(kind, str) else None,
            depth=depth,
            parent_agent_id=parent,
        )
        self._calls[key] = call
        self._by_raw.setdefault(raw_id, []).append(call)
        if depth == 1:
            self._turns.enter()
        if not isinstance(input_data, Mapping) or not isinstance(tool_input.get("prompt"), str):
            return call, why.BAD_INPUT
        return call, None

    def _call_of(self, tool_use_id: str, wanted: Callable[[Call], bool]) -> Call | None:
        """The call the stream means by ``tool_use_id``: of the calls that came with that
        id (the CLI may repeat one; the gate keyed the later ones ``id#n``), the first that
        is ``wanted``, else the first."""
        calls = self._by_raw.get(tool_use_id)
        if not calls:
            return None
        return next((call for call in calls if wanted(call)), calls[0])

    def _depth_of(self, agent_id: str) -> int:
        parent = self._by_task.get(agent_id)
        return parent.depth if parent is not None else 1

    async def _decide(self, call: Call) -> SyncHookJSONOutput:
        policy = self.policy
        now = self._clock.monotonic()
        call.queued_at = self._clock.time()
        if self._closed:
            return self._deny(call, "closed", why.closed("the run is ending"))
        if call.depth > policy.max_depth:
            return self._deny(call, "depth", why.depth(policy.max_depth))
        call.turn = self._turns.turn_of(call.tool_use_id, call.depth, call.parent_agent_id, now)
        # check and take in one step: nothing below awaits until both units are taken
        budget, per_turn = policy.spawn_budget, policy.max_agents_per_turn
        if budget is not None and self._used >= budget:
            return self._deny(call, "spawn_budget", why.budget(budget))
        if per_turn is not None and self._turns.counts[call.turn] >= per_turn:
            return self._deny(call, "turn_limit", why.per_message(per_turn))
        self._used += 1
        self._turns.counts[call.turn] += 1
        call.budget = True
        admit_until = self.admit_until
        if admit_until is not None and now >= admit_until:
            return self._refuse_late(call, now)
        until = min(now + self._max_wait_s, math.inf if admit_until is None else admit_until)
        with anyio.CancelScope() as scope:
            call.waiting = scope
            admitted = await self._wait_for_slots(call, until)
        call.waiting = None
        if scope.cancelled_caught:
            self._undo(call)
            if call.status == "rejected":  # the CLI gave up on this call, or the run stopped
                return _deny_output(call.reason or why.CANCELLED)
            return self._deny(call, "closed", why.closed(call.close_reason or "the run is ending"))
        if not admitted:
            self._undo(call)
            now = self._clock.monotonic()
            if admit_until is not None and now >= admit_until:
                return self._refuse_late(call, now)
            if call.depth > 1:
                return self._deny(call, "wait_limit", why.nested_busy(self._limit))
            return self._deny(call, "wait_limit", why.wait_limit(self._max_wait_s, self._limit))
        call.status = "admitted"
        call.admitted_at = self._clock.time()
        waited = max(0.0, call.admitted_at - call.queued_at)
        self._emit(
            call.tool_use_id,
            call.description,
            "admitted",
            waited_s=round(waited, 4),
            running=self.running,
            limit=self._limit,
        )
        return {}

    async def _wait_for_slots(self, call: Call, until: float) -> bool:
        told = False
        for slots, attr in ((self._slots, "run_slot"), (self._cap, "cap_slot")):
            if slots.try_take():
                setattr(call, attr, True)
                continue
            call.starved = slots is self._cap  # other runs hold the process's slots
            if call.depth > 1:  # its parent holds a slot and waits for it: never queue
                return False
            if not told:
                told = True
                self._emit(
                    call.tool_use_id,
                    call.description,
                    "queued",
                    position=slots.waiting + 1,
                    running=self.running,
                    limit=self._limit,
                )
            if not await slots.take(until, self._clock):
                return False
            setattr(call, attr, True)
            call.starved = False
        if self._pause is not None and not await self._pause.wait(until, self._clock):
            return False  # paused past the call's admission point: it keeps its place till then
        if not await self._stagger(until):
            return False
        return self._deadline is None or self._clock.monotonic() < self._deadline - self._reserve

    async def _stagger(self, until: float) -> bool:
        """Wait for this start's turn in the run's stagger: each start (an admitted Agent
        call, or a workflow agent's first request at the relay) comes at least
        ``stagger_s`` after the one before. ``False`` (and no turn taken) when that turn
        comes after ``until`` (monotonic)."""
        if self.policy.stagger_s <= 0:
            return True
        now = self._clock.monotonic()
        start = max(now, self._last_start + self.policy.stagger_s)
        if start > until:
            return False
        previous, self._last_start = self._last_start, start
        if start > now:
            try:
                await self._clock.sleep(start - now)
            except BaseException:  # it never starts: its turn is free, unless a later one
                if self._last_start == start:  # was taken after it
                    self._last_start = previous
                raise
        return True

    def _refuse_late(self, call: Call, now: float) -> SyncHookJSONOutput:
        self._undo(call)
        left = 0.0 if self._deadline is None else self._deadline - now
        return self._deny(call, "deadline", why.deadline(left, self._reserve))

    # -- bookkeeping -------------------------------------------------------------------------
    def _deny(self, call: Call, code: DenyCode, reason: str) -> SyncHookJSONOutput:
        if call.starved and code in ("deadline", "wait_limit"):
            reason = f"{why.starved(self._cap.limit)} {reason}"
        else:
            call.starved = False
        call.status, call.code, call.reason = "denied", code, reason
        self._emit(call.tool_use_id, call.description, "denied", code=code, reason=reason)
        return _deny_output(reason)

    def _refund(self, call: Call) -> None:
        if call.budget:
            call.budget = False
            self._used -= 1
            if call.turn is not None:
                self._turns.counts[call.turn] -= 1

    def _undo(self, call: Call) -> None:
        """The call will not run: give back its units and slots."""
        call.waiting = None
        self._refund(call)
        self._release(call)

    def _release(self, call: Call) -> None:
        if call.cap_slot:
            call.cap_slot = False
            self._cap.release()
        if call.run_slot:
            call.run_slot = False
            self._slots.release()

    def _free(self, call: Call) -> None:
        if call.run_slot or call.cap_slot:
            self._release(call)
            call.ended_at = self._clock.time()

    def _emit(
        self, tool_use_id: str, description: str, outcome: SpawnOutcome, **fields: Any
    ) -> None:
        """Tell ``on_event`` the :class:`~teamlead.events.SpawnDecided` of one call."""
        if self.on_event is None:
            return
        event = SpawnDecided(
            tool_use_id=tool_use_id, description=description, outcome=outcome, **fields
        )
        try:
            self.on_event(event)
        except Exception as exc:
            self.errors.append(f"on_event failed on {event.type}: {type(exc).__name__}: {exc}")


def _safe_read(read: Callable[[], float]) -> float | None:
    """``read()``, or ``None`` if it fails (the gate must answer even when its clock breaks)."""
    try:
        return read()
    except Exception:
        return None


def _holds(call: Call) -> bool:
    """The call holds a slot."""
    return call.run_slot or call.cap_slot


def _give_back(slots: list[FifoSlots]) -> None:
    """Release slots taken in order, the last taken first."""
    for pool in reversed(slots):
        pool.release()


def classify_agent_result(result: ToolResultSeen) -> AgentResult:
    """What an Agent call's tool result says about the agent.

    Example:
        >>> classify_agent_result(ToolResultSeen("t", "Concurrent subagent limit reached. "
        ...     "You can run 20 subagents at once.", is_error=True))
        'rejected'
    """
    text = result.text
    if result.is_error:  # the CLI's refusals are error results: an answer may quote one
        if _CLI_LIMIT in text or _HOOK_TIMEOUT in text:
            return "rejected"
        return "denied" if _HOOK_DENY in text else "failed"
    if LAUNCH_NOTICE in text:
        return "launched"
    return "finished"


def _deny_output(reason: str) -> SyncHookJSONOutput:
    """The hook output that refuses a tool call, with ``reason`` for the model."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def _model_output(tool_input: Mapping[str, Any], model: str) -> SyncHookJSONOutput:
    """The hook output that lets an Agent call run, its agent on ``model``.

    The CLI honours ``updatedInput`` with no permission decision (the call still goes
    through the user's permission rules): the whole input comes back, ``model`` replaced.
    """
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "updatedInput": {**tool_input, "model": model},
        }
    }
