"""Ready-made scripts for the common cases, and the named scenarios of ``serve-scripted``.

:class:`FanOut` is the workhorse: a lead that sends N ``Agent`` calls in one message,
subagents that answer after a delay with a recognisable finding, and a lead that
synthesizes every finding it has seen (from the CLI's task notifications, or from a
teamlead resume prompt). Faults can be injected into the synthesis turns.

Example:
    >>> script = FanOut.of(3, delays=[0.5, 1.0, 1.5])
    >>> with ScriptedServer(script) as server:  # doctest: +SKIP
    ...     ...
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import UsageError
from .replies import AgentCall, Reply, Role, ScriptedRequest, ToolUse

__all__ = [
    "ANSWER_FILE",
    "SCENARIOS",
    "SCENARIO_SUMMARIES",
    "FanOut",
    "FirstWaveHolds",
    "OverloadBurst",
    "ProbabilisticFanOut",
    "StrategyReview",
    "ToolSteps",
    "WorkflowFanOut",
    "bash",
    "finding_text",
    "findings_in",
    "scenario",
    "subagent_answers",
    "synthesize",
    "workflow_key",
    "workflow_script",
    "working_directory",
    "write",
]

_FINDING = re.compile(r"FINDING\[([^\]]+)\]")


def finding_text(description: str) -> str:
    """The recognisable answer a scripted subagent gives for ``description``."""
    return f"FINDING[{description}]: the {description} is done and checked."


def findings_in(text: str) -> list[str]:
    """The distinct finding labels quoted in ``text``, in order of first appearance."""
    return list(dict.fromkeys(_FINDING.findall(text)))


def subagent_answers(
    delay: float | Mapping[str, float] = 0.5, *, text: Callable[[AgentCall], str] | None = None
) -> Callable[[ScriptedRequest], Reply]:
    """A script part for subagents: answer after ``delay`` (per description if a mapping)."""

    def answer(req: ScriptedRequest) -> Reply:
        agent = req.agent
        assert agent is not None
        wait = delay.get(agent.description, 0.5) if isinstance(delay, Mapping) else delay
        body = text(agent) if text else finding_text(agent.description)
        return Reply.text(body, delay=wait)

    return answer


def synthesize(req: ScriptedRequest) -> Reply:
    """A lead turn that synthesizes every finding visible in its conversation."""
    labels = findings_in(req.all_text)
    if not labels:
        return Reply.text("SYNTHESIS: no findings yet.")
    quoted = "; ".join(f"FINDING[{label}]" for label in labels)
    return Reply.text(f"SYNTHESIS of {len(labels)} findings: {quoted}.")


@dataclass
class FanOut:
    """Lead fans out N agents in one message; subagents answer; lead synthesizes.

    Attributes:
        agents: the Agent calls the lead sends together in its first turn.
        delays: seconds each subagent takes, by description (default 0.5).
        synthesis_fault: a fault reply for lead turns that come after a task result: a turn
            that fails, whatever retries (sent as final, ``x-should-retry: false``, unless
            the reply says otherwise).
        synthesis_faults: how many such turns fail (``None``: every one).
        fail_resumes: whether teamlead's resume turns fail too (marked by a
            ``<teamlead-results>`` block in the prompt).
        ack: the lead's text after launching the agents.
    """

    agents: list[AgentCall]
    delays: dict[str, float] = field(default_factory=dict)
    synthesis_fault: Reply | None = None
    synthesis_faults: int | None = None
    fail_resumes: bool = False
    ack: str = "Dispatched the agents; waiting for their results."
    _failed: int = field(default=0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def of(
        cls,
        n: int,
        *,
        delays: Sequence[float] | float = 0.5,
        names: bool = False,
        **kwargs: object,
    ) -> FanOut:
        """``n`` agents ``agent-1..n`` with the given delays."""
        if n < 1:
            raise UsageError("a fan-out needs at least one agent")
        seq = [delays] * n if isinstance(delays, (int, float)) else list(delays)
        if len(seq) != n:
            raise UsageError(f"got {len(seq)} delays for {n} agents")
        calls = [
            AgentCall(
                description=f"agent-{i + 1}",
                prompt=f"SUBTASK-{i + 1}: investigate part {i + 1} and report one finding.",
                name=f"worker-{i + 1}" if names else None,
            )
            for i in range(n)
        ]
        delays_by = {c.description: d for c, d in zip(calls, seq, strict=True)}
        return cls(agents=calls, delays=delays_by, **kwargs)  # type: ignore[arg-type]

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            return subagent_answers(self.delays)(req)
        if req.role == "other":
            return Reply.text("Scripted side reply.")
        sent_agents = any(u.get("name") in ("Agent", "Task") for u in req.tool_uses_sent)
        if not sent_agents:
            return Reply.agents(*self.agents)
        last = req.last_user_text
        is_resume = "<teamlead-results" in last
        has_result = is_resume or "<task-notification>" in last
        if not has_result:
            return Reply.text(self.ack)
        if self.synthesis_fault is not None and (not is_resume or self.fail_resumes):
            with self._lock:
                if self.synthesis_faults is None or self._failed < self.synthesis_faults:
                    self._failed += 1
                    return self.synthesis_fault.final()
        return synthesize(req)


@dataclass
class ProbabilisticFanOut:
    """A lead that sends ``k`` Agent calls in one message with a probability set by a marker.

    For experiment tests: when the system prompt contains ``marker`` the lead fans out
    in parallel with probability ``p_marked``, else ``p_plain``; otherwise it delegates
    one agent at a time (or not at all, with probability ``p_solo``). The draw is seeded
    per conversation (session id), so a trial is reproducible.
    """

    marker: str
    p_marked: float = 0.85
    p_plain: float = 0.2
    k: int = 3
    p_solo: float = 0.3
    seed: int = 0
    delay: float = 0.2
    grade_text: str = "The answer covers the rubric. SCORE: 8"

    def _rng(self, req: ScriptedRequest) -> random.Random:
        return random.Random(f"{self.seed}:{req.session_id}:{req.first_user_text}")

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            return subagent_answers(self.delay)(req)
        if req.role == "other":  # a grader's request (no tools offered)
            return Reply.text(self.grade_text)
        sent = [u for u in req.tool_uses_sent if u.get("name") in ("Agent", "Task")]
        if not sent:
            rng = self._rng(req)
            p = self.p_marked if self.has_marker(req) else self.p_plain
            if rng.random() < p:
                return Reply.agents(*[self._call(i) for i in range(self.k)])
            if rng.random() < self.p_solo:
                return Reply.text("I did it myself: FINDING[solo]: done without help.")
            return Reply.agents(self._call(0))
        if "<task-notification>" in req.last_user_text or "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return Reply.text("Waiting for the agents.")

    def has_marker(self, req: ScriptedRequest) -> bool:
        return self.marker in req.system

    @staticmethod
    def _call(i: int) -> AgentCall:
        return AgentCall(
            description=f"part-{i + 1}", prompt=f"PART-{i + 1}: research part {i + 1}."
        )


_PARTS = re.compile(r"Parts:\s*([^.\n]+)")
_ONE_MESSAGE = re.compile(r"\bin ONE message\b")
_ANSWER = re.compile(r"(?i)\banswer:")
ANSWER_FILE = "ANSWER.md"
"""The file :class:`StrategyReview`'s lead writes its findings to, for the task's check."""


@dataclass
class StrategyReview:
    """A lead that behaves as the strategy prompt in its system prompt tells it to.

    For offline A/B experiments that can find a real difference (the ``strategy-ab``
    scenario, ``examples/strategy-ab.toml``). Each task names its parts in a line
    ``Parts: parser, cache, auth.`` (default: three parts).

    - Under a strategy that asks for Agent calls "in ONE message" (the ``delegation`` and
      ``parallel-first`` prompts), the lead sends one Agent call per part in one message;
      once every finding is in, it writes them all to ``ANSWER.md`` (what the task's check
      looks for) and answers.
    - Under any other prompt (``baseline``), it searches the project for each part itself
      (``Grep``), one search per message, taking ``step_delay`` each; then it writes
      ``ANSWER.md`` with probability ``finish_rate ** (parts - 1)`` and otherwise answers
      without it, missing the check.

    Its grader replies score an answer by the share of the task's parts it has findings
    for. Draws are seeded per conversation (session id and task), so a trial is
    reproducible and a rerun of the same out dir gives the same records.
    """

    finish_rate: float = 0.6
    seed: int = 0
    delay: float = 0.3
    step_delay: float = 0.3

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            return subagent_answers(self.delay)(req)
        if req.role == "other":
            return self._grade(req)
        parts = self.parts(req.first_user_text)
        sent = req.tool_uses_sent
        if any(u.get("name") == "Write" for u in sent):
            found = " ".join(finding_text(part) for part in parts)
            return Reply.text(f"Reviewed {len(parts)} parts; {ANSWER_FILE} has them. {found}")
        if self.delegates(req):
            if not any(u.get("name") in ("Agent", "Task") for u in sent):
                return Reply.agents(*[self._call(part) for part in parts])
            if not set(parts) <= set(findings_in(req.all_text)):
                return Reply.text("Waiting for the reviewers.")
            return self._write(req, parts)
        searched = sum(u.get("name") == "Grep" for u in sent)
        if searched < len(parts):
            search = {"pattern": parts[searched], "path": working_directory(req) or "."}
            return Reply.tools(ToolUse("Grep", search), delay=self.step_delay)
        rng = random.Random(f"{self.seed}:{req.session_id}:{req.first_user_text}")
        if rng.random() < self.finish_rate ** (len(parts) - 1):
            return self._write(req, parts)
        done = " ".join(finding_text(part) for part in parts[:-1])
        return Reply.text(f"Searched {len(parts)} parts one by one. {done} Out of time.")

    @staticmethod
    def parts(task: str) -> list[str]:
        """The parts a task names (``Parts: a, b, c.``), else ``part-1..3``."""
        match = _PARTS.search(task)
        names = [p.strip() for p in match.group(1).split(",")] if match else []
        return [n for n in names if n] or [f"part-{i}" for i in (1, 2, 3)]

    @staticmethod
    def delegates(req: ScriptedRequest) -> bool:
        """Whether the system prompt asks for Agent calls in one message."""
        return bool(_ONE_MESSAGE.search(req.system))

    @staticmethod
    def _call(part: str) -> AgentCall:
        return AgentCall(description=part, prompt=f"REVIEW[{part}]: review {part}, one finding.")

    @staticmethod
    def _write(req: ScriptedRequest, parts: Sequence[str]) -> Reply:
        lines = "".join(f"- {finding_text(part)}\n" for part in parts)
        path = f"{working_directory(req) or '.'}/{ANSWER_FILE}"
        return Reply.tools(write(path, f"# Review\n\n{lines}"))

    def _grade(self, req: ScriptedRequest) -> Reply:
        text = req.all_text
        if "SCORE:" not in text:
            return Reply.text("Scripted side reply.")
        answer = text.split("Answer:", 1)[-1]
        parts = self.parts(text)
        covered = len(set(parts) & set(findings_in(answer)))
        return Reply.text(
            f"Covers {covered} of {len(parts)} parts. SCORE: {10 * covered // len(parts)}"
        )


_WORKDIR = re.compile(r"(?:Primary working directory|Working directory):\s*(\S+)")


def working_directory(req: ScriptedRequest) -> str | None:
    """The working directory the CLI announced to the model (absolute), if any."""
    match = _WORKDIR.search(req.system) or _WORKDIR.search(req.all_text)
    return match.group(1) if match else None


def bash(command: str, description: str = "run a command") -> ToolUse:
    """A ``Bash`` tool call: the CLI runs ``command`` in its working directory."""
    return ToolUse("Bash", {"command": command, "description": description})


def write(file_path: str, content: str) -> ToolUse:
    """A ``Write`` tool call (``file_path`` must be absolute; see :func:`working_directory`)."""
    return ToolUse("Write", {"file_path": file_path, "content": content})


Step = Callable[[ScriptedRequest], Sequence[ToolUse]]


@dataclass
class ToolSteps:
    """A lead that uses tools itself, one message per step, then reports what they returned.

    Each step builds its tool calls from the request (the task is
    ``req.first_user_text``, the session ``req.session_id``, the directory
    :func:`working_directory`), and the CLI really runs them: Bash commands, file
    writes. After the last step the lead answers ``answer`` followed by the last tool
    results. Subagents and side requests get a short text.

    Example:
        >>> script = ToolSteps([lambda req: [bash("echo hi > out.txt && ls")]])
    """

    steps: Sequence[Step]
    answer: str = "Done. Tool output:"
    delay: float = 0.0

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role != "lead":
            return Reply.text("ok")
        step = req.assistant_turns
        if step < len(self.steps):
            return Reply.tools(*self.steps[step](req), delay=self.delay)
        return Reply.text(f"{self.answer}\n{req.last_user_text}")


# -- workflows --------------------------------------------------------------------------
_WFJOB = re.compile(r"WFJOB ([\w:-]+)")
_RESUME_ID = re.compile(r'"resumeFromRunId": "(wf_[\w-]+)"')
_SCRIPT_PATH = re.compile(r'"scriptPath": "([^"]+)"')
_FRESH = re.compile(
    r"with a script that runs only the agents that did not finish: ([^\n]*?)\.(?: |$)"
)
_QUOTED = re.compile(r'"([^"]+)"')
_LAUNCHED = "Workflow launched in background"


def workflow_key(req: ScriptedRequest) -> str | None:
    """The key of a workflow agent's request (its prompt starts ``WFJOB <key>``), else
    ``None``: the lead's and Agent-tool agents' prompts carry no ``WFJOB``."""
    match = _WFJOB.search(req.first_user_text)
    return match.group(1) if match else None


def workflow_script(
    keys: Sequence[str],
    *,
    shape: Literal["parallel", "pipeline"] = "parallel",
    name: str = "scan",
    description: str = "scan workflow",
    label: str = "wf",
    throw: str | None = None,
) -> str:
    """A ``Workflow`` script: one agent per key (prompt ``WFJOB <key>``, label
    ``<label>:<key>``, phase ``Scan``), returning their answers.

    ``parallel`` runs the agents at once; ``pipeline`` runs each key through a second stage
    (``WFJOB check-<key>``, label ``check:<key>``, phase ``Check``) as soon as its first
    agent answered. ``throw`` makes the script throw that message after the agents.
    """
    quoted = ", ".join(f"'{k}'" for k in keys)
    checks = "{ title: 'Check' }, " if shape == "pipeline" else ""
    head = (
        f"export const meta = {{ name: '{name}', description: '{description}', "
        f"phases: [{{ title: 'Scan' }}, {checks}] }}\n"
    )
    first = f"k => agent(`WFJOB ${{k}}`, {{ label: `{label}:${{k}}`, phase: 'Scan' }})"
    if shape == "pipeline":
        second = (
            "(prev, k) => agent(`WFJOB check-${k} ${prev}`, "
            "{ label: `check:${k}`, phase: 'Check' })"
        )
        body = f"const r = await pipeline([{quoted}], {first}, {second})\n"
    else:
        body = f"const r = await parallel([{quoted}].map(k => () => ({first})(k)))\n"
    tail = f"throw new Error('{throw}')\n" if throw else "return { r }\n"
    return head + body + tail


class FirstWaveHolds:
    """``script``, but its first ``replies`` subagent answers take ``seconds`` each.

    Against a hidden concurrency limit of ``replies``, the first wave then holds every
    place while the rest of a storm of Agent calls arrives, however slowly a loaded machine
    sends it: the upstream judges the whole storm at once, as it would a storm sent in
    milliseconds. (A storm spread over longer than an agent's run lets the upstream take
    some of it one after another; no client can tell those from requests run at once.)

    Example:
        >>> script = FirstWaveHolds(FanOut.of(24, delays=0.5), replies=3, seconds=2.0)
    """

    def __init__(
        self, script: Callable[[ScriptedRequest], Reply], *, replies: int, seconds: float
    ) -> None:
        if replies < 1 or not seconds >= 0:
            raise UsageError(
                f"FirstWaveHolds needs replies >= 1 and seconds >= 0, got {replies}, {seconds}"
            )
        self.script, self.replies, self.seconds = script, replies, seconds
        self._answered = 0
        self._lock = threading.Lock()

    def __call__(self, request: ScriptedRequest) -> Reply:
        reply = self.script(request)
        if request.role != "subagent":
            return reply
        with self._lock:
            self._answered += 1
            first = self._answered <= self.replies
        return replace(reply, delay=self.seconds) if first else reply


class OverloadBurst:
    """``script``, but every request (the lead's and the subagents') that arrives within
    ``seconds`` of the first subagent request gets 529 ``overloaded_error``, as the API
    sends it (``x-should-retry: true``): the field's overload bursts, which last minutes.

    ``begins_on`` is the role whose first request starts the burst (``None``: the first
    request of any role, for clients that are neither a lead nor a subagent).

    Attributes:
        began: when the burst began (``time.monotonic()``), once it has.
        overloaded: the 529s it served.
    """

    def __init__(
        self,
        script: Callable[[ScriptedRequest], Reply],
        seconds: float,
        begins_on: Role | None = "subagent",
    ) -> None:
        self.script, self.seconds, self.begins_on = script, seconds, begins_on
        self.began: float | None = None
        self.overloaded = 0
        self._lock = threading.Lock()

    def __call__(self, req: ScriptedRequest) -> Reply:
        with self._lock:
            now = time.monotonic()
            if self.began is None and self.begins_on in (None, req.role):
                self.began = now
            if self.began is not None and now < self.began + self.seconds:
                self.overloaded += 1
                return Reply.error(529)
        return self.script(req)


@dataclass
class WorkflowFanOut:
    """A lead that runs one ``Workflow`` script; its agents answer findings; the lead
    synthesizes, and resumes the run when teamlead's resume prompt asks it to.

    The lead's first turn calls ``Workflow`` with :func:`workflow_script` for ``keys``.
    Each agent answers ``FINDING[<key>]`` after ``delay`` (``delays`` per key); the first
    ``fault_times`` requests of a key in ``faults`` get that reply instead, sent as final
    (``x-should-retry: false``, unless it says otherwise: a 529 the CLI does not retry with
    ``max_retries=0`` and the relay does not hold: the agent ends in error, its ``agent()``
    returns ``null``); a key in ``hang`` is held open for 600 s (until cut; with
    ``hang_once`` only its first request, and ``on_hang(key)`` is called then). When a
    teamlead prompt names a ``resumeFromRunId``, the lead calls ``Workflow`` with it and
    the ``scriptPath`` it names, so finished agents are replayed from the run's journal;
    when it asks for a new run of the agents that did not finish (the CLI refused the
    resume), the lead runs a script of only those keys.
    Each answer is padded to ``answer_chars`` characters (a long result the CLI cuts in
    the lead's notification comes from many agents or long answers).

    Attributes:
        keys: the script's agent keys.
        shape: ``parallel`` or ``pipeline`` (see :func:`workflow_script`).
        throw: the script throws this message after its agents.
    """

    keys: list[str]
    shape: Literal["parallel", "pipeline"] = "parallel"
    throw: str | None = None
    delay: float = 0.5
    delays: dict[str, float] = field(default_factory=dict)
    faults: dict[str, Reply] = field(default_factory=dict)
    fault_times: int = 1
    hang: frozenset[str] = frozenset()
    hang_once: bool = False
    on_hang: Callable[[str], None] | None = None
    input_tokens: dict[str, int] = field(default_factory=dict)
    answer_chars: int = 0
    _faulted: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _hung: set[str] = field(default_factory=set, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def script(self) -> str:
        return workflow_script(self.keys, shape=self.shape, throw=self.throw)

    def __call__(self, req: ScriptedRequest) -> Reply:
        key = workflow_key(req)
        if key is not None:
            return self._agent(key)
        last = req.last_user_text
        if "tools are disabled" in last:  # teamlead's wrap-up turn: no tools are offered
            return synthesize(req)
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.tools(ToolUse(name="Workflow", input={"script": self.script}))
        fresh = _FRESH.search(last)
        if fresh is not None and "<teamlead-results" in last:  # a new run of what is left
            labels = _QUOTED.findall(fresh.group(1))
            left = [k for k in self.keys if f"wf:{k}" in labels]
            return Reply.tools(ToolUse(name="Workflow", input={"script": workflow_script(left)}))
        resume = _RESUME_ID.search(last)
        if resume is not None and "<teamlead-results" in last:
            args: dict[str, str] = {"resumeFromRunId": resume.group(1)}
            path = _SCRIPT_PATH.search(last)
            if path is not None:
                args["scriptPath"] = path.group(1)
            else:
                args["script"] = self.script
            return Reply.tools(ToolUse(name="Workflow", input=args))
        if _LAUNCHED in last and "<task-notification>" not in last:
            return Reply.text("The workflow runs; waiting for its result.")
        return synthesize(req)

    def answer(self, key: str) -> str:
        """What the agent of ``key`` answers (once its faults and hangs are past)."""
        base = key.removeprefix("check-")
        text = finding_text(key if key == base else f"check-{base}")
        if len(text) < self.answer_chars:
            text += (" Notes:" + " the details were read and noted." * self.answer_chars)[
                : self.answer_chars - len(text)
            ]
        return text

    def _agent(self, key: str) -> Reply:
        fault = self.faults.get(key)
        if fault is not None:
            with self._lock:
                count = self._faulted.get(key, 0)
                self._faulted[key] = count + 1
            if count < self.fault_times:
                return fault.final()
        if key in self.hang:
            with self._lock:
                first = key not in self._hung
                self._hung.add(key)
            if first or not self.hang_once:
                if first and self.on_hang is not None:
                    self.on_hang(key)
                return Reply.text(finding_text(key), delay=600)
        text = self.answer(key)
        wait = self.delays.get(key, self.delay)
        return Reply(content=text, delay=wait, input_tokens=self.input_tokens.get(key, 20))


def _echo(req: ScriptedRequest) -> Reply:
    return Reply.text(f"echo: {req.first_user_text[:200]}")


SCENARIOS: dict[str, Callable[[], Callable[[ScriptedRequest], Reply]]] = {
    "echo": lambda: _echo,
    "fan-out": lambda: FanOut.of(3, delays=[0.5, 1.0, 1.5]),
    "fan-out-529": lambda: FanOut.of(
        3, delays=[0.5, 1.0, 1.5], synthesis_fault=Reply.error(529), synthesis_faults=None
    ),
    "rate-limited": lambda: FanOut.of(2, synthesis_fault=Reply.error(429, retry_after=1)),
    "strategy-ab": StrategyReview,
    "workflow": lambda: WorkflowFanOut(["a", "b", "c"], delays={"a": 0.5, "b": 1.0, "c": 1.5}),
    "workflow-pipeline": lambda: WorkflowFanOut(["a", "b"], shape="pipeline"),
    "workflow-529": lambda: WorkflowFanOut(["a", "b", "c"], faults={"b": Reply.error(529)}),
    "workflow-throws": lambda: WorkflowFanOut(["a"], throw="boom"),
    "broken": lambda: _broken,
}

#: One line per scenario, for ``teamlead serve-scripted --list``.
SCENARIO_SUMMARIES: dict[str, str] = {
    "echo": "the lead answers with the start of your prompt; no agents",
    "fan-out": "the lead sends 3 Agent calls in one message (0.5-1.5 s each), then synthesizes",
    "fan-out-529": "like fan-out, but every synthesis turn the CLI injects fails with 529",
    "rate-limited": "2 agents; the synthesis turns fail with 429 (retry-after 1 s)",
    "strategy-ab": "a lead that follows its strategy prompt: one message of Agent calls and a "
    "finished ANSWER.md under delegation, serial searches that often miss the check under baseline",
    "workflow": "the lead runs one Workflow script of 3 parallel agents (0.5-1.5 s), then "
    "synthesizes; it resumes the run (resumeFromRunId) when teamlead asks",
    "workflow-pipeline": "a Workflow pipeline: 2 keys, each through a scan and a check agent",
    "workflow-529": "like workflow, but agent b's first request gets a 529: with no CLI retries "
    "the agent is lost, and teamlead's resume makes the lead resume the run from its journal",
    "workflow-throws": "a Workflow script that throws after its one agent answered",
    "broken": "the script raises: every request gets a 500 (what a bug in your script does)",
}


def _broken(req: ScriptedRequest) -> Reply:
    raise RuntimeError("this scenario's script fails on purpose")


def scenario(name: str) -> Callable[[ScriptedRequest], Reply]:
    """A fresh script for a named scenario.

    Raises:
        UsageError: unknown name (the message lists the known ones).
    """
    try:
        factory = SCENARIOS[name]
    except KeyError:
        known = ", ".join(sorted(SCENARIOS))
        raise UsageError(f"unknown scenario {name!r}; known scenarios: {known}") from None
    return factory()
