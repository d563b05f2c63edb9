"""Progress output for the CLI: a live team view on a TTY, plain lines when piped.

Both consume the stream :func:`teamlead.run` yields through ``handle(item)`` and read what
the run made of each message from its :class:`~teamlead.tracker.StreamParse`, never
parsing it again (the NDJSON output is :mod:`teamlead._ndjson`'s). Names, descriptions and
teammate text are hostile: every line goes through :func:`~teamlead._redact.terminal_safe`
and the live view renders it as ``Text``, never as Rich markup.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._claude import api_message_id, is_scripted_message
from .._ndjson import first_sighting
from .._redact import redact, terminal_safe
from ..clock import SYSTEM_CLOCK
from ..events import (
    AgentUsage,
    ConcurrencyChanged,
    FallbackUsed,
    Finished,
    InboxCollected,
    PermissionDecided,
    RateLimited,
    RelaySummary,
    ResumeFailed,
    Resuming,
    RunAmended,
    SpawnDecided,
    WaitingForTeam,
)
from ..tracker import (
    AgentCallSeen,
    LeadTurn,
    ResultSeen,
    SessionSeen,
    StreamParse,
    TaskEnded,
    TaskStarted,
    TrackedEvent,
    Tracker,
    WorkflowAgentChanged,
    WorkflowEnded,
    WorkflowPhaseSeen,
    WorkflowRun,
    WorkflowStarted,
)

__all__ = [
    "LiveTeamView",
    "PlainProgress",
    "cost_text",
    "describe_event",
    "describe_tracked",
    "task_ended_line",
]


_SHOWN_AGENTS = 50  # a workflow's agents listed in the live view


def describe_event(item: Any, *, scripted: bool = False) -> str | None:
    """The progress line for one of teamlead's events (``None``: the lines show none)."""
    if isinstance(item, WaitingForTeam):
        who = ", ".join(item.pending_members) or "open tasks"
        return f"waiting up to {item.wait_s:g} s for {who}"
    if isinstance(item, InboxCollected):
        senders = ", ".join(sorted({str(m.get("from")) for m in item.messages})) or "nobody"
        count = len(item.messages) + item.omitted_messages
        return f"inbox of team {item.team}: {count} new message(s) from {senders}"
    if isinstance(item, FallbackUsed):
        return _describe_fallback(item)
    if isinstance(item, Resuming):
        rest = len(item.without_result)
        failed = f"; {rest} failed or left nothing" if rest else ""
        return (
            f"resuming session {item.session_id} (round {item.round}, "
            f"attempt {item.attempt}) with {item.results} result(s){failed}"
        )
    if isinstance(item, ResumeFailed):
        retry = f"; retrying in {item.retry_in_s:g} s" if item.retry_in_s is not None else ""
        return f"resume attempt {item.attempt} failed: {item.error}{retry}"
    if isinstance(item, Finished):
        relay = f"; {_relay_summary_text(item.relay)}" if item.relay else ""
        cost = cost_text(item.cost_usd, scripted=scripted)
        return f"finished: {item.status} after {item.resumes} resume(s), {cost}{relay}"
    if isinstance(item, PermissionDecided):
        return _describe_permission(item)
    if isinstance(item, RunAmended):
        return _describe_amend(item)
    return _describe_spawn(item) or _describe_relay(item)


def cost_text(cost_usd: float, *, scripted: bool) -> str:
    """A run's cost as every line of teamlead says it. A scripted model's is the CLI's
    list-price estimate for made-up tokens: shown as that, never as money spent.

    Example:
        >>> cost_text(0.00358, scripted=True)
        '$0.0036 list-price estimate for a scripted model, nothing charged'
        >>> cost_text(0.1995, scripted=False)
        '$0.1995'
    """
    figure = f"${cost_usd:.4f}"
    return (
        f"{figure} list-price estimate for a scripted model, nothing charged"
        if scripted
        else figure
    )


def _describe_amend(item: RunAmended) -> str:
    """``cap 3 -> 1 · subagent model -> haiku``: one live change, as it applied."""
    parts = []
    if "cap" in item.changed:
        parts.append(f"cap {item.previous_cap} -> {item.cap} (agents running go on)")
    if "subagent_model" in item.changed:
        model = item.subagent_model or "their own"
        parts.append(f"subagent model -> {model} (for agents not started yet)")
    return " · ".join(parts)


def _describe_permission(item: PermissionDecided) -> str:
    """``allowed Bash for [security]: make test (your answer)``."""
    verb = "allowed" if item.decision == "allow" else "denied"
    why = {
        "user": "your answer, for the rest of the run" if item.always else "your answer",
        "rule": "allowed earlier for the rest of the run",
        "no_terminal": "no terminal to ask",
        "run_ended": "the run ended first",
    }[item.by]
    return f"{verb} {item.tool} for [{item.agent}]: {item.what[:80]} ({why})"


def _describe_fallback(item: FallbackUsed) -> str:
    """A sentence for a fallback, also when the task left neither summary nor transcript."""
    who = repr(item.description) if item.description else f"task {item.task_id}"
    if item.source == "none":
        return f"{who} ({item.status}) left no result: no summary and no transcript"
    return f"result of {who} ({item.status}) taken from its {item.source}"


def _task_label(task_id: str, description: str) -> str:
    """How a task is named in a line: its description, else its id (never an empty name)."""
    return description if description.strip() else f"{task_id} (no description)"


def _describe_relay(item: Any) -> str | None:
    """A line for a relay event; a pause that leaves the limit as it was gets none."""
    if isinstance(item, RateLimited):
        after = f", retry after {item.retry_after_s:g} s" if item.retry_after_s is not None else ""
        fate = "absorbed by the relay" if item.outcome == "absorbed" else "passed on to the CLI"
        what = str(item.status) if item.status == 429 else f"{item.status} (overloaded)"
        return f"API {what} for {item.model} ({item.role}{after}): {fate}"
    if isinstance(item, ConcurrencyChanged) and item.cap != item.previous_cap:
        return f"governor: {item.key} limit {item.previous_cap} -> {item.cap} ({item.reason})"
    return None


def _describe_spawn(item: Any) -> str | None:
    if not isinstance(item, SpawnDecided):
        return None
    if item.outcome == "queued":
        return (
            f"queued {item.description!r}: {item.running} of {item.limit} running, "
            f"position {item.position}"
        )
    if item.outcome == "admitted":
        waited = item.waited_s or 0.0
        after = f" after {waited:.1f} s queued" if waited >= 0.05 else ""
        return f"admitted {item.description!r}{after}"
    if item.outcome == "denied":
        return f"denied {item.description!r} ({item.code}): {item.reason}"
    return f"rejected by the CLI {item.description!r}: {item.reason}"


def _relay_summary_text(summary: RelaySummary) -> str:
    """The relay's part of the last line: 429s and 529s apart (a 529 held through an
    overload burst is the relay's, one passed on the CLI's), and what the limits mean."""
    limited = sum(b.rate_limited for b in summary.buckets)
    held = summary.overloaded_held
    passed_529 = max(0, summary.overloaded - held)
    parts = [f"relay: {summary.requests} request(s)"]
    if limited:
        absorbed_429 = max(0, summary.absorbed - held)
        passed_429 = max(0, summary.passed - passed_529)
        parts.append(f"429s {absorbed_429} absorbed, {passed_429} passed on")
    if held:
        parts.append(f"{held} overloaded (529) held by the relay")
    if passed_529:
        parts.append(f"{passed_529} overloaded (529) passed on")
    if not limited and not summary.overloaded:
        parts.append("no 429 or 529")
    limits = ", ".join(f"{b.key} {b.limit}" for b in summary.buckets) or "none"
    return "; ".join(parts) + f"; requests allowed in flight per model, as learnt: {limits}"


def _describe_workflow(
    event: WorkflowStarted | WorkflowPhaseSeen | WorkflowAgentChanged,
) -> str | None:
    if isinstance(event, WorkflowStarted):
        again = f", resuming {event.resume_from}" if event.resume_from else ""
        return f"workflow started: {event.name or event.description!r} ({event.run_id}{again})"
    if isinstance(event, WorkflowPhaseSeen):
        return f"workflow phase {event.index}: {event.title!r}"
    if event.state in ("done", "error"):  # start and progress are in the live view only
        what = "replayed from the journal" if event.cached else event.state
        error = f": {event.error[:160]}" if event.error else ""
        return f"workflow agent {event.label!r} {what}{error}"
    return None


def task_ended_line(event: TaskEnded, description: str) -> str:
    """``task completed: security``: a task's end, as the progress lines say it."""
    return f"task {event.status}: {_task_label(event.task_id, description)}"


def describe_tracked(event: TrackedEvent, *, verbose: bool = False) -> str | None:
    """The progress line for a tracker event that needs nothing but itself (``None``: the
    lines show none for it); the plain progress and ``teamlead watch`` both say them so."""
    if isinstance(event, TaskStarted):
        label = _task_label(event.task_id, event.description)
        return f"task started: {label} [{event.subagent_type or 'agent'}]"
    if isinstance(event, WorkflowStarted | WorkflowPhaseSeen | WorkflowAgentChanged):
        return _describe_workflow(event)
    if isinstance(event, WorkflowEnded):
        lost = f"; lost {', '.join(repr(x) for x in event.lost[:10])}" if event.lost else ""
        return (
            f"workflow {event.status}: {event.run_id or event.task_id} "
            f"({event.done} of {event.agents} agents done, {event.cached} cached{lost})"
        )
    if isinstance(event, ResultSeen):
        state = "error" if not event.ok else "ok"
        status = f" (API {event.api_error_status})" if event.api_error_status else ""
        return f"lead turn ended: {state}{status}"
    if isinstance(event, LeadTurn) and verbose and event.text:
        return f"lead: {redact(event.text)[:160]}"
    return None


class PlainProgress:
    """One plain line per notable event, for logs and pipes; ``run`` is the run's parse of
    the items :meth:`handle` is given."""

    def __init__(
        self, stream: IO[str], run: StreamParse, *, verbose: bool = False, scripted: bool = False
    ) -> None:
        self.stream = stream
        self.run = run
        self.verbose = verbose
        self.scripted = scripted  # told, or seen in its messages: the cost is an estimate
        self.started = SYSTEM_CLOCK.monotonic()
        self._shown: set[str] = set()

    def note(self, text: str) -> None:
        """One line, teamlead's own or an event's, escaped and stamped with the time."""
        self.stream.write(
            f"[{SYSTEM_CLOCK.monotonic() - self.started:6.1f}s] {terminal_safe(text)}\n"
        )
        self.stream.flush()

    def handle(self, item: Any) -> None:
        self.scripted = self.scripted or is_scripted_message(api_message_id(item))
        text = describe_event(item, scripted=self.scripted)
        if text is not None:
            self.note(text)
            return
        tracker = self.run.tracker
        for event in self.run.events_of(item):
            line = self._describe_tracked(event, tracker) if tracker is not None else None
            if line:
                self.note(line)

    def _describe_tracked(self, event: TrackedEvent, tracker: Tracker) -> str | None:
        if isinstance(event, SessionSeen):
            return (
                f"session {event.session_id}"
                if first_sighting(event, self.run, self._shown)
                else None
            )
        if isinstance(event, AgentCallSeen):
            group = tracker.agent_calls_by_message.get(event.message_id or event.tool_use_id, [])
            return f"lead delegates {event.description!r} (Agent call {len(group)} of its message)"
        if isinstance(event, TaskEnded) and event.source == "task_notification":
            return task_ended_line(event, tracker.tasks[event.task_id].description)
        return describe_tracked(event, verbose=self.verbose)

    def close(self) -> None:
        pass


class LiveTeamView:
    """A live table: the lead's state and one row per subagent or teammate (the tasks of
    the run's own tracker); ``run`` is the run's parse of the items :meth:`handle` is given.
    """

    def __init__(
        self, console: Console, run: StreamParse, *, verbose: bool = False, scripted: bool = False
    ) -> None:
        self.run = run
        self.verbose = verbose
        self.scripted = scripted
        self.lead_state = "starting"
        self.teammates: dict[str, str] = {}
        self.queued: dict[str, str] = {}  # tool_use_id -> description, while in the gate
        self.log: list[str] = []
        self.limits: dict[str, int] = {}  # the governor line: bucket -> limit
        self.limited: Counter[tuple[bool, str]] = Counter()  # (a 529?, its outcome) -> count
        self.usage: dict[str, AgentUsage] = {}  # agent id -> its usage as the relay counted
        #: the lines at the foot (the approval prompt, the key hint): text and a style
        self.footer: Callable[[], list[tuple[str, str]]] | None = None
        # Live re-renders this object on every refresh, so elapsed times tick between events
        self._live = Live(self, console=console, refresh_per_second=4, transient=False)
        self._live.start()

    def handle(self, item: Any) -> None:
        self.scripted = self.scripted or is_scripted_message(api_message_id(item))
        text = describe_event(item, scripted=self.scripted)
        if text is not None:
            self.log.append(text)
            if isinstance(item, WaitingForTeam):
                self.lead_state = "waiting for the team"
                for name in item.pending_members:
                    self.teammates.setdefault(name, "pending")
            elif isinstance(item, InboxCollected):
                for message in item.messages:
                    self.teammates[str(message.get("from"))] = str(message.get("kind"))
            elif isinstance(item, Resuming):
                self.lead_state = f"resuming (round {item.round})"
            elif isinstance(item, Finished):
                self.lead_state = item.status
            elif isinstance(item, SpawnDecided) and item.outcome == "queued":
                self.queued[item.tool_use_id] = item.description
            elif isinstance(item, SpawnDecided):
                self.queued.pop(item.tool_use_id, None)
        self._governor(item)
        for event in self.run.events_of(item):
            if isinstance(event, LeadTurn):
                self.lead_state = (
                    "error" if event.error else ("delegating" if event.tool_names else "writing")
                )
                if self.verbose and event.text:
                    self.log.append(f"lead: {redact(event.text)[:120]}")
            elif isinstance(event, ResultSeen):
                self.lead_state = (
                    "turn ended"
                    if event.ok
                    else f"turn failed ({event.api_error_status or 'error'})"
                )
        self._live.refresh()

    def note(self, text: str) -> None:
        """One line of teamlead's own in the view's log."""
        self.log.append(text)
        self._live.refresh()

    def refresh(self) -> None:
        """Render now (the footer changed)."""
        self._live.refresh()

    def _governor(self, item: Any) -> None:
        if isinstance(item, AgentUsage):
            self.usage[item.agent_id] = item
        elif isinstance(item, ConcurrencyChanged):
            self.limits[item.key] = item.effective
        elif isinstance(item, RateLimited):
            self.limited[item.status != 429, item.outcome] += 1

    def _tokens(self, agent_id: str | None, reported: int | None) -> str:
        """``in/out`` tokens as the relay counted them, else what the CLI reported."""
        usage = self.usage.get(agent_id) if agent_id else None
        if usage is not None and (
            usage.input_tokens is not None or usage.output_tokens is not None
        ):
            return f"{usage.input_tokens or 0}/{usage.output_tokens or 0}"
        return str(reported or "")

    def governor_line(self) -> str | None:
        """``governor: model limit 3 · 429s absorbed 5, passed on 0``, once there is news;
        overloads (a 529, a gateway's 503, a dropped connection) counted apart, held by the
        relay or passed on."""
        if not self.limits and not self.limited:
            return None
        absorbed, passed = self.limited[False, "absorbed"], self.limited[False, "passed"]
        held, passed_over = self.limited[True, "absorbed"], self.limited[True, "passed"]
        limits = ", ".join(f"{key} limit {cap}" for key, cap in sorted(self.limits.items()))
        parts = [f"governor: {limits or 'no limit learnt'}"]
        if absorbed or passed:
            parts.append(f"429s absorbed {absorbed}, passed on {passed}")
        if held or passed_over:
            parts.append(f"overloaded {held + passed_over}: held {held}, passed on {passed_over}")
        return " · ".join(parts)

    def __rich__(self) -> Group:
        """One frame. Live's refresh thread draws it while the run's loop adds agents,
        so each collection is copied first, in one step no other thread can cut."""
        table = Table(
            title=Text(f"teamlead · lead: {terminal_safe(self.lead_state)}"), expand=False
        )
        for column in ("who", "description", "status", "elapsed", "tokens", "last tool"):
            table.add_column(column)
        tracker = self.run.tracker
        tasks = list(tracker.tasks.values()) if tracker is not None else []
        now = tracker.clock.monotonic() if tracker is not None else 0.0  # tasks stamp on it
        for task in tasks:
            end = task.ended_at or now
            table.add_row(
                "workflow" if task.is_workflow else "agent",
                Text(terminal_safe(_task_label(task.task_id, task.description)[:40])),
                Text(terminal_safe(task.status)),
                f"{end - task.started_at:5.1f}s",
                self._tokens(task.task_id, task.tokens),
                Text(terminal_safe(task.last_tool or "")),
            )
            if task.workflow is not None:
                self._workflow_rows(table, task.workflow)
        for description in list(self.queued.values()):
            table.add_row("agent", Text(terminal_safe(description)[:40]), "queued", "", "", "")
        for name, state in list(self.teammates.items()):
            table.add_row(
                "teammate", Text(terminal_safe(name)), Text(terminal_safe(state)), "", "", ""
            )
        recent = [Text(terminal_safe(line), style="dim") for line in self.log[-6:]]
        governor = self.governor_line()
        head = [Text(terminal_safe(governor), style="yellow")] if governor else []
        foot = [
            Text(terminal_safe(text), style=style)
            for text, style in (self.footer() if self.footer else [])
        ]
        return Group(table, *head, *recent, *foot)

    def _workflow_rows(self, table: Table, run: WorkflowRun) -> None:
        """A workflow's rows: each phase with its agents counted by state, then its first
        agents with state, tokens, last tool and tool calls."""
        for title, states in run.phase_counts():
            counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            table.add_row(
                "  phase",
                Text(terminal_safe(title[:40] or "(no phase)")),
                Text(terminal_safe(counts)),
            )
        for index in sorted(run.agents)[:_SHOWN_AGENTS]:
            agent = run.agents[index]
            seconds = f"{agent.duration_ms / 1000:5.1f}s" if agent.duration_ms else ""
            tools = f"{agent.tool_calls} tool calls" if agent.tool_calls else ""
            usage = self.usage.get(agent.agent_id) if agent.agent_id else None
            if usage is not None and usage.last_tool:
                tools = f"{usage.last_tool} · {tools}" if tools else usage.last_tool
            table.add_row(
                "  wf agent",
                Text(terminal_safe(agent.label[:40])),
                Text(terminal_safe(agent.state + (" (cached)" if agent.cached else ""))),
                seconds,
                self._tokens(agent.agent_id, agent.tokens),
                Text(terminal_safe(tools)),
            )
        if len(run.agents) > _SHOWN_AGENTS:
            table.add_row("  wf agent", f"... and {len(run.agents) - _SHOWN_AGENTS} more")

    def close(self) -> None:
        try:
            self._live.refresh()
        finally:
            self._live.stop()  # shows the cursor again, whatever the refresh did
