"""Every agent accounted for and governed, on the real CLI offline (issue 18).

The scripted server sends usage on every reply and records each request's headers, so a
test can say what every agent was sent and how many agents had a request in flight at once
(:meth:`ScriptedServer.max_concurrent_agents`). Workflow agents are told apart by their
prompt (``WFJOB``), Agent-tool agents by the prompt their Agent call gave them.
"""

from __future__ import annotations

import json
import stat
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import teamlead
from teamlead.events import EVENT_VERSION, AgentUsage
from teamlead.policy import SpawnPolicy
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import finding_text, findings_in

from ..skip_clock import SkipClock, skipping
from .conftest import OfflineFactory, ask, finished, run, run_on_a_client
from .scripted import Mixed, sent_usage

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def past_the_timeout(
    server: ScriptedServer,
    clock: SkipClock,
    done: str,
    hung: str,
    timeout_s: float,
    seen: list[Any],
) -> tuple[Callable[[], bool], Callable[[], float]]:
    """For :func:`skipping`: once ``done``'s requests have ended at the relay and
    ``hung``'s request is held open, the clock moves ``timeout_s`` on: past ``hung``'s
    timeout, not ``done``'s.

    Ended at the relay, not only at the server: the server has written its reply while
    the relay (on a loaded machine) may still be passing it on, and a request still in
    flight there when the clock moved on timed ``done`` out too. The relay tells each
    request's end with an ``agent_usage`` item of its agent, which the run yields
    (``seen``, the run's items so far)."""

    def requests_of(name: str) -> list[Any]:
        return [r for r in server.recorded() if f"JOB {name}" in r.request.first_user_text]

    def ready() -> bool:
        quick = requests_of(done)
        if not (quick and requests_of(hung)) or any(r.finished is None for r in quick):
            return False
        ended = Counter(i.agent_id for i in list(seen) if isinstance(i, AgentUsage))
        return all(ended[agent] >= n for agent, n in Counter(r.agent_id for r in quick).items())

    return ready, lambda: clock.monotonic() + timeout_s


def whole_file(path: Path) -> tuple[str, int]:
    return path.read_text(), stat.S_IMODE(path.stat().st_mode)


async def test_usage_per_agent_matches_what_the_server_sent(offline: OfflineFactory) -> None:
    inputs = {"alpha": 111, "beta": 222, "w1": 7}
    script = Mixed(["alpha", "beta"], ["w1", "w2"], delay=0.3, inputs=inputs)
    server, claude = offline(script)
    items = await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150))
    done = finished(items)
    sent = sent_usage(server)
    rows = {row.id: row for row in done.tasks}
    agents = [r for r in done.tasks if r.kind in ("task", "workflow_agent") and r.requests]
    assert {r.label for r in agents} >= {"alpha", "beta", "wf:w1", "wf:w2"}
    for agent_id, (inp, out) in sent.items():
        row = rows[agent_id]
        assert (row.tokens_in, row.tokens_out) == (inp, out), row
        assert row.requests == sum(1 for r in server.recorded() if r.agent_id == agent_id)
    assert rows[next(k for k, r in rows.items() if r.label == "alpha")].tokens_in == 111
    workflow_rows = [r for r in done.tasks if r.kind == "workflow_agent"]
    assert {r.label for r in workflow_rows} == {"wf:w1", "wf:w2"}
    assert all(r.parent and r.status == "completed" for r in workflow_rows)
    # the NDJSON stream carried the usage as it grew
    grown = [i for i in items if isinstance(i, AgentUsage) and i.agent_id in sent]
    assert {i.agent_id for i in grown} == set(sent)
    assert done.status == "completed", done.reasons


@pytest.mark.slow
async def test_the_cap_counts_agent_calls_and_workflow_agents_together(
    offline: OfflineFactory,
) -> None:
    # eight agents over 3 slots, each answering in 2 s: three always overlap
    script = Mixed(["a1", "a2", "a3", "a4"], ["w1", "w2", "w3", "w4"], delay=2.0)
    server, claude = offline(script)
    env = {"CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS": "8"}  # the user's, above the cap
    options = claude.options()
    options = type(options)(**{**options.__dict__, "env": {**options.env, **env}})
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(max_concurrent_agents=3))
    done = finished(await run(options, policy))
    assert server.max_concurrent_agents() == 3  # the cap, and no fewer
    labels = set(findings_in(done.result or ""))
    assert {"a1", "a2", "a3", "a4"} <= labels, done.result
    rows = [r for r in done.tasks if r.kind == "workflow_agent"]
    assert sorted(r.status for r in rows) == ["completed"] * 4
    assert done.status == "completed", done.reasons


async def test_a_hung_agent_ends_at_its_timeout_and_the_run_goes_on(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Mixed(["quick", "stuck"], delay=0.5, hang="stuck"))
    policy = teamlead.Policy(wait_s=5, deadline_s=300, spawn=SpawnPolicy(agent_timeout_s=4))
    clock, seen = SkipClock(), []
    items = run(claude.options(), policy, limit_s=120, clock=clock, into=seen)  # held 600 s
    done = finished(
        await skipping(clock, *past_the_timeout(server, clock, "quick", "stuck", 4, seen), items)
    )
    rows = {r.label: r for r in done.tasks if r.kind == "task"}
    assert rows["stuck"].status == "timeout"
    assert rows["quick"].status == "completed"
    assert done.status == "partial"
    assert "quick" in findings_in(done.result or "")
    # the lead was told which agent timed out, and to go on with the rest
    told = [
        r for r in server.recorded("lead") if "ran past its timeout of 4 s" in r.request.all_text
    ]
    assert told and "go on with the other" in told[-1].request.all_text


async def test_a_hung_agent_ends_at_its_timeout_on_a_client(offline: OfflineFactory) -> None:
    server, claude = offline(Mixed(["quick", "stuck"], delay=0.5, hang="stuck"))
    policy = teamlead.Policy(wait_s=5, deadline_s=300, spawn=SpawnPolicy(agent_timeout_s=4))
    clock, seen = SkipClock(), []
    # the stuck request is held open for 600 s
    items = await skipping(
        clock,
        *past_the_timeout(server, clock, "quick", "stuck", 4, seen),
        run_on_a_client(claude.options(), policy, 120, clock, into=seen),
    )
    done = finished(items)
    rows = {r.label: r for r in done.tasks if r.kind == "task"}
    assert rows["stuck"].status == "timeout" and rows["quick"].status == "completed"
    assert done.status == "partial"
    assert "quick" in findings_in(done.result or "")


@pytest.mark.slow
async def test_a_hung_workflow_agent_ends_at_its_timeout(offline: OfflineFactory) -> None:
    server, claude = offline(Mixed([], ["w1", "w2"], delay=0.5, hang="w2"))
    policy = teamlead.Policy(wait_s=5, deadline_s=300, spawn=SpawnPolicy(agent_timeout_s=4))
    clock, seen = SkipClock(), []
    items = run(claude.options(), policy, limit_s=120, clock=clock, into=seen)
    done = finished(
        await skipping(clock, *past_the_timeout(server, clock, "w1", "w2", 4, seen), items)
    )
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows["wf:w2"].status == "timeout" and rows["wf:w1"].status == "completed"
    assert done.status == "partial"


async def test_a_result_over_the_prompt_keeps_its_tail_on_the_real_cli(
    offline: OfflineFactory,
) -> None:
    long = "x" * 90_000 + " " + finding_text("deep") + " THE-END"  # over max_prompt_chars
    script = Mixed(["deep"], delay=0.5, answers={"deep": long})
    failed: list[int] = []

    def flaky(req: ScriptedRequest) -> Reply:
        # the synthesis turn after the notification fails once: teamlead quotes the result
        text = req.last_user_text
        if req.role == "lead" and "task-notification" in text and "<teamlead-results" not in text:
            failed.append(1)
            return Reply.error(400, message="synthesis failed")
        return script(req)

    server, claude = offline(flaky)
    done = finished(await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150)))
    resumed = [
        r for r in server.recorded("lead") if "<teamlead-results" in r.request.last_user_text
    ]
    assert failed and resumed, "teamlead never quoted the result"
    prompt = resumed[0].request.last_user_text
    assert "THE-END" in prompt and "characters cut here" in prompt
    row = next(r for r in done.tasks if r.label == "deep")
    assert row.result_file is not None and row.result_file in prompt
    assert whole_file(Path(row.result_file)) == (long, 0o600)  # the whole result, private


async def test_a_token_budget_stops_the_fan_out_and_wraps_up(offline: OfflineFactory) -> None:
    script = Mixed(
        ["cheap", "slow"],
        delay=0.5,
        delays={"slow": 60},
        inputs={"cheap": 5000},
        wrap_from_last=True,
    )
    server, claude = offline(script)
    policy = teamlead.Policy(wait_s=5, deadline_s=200, token_budget=4000)
    done = finished(await run(claude.options(), policy, limit_s=120))
    assert done.reason == "token_budget", done.reasons
    assert done.status == "partial"
    assert "cheap" in findings_in(done.result or "")
    rows = {r.label: r for r in done.tasks if r.kind == "task"}
    assert (rows["cheap"].status, rows["slow"].status) == ("completed", "stopped")


def test_ask_json_streams_agent_usage_and_rows_per_agent(tmp_path: Path) -> None:
    with ScriptedServer(Mixed(["alpha", "beta"], delay=0.3, inputs={"alpha": 300})) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = ask(claude, "--json", extra={"TEAMLEAD_AGENT_TIMEOUT": "120"})
        sent = sent_usage(server)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    usage = [r for r in lines if r["type"] == "agent_usage"]
    assert {r["agent_id"] for r in usage} >= set(sent)
    assert all(r["version"] == EVENT_VERSION for r in usage)
    finished_line = lines[-1]
    rows = {r["label"]: r for r in finished_line["tasks"] if r["kind"] == "task"}
    assert rows["alpha"]["tokens_in"] == 300 and rows["alpha"]["requests"] >= 1


class ToolFirst(Mixed):
    """As :class:`Mixed`, but each workflow agent first runs one (read-only) Bash command."""

    def __call__(self, req: ScriptedRequest) -> Reply:
        first = req.first_user_text
        if any(f"WFJOB {label}" in first for label in self.workflow) and not req.tool_uses_sent:
            return Reply.tools(ToolUse(name="Bash", input={"command": "echo probe"}))
        return super().__call__(req)


async def test_a_workflow_agents_last_tool_is_seen_at_the_relay(offline: OfflineFactory) -> None:
    server, claude = offline(ToolFirst([], ["w1"], delay=0.2))
    items = await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150))
    done = finished(items)
    assert done.status == "completed", done.reasons
    usage = [i for i in items if isinstance(i, AgentUsage) and i.kind == "workflow_agent"]
    assert [u.last_tool for u in usage] == [None, "Bash"]  # its second request showed the call
    lead = [i for i in items if isinstance(i, AgentUsage) and i.kind == "lead"]
    assert lead and all(u.last_tool is None for u in lead)
