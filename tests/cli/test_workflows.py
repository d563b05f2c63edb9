"""Claude Code's dynamic workflows, on the real CLI offline (issue 19): tracked, recovered
from the run's journal, failed in one line, and cut by the deadline.

The scripted lead calls ``Workflow`` with a script from
:func:`teamlead.testing.scripts.workflow_script`; each agent's prompt is ``WFJOB <key>``,
so the server's records say which agent sent each request (and how many each sent: an
agent replayed from the journal sends none).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import teamlead
from teamlead.clock import SYSTEM_CLOCK, Clock
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import WorkflowFanOut, findings_in

from ..polling import poll
from ..skip_clock import SkipClock, skipping
from .conftest import OfflineFactory, finished, run, run_on_a_client
from .scripted import journaled, requests_by_key, sent_usage

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

#: a workflow agent's answer time where only what it answers matters
QUICK = 0.2


def resume_prompts(server: ScriptedServer) -> list[str]:
    return [
        r.request.last_user_text
        for r in server.recorded()
        if "<teamlead-results" in r.request.last_user_text
    ]


def policy(**kwargs: Any) -> teamlead.Policy:
    return teamlead.Policy(wait_s=5, deadline_s=150, **kwargs)


@pytest.mark.parametrize(
    ("shape", "labels"),
    [
        ("parallel", {"wf:a", "wf:b", "wf:c"}),
        ("pipeline", {"wf:a", "wf:b", "check:a", "check:b"}),
    ],
)
async def test_a_completed_workflow_has_a_row_per_agent_with_the_servers_usage(
    offline: OfflineFactory, shape: str, labels: set[str]
) -> None:
    keys = ["a", "b", "c"] if shape == "parallel" else ["a", "b"]
    script = WorkflowFanOut(keys, shape=shape, delay=QUICK, input_tokens={"a": 111, "b": 222})  # type: ignore[arg-type]
    server, claude = offline(script)
    done = finished(await run(claude.options(), policy()))
    assert done.status == "completed", done.reasons
    rows = [r for r in done.tasks if r.kind == "workflow_agent"]
    assert {r.label for r in rows} == labels
    workflow = next(r for r in done.tasks if r.kind == "task")
    assert workflow.run_id is not None and workflow.run_id.startswith("wf_")
    sent = sent_usage(server)
    for row in rows:
        assert row.parent == workflow.id and row.run_id == workflow.run_id
        assert row.status == "completed" and not row.cached
        assert (row.tokens_in, row.tokens_out) == sent[row.id], row.label
        assert row.requests == 1
    assert {r.phase for r in rows} == ({"Scan"} if shape == "parallel" else {"Scan", "Check"})
    assert next(r for r in rows if r.label == "wf:a").tokens_in == 111
    # a pipeline's result is each key's last stage
    answered = set(keys) if shape == "parallel" else {f"check-{k}" for k in keys}
    assert set(findings_in(done.result or "")) >= answered


async def test_a_script_that_throws_fails_the_run_in_one_line(offline: OfflineFactory) -> None:
    server, claude = offline(WorkflowFanOut(["a"], throw="boom-probe", delay=QUICK))
    done = finished(await run(claude.options(), policy()))
    assert done.status == "failed" and done.reason == "work_failed"
    lines = [r for r in done.reasons if "boom-probe" in r]
    assert lines == ['workflow "scan workflow" failed: Error: boom-probe'], done.reasons
    assert "\n" not in lines[0]


async def test_a_lost_agent_is_recovered_by_resuming_the_run_from_its_journal(
    offline: OfflineFactory,
) -> None:
    # d's first request gets a 529 the CLI does not retry: its agent() returns null, and
    # the workflow still ends "completed" with 3 of 4 findings
    script = WorkflowFanOut(["a", "b", "c", "d"], delay=QUICK, faults={"d": Reply.error(529)})
    server, claude = offline(script)
    done = finished(await run(claude.options(), policy()))
    assert done.status == "completed" and done.resumes == 1, done.reasons
    assert set(findings_in(done.result or "")) >= {"a", "b", "c", "d"}
    prompt = resume_prompts(server)[0]
    first, resumed = (r for r in done.tasks if r.kind == "task")
    assert first.run_id == resumed.run_id and first.run_id in prompt
    assert '"resumeFromRunId"' in prompt and '"scriptPath"' in prompt and "wf:d" in prompt
    # replayed from the journal: a, b and c sent one request in all; d a second one
    sent = requests_by_key(server)
    assert sent == {"a": [200], "b": [200], "c": [200], "d": [529, 200]}
    rows = {(r.parent, r.label): r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows[(first.id, "wf:d")].status == "failed"
    assert rows[(first.id, "wf:d")].disposition == "not_run"  # its run's resume ran it again
    for key in "abc":
        replay = rows[(resumed.id, f"wf:{key}")]
        assert replay.cached and replay.status == "cached" and replay.requests == 0
    assert rows[(resumed.id, "wf:d")].status == "completed"


async def test_a_lost_agent_that_no_resume_recovers_leaves_the_run_partial(
    offline: OfflineFactory,
) -> None:
    # every request of d fails: the resumed run loses it again, and max_resumes ends it
    script = WorkflowFanOut(["a", "d"], delay=QUICK, faults={"d": Reply.error(529)}, fault_times=10)
    server, claude = offline(script)
    done = finished(await run(claude.options(), policy(max_resumes=1)))
    assert done.status == "partial" and done.reason == "max_resumes", done.reasons
    assert any("lost 1 agent(s)" in r and '"wf:d"' in r for r in done.reasons), done.reasons
    assert requests_by_key(server)["a"] == [200]


def _killed_once(
    offline: OfflineFactory, keys: list[str], *, junk: str = ""
) -> tuple[ScriptedServer, OfflineClaude]:
    """A workflow of ``keys`` whose last agent hangs once: when it does, and all the others'
    results are in the run's journal, ``junk`` is written at the journal's end and the CLI
    is SIGKILLed."""
    holder: dict[str, Path] = {}
    script = WorkflowFanOut(
        keys,
        delay=QUICK,
        hang=frozenset({keys[-1]}),
        hang_once=True,
        on_hang=lambda key: _kill_the_cli_once_journaled(holder["dir"], len(keys) - 1, junk),
    )
    server, claude = offline(script)
    holder["dir"] = claude.state_dir
    return server, claude


def _kill_the_cli_once_journaled(state_dir: Path, results: int, junk: str = "") -> None:
    """Once the run's journal holds ``results`` results, write ``junk`` at its end (the
    hanging agent adds no line after it) and SIGKILL the CLI (the lead's)."""

    def kill() -> None:
        journal = poll(lambda: journaled(state_dir, results), within_s=60)
        if journal is None:
            return
        if junk:
            with journal.open("a") as out:
                out.write(junk)
        for proc in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if proc.name() == "claude" or "claude" in " ".join(proc.cmdline()[:1]):
                    proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue

    threading.Thread(target=kill, daemon=True).start()


async def test_a_cli_killed_mid_workflow_is_recovered_through_the_stopped_notice(
    offline: OfflineFactory,
) -> None:
    server, claude = _killed_once(offline, ["a", "b", "c", "d"])
    done = finished(await run(claude.options(), policy()))
    assert done.status == "completed", done.reasons
    assert set(findings_in(done.result or "")) >= {"a", "b", "c", "d"}
    first, resumed = (r for r in done.tasks if r.kind == "task")
    assert first.status == "stopped"  # the resumed CLI's "didn't finish" notice
    assert resumed.run_id == first.run_id
    sent = requests_by_key(server)
    assert sent["a"] == sent["b"] == sent["c"] == [200]
    assert len(sent["d"]) == 2 and sent["d"][-1] == 200
    assert first.run_id is not None and first.run_id in resume_prompts(server)[0]


async def test_a_journal_the_cli_cannot_read_leads_to_a_fresh_run_of_the_unfinished_agents(
    offline: OfflineFactory,
) -> None:
    junk = 'not a journal line\n{"type":"result",\n'
    server, claude = _killed_once(offline, ["a", "b", "c", "d"], junk=junk)
    done = finished(await run(claude.options(), policy()))
    assert done.status == "completed" and done.reason == "all_results_used", done.reasons
    assert set(findings_in(done.result or "")) >= {"a", "b", "c", "d"}
    sent = requests_by_key(server)
    assert sent["a"] == sent["b"] == sent["c"] == [200]  # finished: kept, never run again
    assert len(sent["d"]) == 2 and sent["d"][-1] == 200
    assert done.resumes == 2  # the refused resume, then the fresh run
    asked, fresh = resume_prompts(server)
    assert '"resumeFromRunId"' in asked and "FINDING[a]" in asked  # the finished results
    assert 'only the agents that did not finish: "wf:d"' in fresh
    assert '"wf:a", "wf:b", "wf:c"' in fresh and "FINDING[a]" not in fresh  # delivered once
    first, again = (r for r in done.tasks if r.kind == "task")
    assert again.run_id != first.run_id  # a new run, not a resume of the old one
    assert first.disposition == "not_run" and "run afresh by task" in (first.reason or "")
    assert "cannot be read" in (first.reason or "")  # the CLI's own reason
    rows = {(r.parent, r.label): r for r in done.tasks if r.kind == "workflow_agent"}
    assert {rows[(first.id, f"wf:{k}")].disposition for k in "abc"} == {"included"}
    assert rows[(first.id, "wf:d")].disposition == "not_run"
    assert {label for parent, label in rows if parent == again.id} == {"wf:d"}
    assert rows[(again.id, "wf:d")].status == "completed"


async def _items_until_finished(
    claude: OfflineClaude,
    policy: teamlead.Policy,
    how: str,
    limit_s: float,
    clock: Clock = SYSTEM_CLOCK,
) -> list[Any]:
    """A run through ``teamlead.run`` or a ``ClaudeSDKClient`` with ``receive_all``."""
    if how == "query":
        return await run(claude.options(), policy, limit_s, clock)
    return await run_on_a_client(claude.options(), policy, limit_s, clock)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["query", "client"])
async def test_the_deadline_stops_a_running_workflow_and_keeps_its_finished_agents(
    offline: OfflineFactory, how: str
) -> None:
    script = WorkflowFanOut(["a", "b", "c"], delays={"a": 0.3, "b": 0.3}, hang=frozenset({"c"}))
    server, claude = offline(script)
    policy = teamlead.Policy(wait_s=2, deadline_s=20)
    clock = SkipClock()
    wrap_at = clock.monotonic() + 20 - policy.spawn.reserve_for(20)

    def only_c_left() -> bool:  # a's and b's results in the run's journal, c's request open
        return journaled(claude.state_dir, 2) is not None and "c" in requests_by_key(server)

    # the wrap-up point comes once only c is left, not after the seconds to it
    items = _items_until_finished(claude, policy, how, 90, clock)
    done = finished(await skipping(clock, only_c_left, wrap_at, items))
    assert done.reason == "deadline", done.reasons
    wrap = [r for r in server.recorded() if "tools are disabled" in r.request.last_user_text]
    assert wrap, "no wrap-up turn"
    text = wrap[-1].request.last_user_text
    assert "FINDING[a]" in text and "FINDING[b]" in text  # from the run's journal
    assert '"wf:c" did not finish' in text and "Resume the workflow" not in text
    assert {"a", "b"} <= set(findings_in(done.result or "")), (done.result, done.reasons)
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    # stopped with its workflow, which the wrap-up stopped; its result is missing
    assert (rows["wf:c"].status, rows["wf:c"].disposition) == ("stopped", "missing"), rows
    assert rows["wf:a"].status == "completed"


async def test_a_lost_agent_is_recovered_on_a_client_too(offline: OfflineFactory) -> None:
    script = WorkflowFanOut(["a", "b", "c"], delay=QUICK, faults={"c": Reply.error(529)})
    server, claude = offline(script)
    done = finished(await _items_until_finished(claude, policy(), "client", 150))
    assert done.status == "completed" and done.resumes == 1, done.reasons
    assert set(findings_in(done.result or "")) >= {"a", "b", "c"}
    assert requests_by_key(server) == {"a": [200], "b": [200], "c": [529, 200]}


async def test_teamlead_resume_recovers_a_workflow_its_killed_cli_left(
    offline: OfflineFactory,
) -> None:
    server, claude = _killed_once(offline, ["a", "b", "c"])
    first = finished(await run(claude.options(), policy(max_resumes=0)))
    # the killed workflow left results to deliver, and the run may not resume to deliver them
    assert first.reason == "max_resumes" and first.session_id is not None, first.reasons
    with anyio.fail_after(150):
        items = [
            item
            async for item in teamlead.resume_session(
                first.session_id, claude.options(), policy=policy()
            )
        ]
    done = finished(items)
    assert done.status == "completed", done.reasons
    assert set(findings_in(done.result or "")) >= {"a", "b", "c"}
    sent = requests_by_key(server)
    assert sent["a"] == sent["b"] == [200] and len(sent["c"]) == 2


#: enough agents with long enough answers that the workflow's result is over the 8000
#: characters the CLI quotes in the lead's notification (about 10,000 here)
MANY = [f"k{i:02d}" for i in range(40)]


def many_agents(offline: OfflineFactory) -> tuple[WorkflowFanOut, ScriptedServer, OfflineClaude]:
    script = WorkflowFanOut(MANY, delay=0.0, answer_chars=250)
    server, claude = offline(script)
    claude.env["CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"] = "8"
    return script, server, claude


def whole_results_sent_to_the_lead(server: ScriptedServer, script: WorkflowFanOut) -> Counter[str]:
    """How many times each agent's whole answer was in what the lead was given after its
    first turn (the CLI's notifications and teamlead's prompts, each text once); an answer
    the CLI cut in a notification was not given whole there."""
    texts = dict.fromkeys(
        r.request.last_user_text
        for r in server.recorded()
        if r.request.role == "lead"
        and (
            "<task-notification>" in r.request.last_user_text
            or "<teamlead-results" in r.request.last_user_text
        )
    )
    return Counter({key: sum(t.count(script.answer(key)) for t in texts) for key in script.keys})


@pytest.mark.parametrize("how", ["query", "client"])
async def test_a_workflow_result_the_cli_cut_in_the_notification_reaches_the_lead_whole(
    offline: OfflineFactory, how: str
) -> None:
    script, server, claude = many_agents(offline)
    done = finished(await _items_until_finished(claude, policy(), how, 150))
    notified = next(
        r.request.last_user_text
        for r in server.recorded()
        if "<task-notification>" in r.request.last_user_text
    )
    assert "... (truncated " in notified  # the CLI cut it: the lead saw the head only
    assert not set(MANY) <= set(findings_in(notified))
    assert done.status == "completed" and done.resumes == 1, done.reasons
    assert set(findings_in(done.result or "")) == set(MANY)
    sent = whole_results_sent_to_the_lead(server, script)
    assert set(sent.values()) == {1}, sent  # every result once: none lost, none twice
    workflow = next(r for r in done.tasks if r.kind == "task")
    assert workflow.disposition == "included" and workflow.result_file is None
    assert workflow.reason is not None and "the CLI cut its result" in workflow.reason
    assert "delivered in a resume prompt" in workflow.reason
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows["wf:k00"].source == "lead" and rows["wf:k00"].reason is None  # seen at once
    last = rows["wf:k39"]
    assert last.source == "transcript" and "a resume prompt delivered it" in (last.reason or "")
    assert {r.disposition for r in rows.values()} == {"included"}


class Reader(WorkflowFanOut):
    """As :class:`WorkflowFanOut`, but the lead reads the file a resume prompt hands a
    result over by (``… the whole result is in PATH (Read it)``) before it answers."""

    def __call__(self, req: ScriptedRequest) -> Reply:
        named = _BY_PATH.search(req.last_user_text)
        if req.role == "lead" and named is not None and "<teamlead-results" in req.last_user_text:
            return Reply.tools(ToolUse(name="Read", input={"file_path": named.group(1)}))
        return super().__call__(req)


_BY_PATH = re.compile(r"the whole result is in (\S+) \(Read it\)")


@pytest.mark.parametrize("reads", [False, True], ids=["unread", "read"])
async def test_the_rest_of_a_cut_workflow_result_given_by_path_counts_only_once_read(
    offline: OfflineFactory, reads: bool
) -> None:
    script = (Reader if reads else WorkflowFanOut)(MANY, delay=0.0, answer_chars=250)
    server, claude = offline(script)
    claude.env["CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"] = "8"
    done = finished(await run(claude.options(), policy(max_result_chars=600)))
    assert done.resumes == 1, done.reasons
    workflow = next(r for r in done.tasks if r.kind == "task")
    assert workflow.result_file is not None and workflow.reason is not None
    whole = await anyio.Path(workflow.result_file).read_text()
    rows = {r.label.removeprefix("wf:"): r for r in done.tasks if r.kind == "workflow_agent"}
    by_path = {key for key, r in rows.items() if r.result_file == workflow.result_file}
    assert by_path, "the prompt quoted every agent's result"
    sent = whole_results_sent_to_the_lead(server, script)
    for key in set(MANY) - by_path:
        assert sent[key] == 1 and key in findings_in(done.result or ""), key
    for key in by_path:  # the lead had them only in the file the row names
        assert script.answer(key) in whole and sent[key] == 0, key
    if reads:
        assert done.status == "completed" and done.reason == "all_results_used", done.reasons
        assert "the lead read all of it" in workflow.reason
        assert set(findings_in(done.result or "")) == set(MANY)
        assert {rows[key].disposition for key in by_path} == {"included"}
    else:  # handed over, never seen: not used, and the run says which
        assert done.status == "partial" and done.reason == "results_missing", done.reasons
        assert "the lead never read the whole" in workflow.reason
        assert {rows[key].disposition for key in by_path} == {"missing"}
        unseen = {key for key in MANY if any(f"wf:{key}" in r for r in done.reasons)}
        assert unseen == by_path


@pytest.mark.slow  # 200 workflow agents on the real CLI
async def test_all_200_findings_of_a_workflow_the_cli_cut_reach_the_answer(
    offline: OfflineFactory,
) -> None:
    keys = [f"k{i:03d}" for i in range(200)]
    script = WorkflowFanOut(keys, delay=0.0, answer_chars=120)  # about 24,000 characters
    server, claude = offline(script)
    claude.env["CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"] = "16"
    done = finished(await run(claude.options(), policy(), limit_s=240))
    notified = next(
        r.request.last_user_text
        for r in server.recorded()
        if "<task-notification>" in r.request.last_user_text
    )
    assert "... (truncated " in notified  # the CLI cut it
    assert done.status == "completed" and done.reason == "all_results_used", done.reasons
    assert set(findings_in(done.result or "")) == set(keys)  # every finding, none by path
    workflow = next(r for r in done.tasks if r.kind == "task")
    assert workflow.result_file is None and "delivered in a resume prompt" in (
        workflow.reason or ""
    )


async def test_a_cut_workflow_result_whose_rest_never_reached_the_lead_is_missing(
    offline: OfflineFactory,
) -> None:
    _, _, claude = many_agents(offline)
    done = finished(await run(claude.options(), policy(max_resumes=0)))
    assert done.status == "partial" and done.reason == "max_resumes", done.reasons
    workflow = next(r for r in done.tasks if r.kind == "task")
    assert workflow.disposition == "missing"
    assert "the rest never reached the lead" in (workflow.reason or "")
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows["wf:k00"].disposition == "included"  # the lead read it in the notification
    assert rows["wf:k39"].disposition == "missing"
