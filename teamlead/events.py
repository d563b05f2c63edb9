"""The typed events teamlead adds to the SDK's stream, and every type they carry.

Each event is a frozen pydantic model with a ``type`` and a ``version``; ``to_json()``
gives the NDJSON line ``teamlead ask --json`` prints. Readers accept older versions.
:data:`TeamleadEvent` is their union (with the SDK's messages, :data:`teamlead.StreamItem`
is what a run yields): the run's progress (:class:`WaitingForTeam`, :class:`InboxCollected`,
:class:`FallbackUsed`, :class:`Resuming`, :class:`ResumeFailed`), the spawn gate's
decisions (:class:`SpawnDecided`), the relay's (:class:`RateLimited`,
:class:`ConcurrencyChanged`, :class:`AgentUsage`), a live change (:class:`RunAmended`), a
refused workflow (:class:`WorkflowDenied`) and the last event, :class:`Finished`, with its
rows (:class:`TaskDisposition`) and the relay's summary (:class:`RelaySummary`,
:class:`BucketSummary`). The ``Literal`` codes the fields take (:data:`Status`,
:data:`Disposition`, :data:`TaskState`, :data:`FinishReason`, :data:`SpawnOutcome`,
:data:`DenyCode`, ...) are here too, for a program to branch on.

Example:
    >>> async for item in teamlead.run("..."):  # doctest: +SKIP
    ...     if isinstance(item, Finished):
    ...         print(item.status, item.result)
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EVENT_VERSION",
    "ROW_RESULT_CHARS",
    "AgentKind",
    "AgentUsage",
    "AmendField",
    "BucketSummary",
    "ChangeReason",
    "ConcurrencyChanged",
    "DenyCode",
    "Disposition",
    "EndKind",
    "FallbackUsed",
    "FinishReason",
    "Finished",
    "InboxCollected",
    "PermissionAnswer",
    "PermissionDecided",
    "RateLimited",
    "RelaySummary",
    "RelayedAgentKind",
    "RequestRole",
    "ResumeFailed",
    "Resuming",
    "RunAmended",
    "SpawnDecided",
    "SpawnOutcome",
    "Status",
    "TaskDisposition",
    "TaskKind",
    "TaskState",
    "TeamleadEvent",
    "WaitingForTeam",
    "WorkflowDenied",
]

#: The version of the events' schema (what each version added: docs/json-schema.md). Older
#: records still read: the new fields default, a log's old spawn lines read as
#: ``spawn_decided``.
EVENT_VERSION = 6
#: The most characters of a result a ``Finished.tasks`` row carries (head and tail).
ROW_RESULT_CHARS = 4000

Status = Literal["completed", "partial", "failed"]
#: ``not_run``: an Agent call the spawn gate denied (the user's own limit), one the CLI
#: rejected whose work the lead re-issued later, or a workflow attempt (and its lost agents)
#: that a resume of its run took over; none makes the run partial.
Disposition = Literal["included", "missing", "failed", "not_run"]
#: Where one task, teammate or Agent call ended up (``TaskDisposition.status``): a task's
#: terminal state, or ``lost`` when it never ended; ``timeout`` for an agent stopped at
#: ``SpawnPolicy.agent_timeout_s``; ``cached`` for a workflow agent replayed from the run's
#: journal; a teammate ``pending`` (never reported), ``reported`` or ``failed``; an Agent
#: call that never ran ``denied`` (by the spawn gate) or ``rejected`` (by the CLI).
TaskState = Literal[
    "completed",
    "failed",
    "stopped",
    "killed",
    "lost",
    "timeout",
    "cached",
    "pending",
    "reported",
    "denied",
    "rejected",
]
#: How an agent ended, judged from evidence (its transcript's last assistant message, the
#: notification's note, the CLI's status) rather than from the CLI's status alone
#: (``TaskDisposition.ended``):
#:
#: - ``finished``: it ended its turn with a final message;
#: - ``turn_limit``: the CLI stopped it at its subagent type's ``maxTurns`` while it still had
#:   work to do (the CLI reports it ``completed``, its result PARTIAL);
#: - ``output_limit``: its last reply was cut at the output token limit (``max_tokens``);
#: - ``no_final_message``: its transcript ends without a final message (a tool call left
#:   with no turn after it, or no reply at all);
#: - ``failed``: the CLI reported it failed;
#: - ``lost``: it never ended, or was stopped or killed with its process or machine.
EndKind = Literal["finished", "turn_limit", "output_limit", "no_final_message", "failed", "lost"]
#: The ends of an agent cut before it finished, which the CLI may still call ``completed``.
CUT_ENDS: frozenset[str] = frozenset({"turn_limit", "output_limit", "no_final_message"})
#: Why a run ended as it did; see :class:`Finished`.
FinishReason = Literal[
    "all_results_used",
    "results_missing",
    "work_failed",
    "no_answer",
    "deadline",
    "max_resumes",
    "cost_budget",
    "resume_failed",
    "no_session_id",
    "token_budget",
    "request_budget",
    "interrupted",
]
#: Every kind of agent a run has, each under one name (the two sets below are parts of it,
#: for what sees only some kinds):
#:
#: - ``lead``: the lead;
#: - ``agent``: an Agent-tool subagent;
#: - ``task``: a background task as the stream reports it (an Agent-tool subagent's, a
#:   ``Workflow`` run's, a shell's);
#: - ``workflow``: a ``Workflow`` run, the task that starts its script's agents;
#: - ``workflow_agent``: an agent a ``Workflow`` script started;
#: - ``teammate``: a team member;
#: - ``call``: an Agent call that never became a task (denied, rejected).
AgentKind = Literal["lead", "agent", "task", "workflow", "workflow_agent", "teammate", "call"]
#: The kind of a row of ``Finished.tasks`` (:data:`AgentKind`'s ``task``, ``workflow_agent``,
#: ``teammate`` and ``call``): a task, a workflow's agent, a teammate, an Agent call that
#: never ran.
TaskKind = Literal["task", "workflow_agent", "teammate", "call"]
#: An agent as the relay tells it from its requests (``AgentUsage.kind``; :data:`AgentKind`'s
#: ``lead``, ``agent`` and ``workflow_agent``): the lead's requests carry no agent id, a
#: workflow's agents have Claude Code's system prompt for them.
RelayedAgentKind = Literal["lead", "agent", "workflow_agent"]
#: Whom a request to the API is for, as the relay tells it from the request alone: the
#: ``lead`` (it offers tools and names no agent), a ``subagent`` (it names one), or
#: ``other`` (the CLI's own side requests: titles, summaries).
RequestRole = Literal["lead", "subagent", "other"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = EVENT_VERSION

    def to_json(self) -> str:
        """One NDJSON line."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)


class WaitingForTeam(_Event):
    """The stream ended with work outstanding; teamlead is waiting for it."""

    type: Literal["waiting_for_team"] = "waiting_for_team"
    session_id: str | None
    open_tasks: list[str] = Field(default_factory=list)
    pending_members: list[str] = Field(default_factory=list)
    team: str | None = None
    wait_s: float


class InboxCollected(_Event):
    """Entries read from the team-lead inbox.

    A huge inbox is summarized, not dumped: at most the first 50 messages and 20
    warnings are listed, and ``omitted_messages`` / ``omitted_warnings`` count the rest.
    """

    type: Literal["inbox_collected"] = "inbox_collected"
    team: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    satisfied: bool = True
    omitted_messages: int = 0
    omitted_warnings: int = 0


class FallbackUsed(_Event):
    """A task's result came from its summary or transcript, not from a lead turn."""

    type: Literal["fallback_used"] = "fallback_used"
    task_id: str
    description: str
    source: Literal["summary", "transcript", "none"]
    status: TaskState
    chars: int


class Resuming(_Event):
    """teamlead is re-querying the lead with ``resume=session_id``."""

    type: Literal["resuming"] = "resuming"
    session_id: str
    round: int
    attempt: int = 1
    deliveries: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    #: ``wrap_up``: the deadline's wrap-up round (no tools), not a plain resume.
    kind: Literal["resume", "wrap_up"] = "resume"
    #: the ``deliveries`` that carry no result (their agent failed, or nothing of it was
    #: recovered): the prompt only names them as missing. Empty in older records.
    without_result: list[str] = Field(default_factory=list)

    @property
    def results(self) -> int:
        """How many of ``deliveries`` hand the lead a result."""
        return len(self.deliveries) - len(self.without_result)


class ResumeFailed(_Event):
    """One resume attempt failed; ``retry_in_s`` is set when it will be retried."""

    type: Literal["resume_failed"] = "resume_failed"
    session_id: str
    round: int
    attempt: int
    error: str
    transient: bool
    retry_in_s: float | None = None


class TaskDisposition(BaseModel):
    """What became of one agent's, task's or teammate's result: one row per agent.

    Attributes:
        id: the task id (an Agent-tool agent's id), the workflow agent's id (or
            ``<workflow task>#<index>`` while it had none), the teammate's name, or the
            call's tool_use id.
        kind: see :data:`TaskKind`.
        status: ``completed``, ``failed``, ``timeout`` (stopped at ``agent_timeout_s``),
            ``stopped``, ``killed``, ``lost``, ``denied``, ``rejected``, ``cached`` (a workflow
            agent replayed from the run's journal), or a teammate's state.
        parent: the workflow task of a workflow agent, or the agent that spawned a nested one.
        label: the workflow agent's label (the description for a task).
        tokens_in / tokens_out: the upstream's own usage for the agent's requests, as the
            relay counted them; ``None`` when unknown (no relay, or no usage in the replies).
        requests: the agent's API requests the relay forwarded.
        tool_uses: tools the agent used, as the CLI reported.
        duration_s: from its first to its last request (or as the CLI reported).
        started_at / ended_at: when the relay forwarded the agent's first request and when
            its last one ended (wall-clock seconds); ``None`` without a relay or a request
            (a workflow agent replayed from the journal sends none). Overlaps of these
            intervals say how many agents ran at once.
        transcript: the agent's transcript file, when known.
        result: the agent's result as teamlead collected it (at most
            :data:`ROW_RESULT_CHARS`: its head and tail, the whole in ``result_file``), on
            every row whose result the final answer did not use, and on every row when the
            run has no final answer: a result the lead could not use still reaches the
            caller. ``None`` when the answer used it, or nothing was left.
        result_file: where its full result was written when the prompt (or ``result``)
            quoted only its head and tail.
        reason: why an Agent call did not run (``denied``/``rejected``), why an agent was
            stopped (what the lead was told), or a workflow agent's error.
        run_id: a workflow's ``wf_`` run id (on its task's row and its agents').
        phase: a workflow agent's phase title.
        cached: a workflow agent replayed from its run's journal (no request sent).
        ended: how a task's agent ended, judged from evidence (see :data:`EndKind`); ``None``
            on rows that are not tasks. A row whose agent did not end ``finished`` never
            counts as a complete result used: its ``result`` is its PARTIAL output, and
            ``reason`` names the cut (and how often it was continued).
    """

    model_config = ConfigDict(frozen=True)

    id: str
    kind: TaskKind
    description: str
    status: TaskState
    disposition: Disposition
    source: Literal["lead", "summary", "transcript", "inbox", "none"]
    reason: str | None = None
    parent: str | None = None
    label: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    requests: int | None = None
    tool_uses: int | None = None
    duration_s: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    transcript: str | None = None
    result: str | None = None
    result_file: str | None = None
    run_id: str | None = None
    phase: str | None = None
    cached: bool = False
    ended: EndKind | None = None


class AgentUsage(_Event):
    """An agent's usage as it grows: sent after each of its requests the relay forwarded.

    Attributes:
        agent_id: the ``x-claude-code-agent-id`` of its requests (``""`` for the lead).
        kind: see :data:`RelayedAgentKind`.
        requests: requests forwarded so far.
        input_tokens / output_tokens: the upstream's usage so far; ``None`` when no reply
            carried usage (unknown, not zero).
        unknown_usage: replies that carried no usage.
        rate_limited: 429s met (absorbed by the relay or passed on).
        last_tool: the tool a subagent called last, as its latest request showed (``None``
            for the lead and before its first tool call).
    """

    type: Literal["agent_usage"] = "agent_usage"
    agent_id: str
    kind: RelayedAgentKind
    requests: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    unknown_usage: int = 0
    rate_limited: int = 0
    last_tool: str | None = None


class Finished(_Event):
    """The last event: one honest outcome.

    Attributes:
        status: ``completed`` (every result used), ``partial`` (an answer, but something
            missing or failed), ``failed`` (no final answer that used the results).
        result: the text of the *last* successful lead result.
        reason: one code for why the run ended as it did, for programs to branch on
            (``reasons`` holds the human text, one line per problem):

            - ``all_results_used``: status ``completed``.
            - ``max_resumes``, ``cost_budget``, ``deadline``: that limit of the
              :class:`~teamlead.policy.Policy` stopped the run with results unused
              (``deadline`` also when the deadline cut the lead's stream).
            - ``resume_failed``: a resume round failed after its retries.
            - ``no_session_id``: no session id was seen, so the lead could not be resumed.
            - ``no_answer``: the lead produced no successful answer.
            - ``work_failed``: an answer, but a task or teammate failed.
            - ``results_missing``: an answer, but a result was not used or a teammate
              did not report.
            - ``token_budget``, ``request_budget``: the run's token or request budget (counted
              at the relay from the upstream's usage) was reached; the run wrapped up with
              what had finished.
            - ``interrupted``: a stop was asked from outside (the command's SIGINT,
              SIGTERM or SIGHUP): tasks still running are ``stopped``, calls still queued
              in the spawn gate ``rejected``.

            ``None`` only in events written before the field existed.
        relay: what the request relay did for this run (429s absorbed and passed on, the
            final limit per bucket); ``None`` when the run went direct.
    """

    type: Literal["finished"] = "finished"
    status: Status
    result: str | None
    session_id: str | None
    resumes: int
    tasks: list[TaskDisposition] = Field(default_factory=list)
    cost_usd: float = 0.0
    reasons: list[str] = Field(default_factory=list)
    reason: FinishReason | None = None
    relay: RelaySummary | None = None

    def fallback_answer(self) -> str | None:
        """The answer to show when the lead could not write one: every result the rows
        carry, each under its agent's name; ``None`` when the run has an answer, or no row
        carries a result.

        Example:
            >>> done = Finished(status="partial", result=None, session_id=None, resumes=2,
            ...     tasks=[TaskDisposition(id="t1", kind="task", description="probe",
            ...     status="completed", disposition="missing", source="transcript",
            ...     result="3 findings")], reason="deadline")
            >>> done.fallback_answer().splitlines()[2:]
            ['## probe (completed)', '', '3 findings']
        """
        if self.result is not None:
            return None
        parts = []
        for row in self.tasks:
            if row.result is None and row.result_file is None:
                continue
            name = row.label or row.description or row.id
            state = row.status if row.ended in (None, "finished") else f"{row.ended}: PARTIAL"
            body = row.result or ""
            if row.result_file:
                body = f"{body}\n\n(the whole result: {row.result_file})".strip()
            parts.append(f"## {name} ({state})\n\n{body}")
        if not parts:
            return None
        why = f" ({self.reason})" if self.reason else ""
        head = (
            f"The lead could not write its own answer{why}. "
            "The agents' results, as they reported them:"
        )
        return "\n\n".join([head, *parts])


# -- the spawn gate ---------------------------------------------------------------------

#: Why the gate said no: the user's limits, the deadline, the run ending, or a fault.
DenyCode = Literal[
    "spawn_budget",
    "turn_limit",
    "depth",
    "deadline",
    "wait_limit",
    "closed",
    "bad_input",
    "other_hook",
    "error",
]


#: What the spawn gate decided for an Agent call (:class:`SpawnDecided`): ``queued`` (it
#: waits for a slot), ``admitted`` (it may start), ``denied`` (the gate refused it: the
#: user's limits, the deadline, the run ending) or ``rejected`` (the gate let it through or
#: held it, but it never ran: the CLI refused it, or the run stopped while it waited).
SpawnOutcome = Literal["queued", "admitted", "denied", "rejected"]


class SpawnDecided(_Event):
    """One decision of the spawn gate on an Agent call: ``outcome`` says which.

    A call is ``queued`` at most once, then ends ``admitted``, ``denied`` or
    ``rejected``; an admitted call can still be ``rejected`` by the CLI afterwards.

    Attributes:
        tool_use_id: the Agent call's tool_use id.
        description: the call's ``description`` input.
        outcome: see :data:`SpawnOutcome`.
        position: ``queued``: its place in line (1 for the next).
        running: ``queued`` and ``admitted``: the agents running then.
        limit: ``queued`` and ``admitted``: how many may run at once.
        waited_s: ``admitted``: its time in the gate (queue and stagger).
        code: ``denied``: why, for programs (see :data:`DenyCode`).
        reason: ``denied`` and ``rejected``: what the model was told.
    """

    type: Literal["spawn_decided"] = "spawn_decided"
    tool_use_id: str
    description: str
    outcome: SpawnOutcome
    position: int | None = None
    running: int | None = None
    limit: int | None = None
    waited_s: float | None = None
    code: DenyCode | None = None
    reason: str | None = None


# -- the approval queue of ``teamlead ask`` ------------------------------------------------

#: Who decided a permission request: the person at the terminal (``user``), an earlier
#: ``a`` (allow this tool for this agent) answer (``rule``), nobody because no terminal was
#: there to ask (``no_terminal``), or the run's end while it still waited (``run_ended``).
PermissionAnswer = Literal["user", "rule", "no_terminal", "run_ended"]


class PermissionDecided(_Event):
    """A tool permission request of the lead or an agent, and its answer.

    ``teamlead ask`` writes one per request it was asked through the SDK's
    ``can_use_tool`` (permission modes ``default`` and ``acceptEdits``); ``query()``
    itself never asks, so this event is only in the CLI's ``--json`` output (and not
    one of :data:`TeamleadEvent`, the stream's events).
    ``agent_id`` is ``None`` for the lead; ``agent`` is its description as the prompt
    showed it; ``what`` is the short form of the tool's input (a command, a path).
    ``always`` is set when the answer was ``a``: later requests of this agent for this
    tool are allowed by that rule.
    """

    type: Literal["permission_decided"] = "permission_decided"
    tool: str
    agent_id: str | None
    agent: str
    tool_use_id: str | None
    what: str
    decision: Literal["allow", "deny"]
    by: PermissionAnswer
    always: bool = False
    waited_s: float = 0.0
    message: str | None = None


# -- the governor and the relay ----------------------------------------------------------

ChangeReason = Literal[
    "rate_limited",
    "probe_failed",
    "increase",
    "retry_after",
    "idle_reset",
    "accepted",
    "settled",
    "overloaded",
    "paced",
]
"""Why a bucket changed: a multiplicative or measured cut, a failed probe back to
``last_good``, an additive increase, a Retry-After pause (cap unchanged), the idle reset to
the ceiling, a cut corrected up to the concurrency the upstream was seen to accept, a
measured cut lowered by one more rejection of its burst (settled), a 529
(overloaded) cut, or a pause from the ``anthropic-ratelimit-*`` headers (cap unchanged)."""


class ConcurrencyChanged(_Event):
    """One change of a bucket's limit, for the journal and the progress view.

    Attributes:
        key: the bucket, ``provider/model``.
        reason: why it changed (see :data:`ChangeReason`).
        cap: the bucket's cap after the change.
        previous_cap: the cap before it.
        effective: ``min(cap, ceiling, max_total)``: what the bucket may run at once.
        epoch: the bucket's epoch after the change.
        retry_after_s: the pause asked for by a Retry-After (or the pacing), if any.
        at: wall-clock seconds (the governor's clock) when it happened.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    type: Literal["concurrency_changed"] = "concurrency_changed"
    key: str
    reason: ChangeReason
    cap: int
    previous_cap: int
    effective: int
    epoch: int
    retry_after_s: float | None = None
    at: float


#: A field of a run that :meth:`teamlead.RunControl.amend` can change while it runs.
AmendField = Literal["cap", "subagent_model"]


class RunAmended(_Event):
    """A run's live limits were changed from outside (:class:`teamlead.RunControl`).

    Attributes:
        changed: the fields the amend changed (never empty: a no-op amend is refused).
        cap: the run's agent cap after it (agents running at once, every kind).
        previous_cap: the cap before it.
        default_cap: the cap the run started with (what ``cap=None`` restores).
        subagent_model: the model agents that start from now on run on (``None``: their
            own, as the lead or the script asked).
        previous_subagent_model: the model before it.
        default_subagent_model: the model the run started with.
        at: wall-clock seconds (the run's clock) when it took effect.
    """

    type: Literal["run_amended"] = "run_amended"
    changed: list[AmendField]
    cap: int | None = None
    previous_cap: int | None = None
    default_cap: int | None = None
    subagent_model: str | None = None
    previous_subagent_model: str | None = None
    default_subagent_model: str | None = None
    at: float


class RateLimited(_Event):
    """The relay met a 429 or an overload from the upstream, or answered 429 itself.

    Attributes:
        model: the request's model.
        role: ``lead``, ``subagent`` or ``other``, as the relay told them apart.
        status: 429 (rate limited), else an overload: 529, a gateway's 503, or 502 for a
            connection dropped before the reply's head.
        retry_after_s: the upstream's Retry-After, if it sent a usable one (at most 600 s),
            or the relay's own when it answered 429 itself.
        outcome: ``absorbed`` (the relay held the request and retried it; the CLI never saw
            the error) or ``passed`` (the error went on to the CLI).
        source: ``upstream`` (the API said so) or ``relay`` (no governor slot came within
            the relay's slot timeout, or the model is paused for longer than the request
            may wait, so the relay answered 429 itself; always ``passed``).
    """

    type: Literal["rate_limited"] = "rate_limited"
    model: str
    role: RequestRole
    status: int = 429
    retry_after_s: float | None = None
    outcome: Literal["absorbed", "passed"]
    source: Literal["upstream", "relay"] = "upstream"


class BucketSummary(BaseModel):
    """One bucket at the end: its final limit and what it met."""

    model_config = ConfigDict(frozen=True)

    key: str
    limit: int
    requests: int = 0
    rate_limited: int = 0


class RelaySummary(BaseModel):
    """What the relay did for a run: 429s absorbed and passed on, final limit per bucket.

    Attributes:
        requests: the requests seen (a retry is not a new request).
        absorbed: the 429s and 529s the relay held and retried (the CLI never saw them).
        passed: the 429s and 529s that went on to the CLI.
        overloaded: the overloads met (529s, 503s, connections dropped before the reply's
            head), held or passed on (counted in ``absorbed`` or ``passed``).
        overloaded_held: of those, the ones the relay held through an overload burst.
        buckets: per bucket, its final limit and what it met.
    """

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    absorbed: int = 0
    passed: int = 0
    overloaded: int = 0
    overloaded_held: int = 0
    buckets: list[BucketSummary] = Field(default_factory=list)


class WorkflowDenied(_Event):
    """The CLI's permission check refused the lead's ``Workflow`` call (permission mode
    ``default`` or ``acceptEdits`` with nothing to approve it): no workflow agent ran.

    Attributes:
        tool_use_id: the Workflow call's tool_use id.
        reason: the CLI's tool result, what the lead was told.
        hint: how to allow workflows (``teamlead.allow_workflows``, ``--allow-workflows``).
    """

    type: Literal["workflow_denied"] = "workflow_denied"
    tool_use_id: str
    reason: str
    hint: str


TeamleadEvent: TypeAlias = (
    WaitingForTeam
    | InboxCollected
    | FallbackUsed
    | Resuming
    | ResumeFailed
    | SpawnDecided
    | Finished
    | RateLimited
    | ConcurrencyChanged
    | AgentUsage
    | RunAmended
    | WorkflowDenied
)
