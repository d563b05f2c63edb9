"""How an agent ended, judged from evidence, on the real CLI.

A subagent type defined with ``maxTurns`` (``.claude/agents/NAME.md`` in the run's project)
makes the real CLI stop an agent that still calls tools at its limit: it reports the task
``completed``, its result PARTIAL. teamlead judges the end from the transcript and the
notification's note, asks the lead to continue the agent (``SendMessage`` to its task id),
within ``Policy.max_continuations``, and never counts a partial text as a complete result;
an agent lost with its CLI (killed mid-work, or with its machine: ``teamlead resume``) is
continued the same way in the next CLI.
An agent cut at its output limit is told apart from a failure; agents lost with their
machine whose work the lead delegated again are superseded; and an agent that finished
though its notification never came (a replayed real stream without it) is delivered.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished, Resuming
from teamlead.testing import AgentCall, OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import finding_text, findings_in, synthesize

from ..isolated import run_to_the_end
from ..polling import poll
from .conftest import (
    TEAMLEAD,
    OfflineFactory,
    ask,
    ask_env,
    cli_processes,
    finished,
    run,
    start_ask,
)
from .scripted import Redelegates, lead_seen

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

#: teamlead's ask in a resume prompt: the SendMessage call that continues the agent
_ASKED = re.compile(r"call SendMessage (\{[^\n]*?\})\. It resumes")


def stepper(project: Path, max_turns: int = 3) -> None:
    """Define the subagent type ``stepper`` with ``maxTurns`` in ``project``."""
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "stepper.md").write_text(
        f"---\nname: stepper\ndescription: works in steps\nmaxTurns: {max_turns}\n---\n"
        "Work through your steps.\n"
    )


class Steps:
    """A lead that starts ``deep`` (a ``stepper``, which needs ``steps`` tool calls before it
    can answer; ``None``: it never can) and ``quick``. It ignores the CLI's notice that an
    agent stopped at its limit (unless it ``heeds_cli``: then it continues the agent itself,
    as the notice says), and does what a teamlead resume prompt asks: it loads SendMessage
    and sends the call the prompt names."""

    def __init__(self, steps: int | None, *, heeds_cli: bool = False) -> None:
        self.steps = steps
        self.heeds_cli = heeds_cli
        self.calls: list[dict[str, str]] = []  # the SendMessage calls it is about to send

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            if req.agent.description == "quick":
                return Reply.text(finding_text("quick"), delay=0.2)
            done = len(req.tool_uses_sent)
            if self.steps is None or done < self.steps:
                step = ToolUse(name="Bash", input={"command": f"echo step{done}"})
                return Reply.tools(step, text=f"working on step {done}")
            return Reply.text(finding_text("deep"))
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.agents(
                AgentCall("deep", "AGENTJOB deep", subagent_type="stepper"),
                AgentCall("quick", "AGENTJOB quick"),
            )
        text = req.last_user_text
        asked = _ASKED.findall(text) if "select:SendMessage" in text else []
        noticed = _NOTICE.search(text) if self.heeds_cli else None
        if asked:
            self.calls += [json.loads(call) for call in asked]
        elif noticed is not None and "<teamlead-results" not in text:
            self.calls.append({"to": noticed.group(1), "message": "Continue, please."})
        else:
            sent = req.tool_uses_sent
            if sent and sent[-1]["name"] in ("ToolSearch", "SendMessage") and self.calls:
                return Reply.tools(ToolUse(name="SendMessage", input=self.calls.pop(0)))
            return synthesize(req)
        return Reply.tools(ToolUse(name="ToolSearch", input={"query": "select:SendMessage"}))


#: the CLI's notice that it stopped an agent at its turn limit, in the lead's notification
_NOTICE = re.compile(r"<task-id>(\w+)</task-id>(?:(?!</task-notification>).)*?turn limit", re.S)


def deep_starts(server: ScriptedServer) -> int:
    """How many times ``deep`` started, or was continued on teamlead's ask: its first request,
    and each request whose last user text carries the message teamlead's prompt names."""
    deep = [
        r.request
        for r in server.recorded("subagent")
        if r.request.agent and r.request.agent.description == "deep"
    ]
    return sum(
        1 for req in deep if req.assistant_turns == 0 or "Continue from" in req.last_user_text
    )


async def test_an_agent_stopped_at_its_turn_limit_is_continued_and_its_finding_used(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Steps(steps=5))
    stepper(claude.cwd)
    items = await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150))
    done = finished(items)
    assert done.status == "completed", done.reasons
    (resuming,) = [i for i in items if isinstance(i, Resuming)]
    assert resuming.reasons == [
        "0 result(s) not yet used by the lead; 1 agent(s) stopped at a limit to continue"
    ]
    assert done.reason == "all_results_used"
    assert sorted(findings_in(done.result or "")) == ["deep", "quick"]
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    assert rows["deep"].ended == "finished" and rows["deep"].disposition == "included"
    assert rows["quick"].ended == "finished"
    assert done.resumes == 1  # one ask; the lead continued the agent and it finished
    assert deep_starts(server) == 2


async def test_an_agent_its_lead_continued_notifies_again_and_the_last_notice_counts(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Steps(steps=5, heeds_cli=True))
    stepper(claude.cwd)
    done = finished(await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150)))
    assert done.status == "completed" and done.resumes == 0, done.reasons
    assert sorted(findings_in(done.result or "")) == ["deep", "quick"]
    deep = next(r for r in done.tasks if r.description == "deep")
    assert (deep.ended, deep.disposition, deep.reason) == ("finished", "included", None)
    assert deep_starts(server) == 1  # the lead's own message continued it: no ask of teamlead's


async def test_an_agent_cut_at_its_output_limit_is_told_apart_from_a_failure(
    offline: OfflineFactory,
) -> None:
    def script(req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            if req.agent.description == "quick":
                return Reply.text(finding_text("quick"))
            return Reply(content="the first half of a long answer", stop_reason="max_tokens")
        if req.role == "lead" and req.assistant_turns == 0:
            return Reply.agents(
                AgentCall("long", "AGENTJOB long"), AgentCall("quick", "AGENTJOB quick")
            )
        return synthesize(req) if req.role == "lead" else Reply.text("ok")

    _, claude = offline(script)
    done = finished(await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150)))
    assert done.status == "partial" and done.reason == "work_failed", done.reasons
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    assert (rows["long"].status, rows["long"].ended) == ("failed", "output_limit")
    assert rows["long"].reason == "was cut at the output token limit before finishing"
    assert rows["quick"].ended == "finished" and findings_in(done.result or "") == ["quick"]


def _verb(claude: OfflineClaude, *args: str) -> str:
    done = run_to_the_end([*TEAMLEAD, *args], env=ask_env(claude), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_agent_that_cannot_finish_ends_the_run_partial_with_bounded_tries(
    tmp_path: Path,
) -> None:
    with ScriptedServer(Steps(steps=None)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        stepper(claude.cwd)
        proc = ask(claude, "--json", "--wait", "5")
        tries = deep_starts(server)
    assert proc.returncode == 3, proc.stderr
    done = Finished.model_validate_json(proc.stdout.splitlines()[-1])
    assert done.status == "partial" and done.reason == "results_missing", done.reasons
    assert findings_in(done.result or "") == ["quick"]  # the other agent's result is used
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    deep = rows["deep"]
    assert (deep.ended, deep.disposition, deep.status) == ("turn_limit", "missing", "completed")
    assert deep.reason is not None and deep.reason.startswith(
        "stopped at its 3-turn limit before finishing; continued 3 time(s)"
    )
    assert deep.result is not None and "working on step" in deep.result  # kept, as partial
    assert f'task "deep" (completed): {deep.reason}' in done.reasons
    assert tries == 4  # its first run and at most 3 more
    assert done.resumes == 3
    # the run history tells the same truth: the agent the CLI called completed was cut
    row = json.loads(_verb(claude, "ps", "--all", "--json"))[0]
    assert row["agents"] == {"running": 0, "queued": 0, "done": 1, "failed": 1}
    shown = _verb(claude, "show", done.session_id or "")
    assert "[turn_limit] deep (task, missing)" in shown and "[completed] quick" in shown


def machine_dies_then_resume(claude: OfflineClaude, dies_when: Callable[[], bool]) -> Finished:
    """``teamlead ask`` on ``claude``, killed with its CLI (the machine dies) once
    ``dies_when()``; then ``teamlead resume`` of its session, run to its end (exit 0):
    its ``Finished``."""
    proc = start_ask(claude, "--json", "--wait", "5", start_new_session=True)
    try:
        assert poll(dies_when, within_s=120, unless=lambda: proc.poll() is not None), (
            proc.communicate(timeout=10)
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    assert poll(lambda: not cli_processes(claude.state_dir), within_s=10)
    session = next(claude.config_dir.glob("projects/*/*.jsonl")).stem
    done = run_to_the_end(
        [*TEAMLEAD, "resume", session, "--json", "--wait", "5"],
        env=ask_env(claude),
        cwd=claude.cwd,
        timeout=150,
    )
    finished_line = Finished.model_validate_json(done.stdout.splitlines()[-1])
    assert done.returncode == 0, (done.stderr[-2000:], finished_line.reasons)
    return finished_line


def test_lost_agents_whose_work_was_delegated_again_are_superseded(tmp_path: Path) -> None:
    script = Redelegates()
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        # the machine dies once the lead has a and b, and c and d hang
        finished_line = machine_dies_then_resume(
            claude, lambda: script.hung >= {"c", "d"} and {"a", "b"} <= lead_seen(server)
        )
    assert finished_line.status == "completed" and finished_line.reason == "all_results_used"
    assert sorted(findings_in(finished_line.result or "")) == ["a", "b", "c", "d"]
    rows = [r for r in finished_line.tasks if r.kind == "task"]
    for name in "cd":
        lost, again = (r for r in rows if r.description == name)
        assert (lost.disposition, lost.ended) == ("not_run", "lost")
        assert lost.reason is not None and f"superseded by task {again.id}" in lost.reason
        assert (again.disposition, again.ended) == ("included", "finished")


class LostWithItsCli(Steps):
    """A lead that starts ``deep`` and ``quick``, whose requests hang until their CLI is
    killed (``deep`` after two tool steps, ``quick`` at once): :attr:`hung` is set once
    both hang. Continued (a ``SendMessage`` to the task id, in the next CLI process), each
    answers. The lead does what a teamlead resume prompt asks."""

    def __init__(self) -> None:
        super().__init__(steps=2)
        self.hung = threading.Event()
        self._hanging: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, req: ScriptedRequest) -> Reply:
        name = req.agent.description if req.role == "subagent" and req.agent else None
        ready = name == "quick" or (name == "deep" and len(req.tool_uses_sent) >= 2)
        with self._lock:
            hang = ready and not self.hung.is_set() and name not in self._hanging
            if hang:
                self._hanging.add(str(name))
                if self._hanging == {"deep", "quick"}:
                    self.hung.set()
        return Reply.text("never sent", delay=600) if hang else super().__call__(req)


async def test_an_agent_lost_with_its_cli_is_continued_in_the_next_one_and_its_finding_used(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(LostWithItsCli())
    stepper(claude.cwd, max_turns=20)  # a limit it never meets
    script = server.script

    async def kill_the_cli_once_both_hang() -> None:
        await anyio.to_thread.run_sync(script.hung.wait, 60)
        for process in cli_processes(claude.state_dir):  # the CLI dies, its agents with it
            process.kill()

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_the_cli_once_both_hang)
        items = await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150))
    done = finished(items)
    assert done.status == "completed" and done.reason == "all_results_used", done.reasons
    assert sorted(findings_in(done.result or "")) == ["deep", "quick"]
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    for name in ("deep", "quick"):
        assert (rows[name].ended, rows[name].disposition) == ("finished", "included")
    assert deep_starts(server) == 2  # its first start, and once continued: not run again
    (resuming,) = [i for i in items if isinstance(i, Resuming)]
    assert resuming.reasons == [
        "0 result(s) not yet used by the lead; 2 agent(s) lost with their CLI to continue"
    ]


def test_agents_lost_with_their_machine_are_continued_by_teamlead_resume(tmp_path: Path) -> None:
    script = LostWithItsCli()
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        stepper(claude.cwd, max_turns=20)  # a limit it never meets
        # the machine dies (teamlead and its CLI) while both agents work
        finished_line = machine_dies_then_resume(claude, script.hung.is_set)
        starts = deep_starts(server)
    assert finished_line.status == "completed" and finished_line.reason == "all_results_used"
    assert sorted(findings_in(finished_line.result or "")) == ["deep", "quick"]
    assert starts == 2  # its first start, and once continued: not run again


def waits_for_two(req: ScriptedRequest) -> Reply:
    """A lead that starts ``alpha`` and ``beta`` and answers every later turn with no
    finding of its own (its answer comes from teamlead's resume)."""
    if req.role == "subagent" and req.agent is not None:
        return Reply.text(finding_text(req.agent.description), delay=0.2)
    if req.role != "lead":
        return Reply.text("ok")
    if req.assistant_turns == 0:
        return Reply.agents(
            AgentCall("alpha", "AGENTJOB alpha"), AgentCall("beta", "AGENTJOB beta")
        )
    return Reply.text("WAITING for the agents.")


async def test_a_finished_agent_whose_notification_never_came_is_delivered(
    offline: OfflineFactory,
) -> None:
    from claude_agent_sdk import ResultMessage, TaskNotificationMessage, TaskUpdatedMessage
    from claude_agent_sdk import query as real_query

    from ..scripted_query import init, lead, result

    _, claude = offline(waits_for_two)
    with anyio.fail_after(120):
        recorded = [m async for m in real_query(prompt="Investigate.", options=claude.options())]
    beta = next(
        m.task_id
        for m in recorded
        if isinstance(m, TaskNotificationMessage) and "beta" in m.summary
    )
    # the real stream, but the CLI never told of beta's end (a notification it dropped)
    dropped = (TaskNotificationMessage, TaskUpdatedMessage)
    replayed = [m for m in recorded if not (isinstance(m, dropped) and m.task_id == beta)]
    assert any(isinstance(m, ResultMessage) for m in replayed)
    session = next(m.session_id for m in recorded if isinstance(m, ResultMessage))
    prompts: list[str] = []

    async def query_fn(*, prompt: str, options: Any) -> AsyncIterator[Any]:
        prompts.append(prompt)
        if len(prompts) == 1:
            for message in replayed:
                yield message
            return
        answer = "SYNTHESIS: " + "; ".join(f"FINDING[{x}]" for x in findings_in(prompt))
        for message in (init(), lead(answer), result(answer)):  # the session goes on
            yield {**message, "session_id": session}

    policy = teamlead.Policy(relay=False, wait_s=1, deadline_s=60)
    done = finished(await run(claude.options(), policy, query_fn=query_fn))
    assert len(prompts) == 2 and finding_text("beta") in prompts[1]
    assert findings_in(prompts[1]) == ["beta"]  # alpha's notification reached the lead
    assert done.status == "completed" and done.reason == "all_results_used", done.reasons
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    assert (rows["beta"].status, rows["beta"].ended) == ("completed", "finished")
    assert (rows["beta"].disposition, rows["beta"].source) == ("included", "transcript")
    assert findings_in(done.result or "") == ["beta"]
