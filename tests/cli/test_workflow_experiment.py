"""An experiment's trial records count a workflow's agents, on the real CLI offline.

Under the delegation prompt the scripted lead runs a 4-agent workflow (one agent's request
gets a 529 the CLI does not retry: it is lost); under the baseline it answers alone. The
variant's cap of 2 bounds how many of the workflow's agents run at once.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from teamlead._cli.progress import report_for
from teamlead.experiment.running.runner import RunSummary, run_experiment
from teamlead.experiment.specs.records import read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import synthesize, workflow_script

pytestmark = [pytest.mark.cli, pytest.mark.slow]

MARKER = "# Delegation strategy"
SPEC = "\n".join(
    [
        "[experiment]",
        'name = "wf"',
        "trials = 1",
        "concurrency = 1",
        'control = "baseline"',
        "[[variants]]",
        'name = "baseline"',
        'strategy = "baseline"',
        "[[variants]]",
        'name = "workflows"',
        'strategy = "delegation"',
        "spawn = { max_concurrent_agents = 2 }",
        "[[tasks]]",
        'id = "t"',
        'prompt = "Scan the four parts."',
    ]
)


def script(req: ScriptedRequest) -> Reply:
    first = req.first_user_text
    if "WFJOB w4" in first:
        return Reply.error(529, should_retry=False)  # retried by nobody: the agent ends in error
    if "WFJOB" in first:
        return Reply.text("FINDING[" + first.split("WFJOB ")[1][:2] + "]", delay=1.0)
    if req.role != "lead":
        return Reply.text("ok")
    if MARKER in req.system and req.assistant_turns == 0:
        labels = ["w1", "w2", "w3", "w4"]
        call = ToolUse(id="toolu_wf", name="Workflow", input={"script": workflow_script(labels)})
        return Reply.tools(call)
    return synthesize(req)


def test_trial_records_count_workflow_agents_and_the_report_shows_them(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")

        async def experiment() -> RunSummary:
            with anyio.fail_after(240):
                return await run_experiment(spec, tmp_path / "out", base_options=claude.options())

        summary = anyio.run(experiment)
        peak = server.max_concurrent_agents()
    assert summary.ran == 2
    records = {r.variant: r for r in read_records(tmp_path / "out" / "trials.jsonl").records}
    plain, wf = records["baseline"], records["workflows"]
    assert (plain.workflow_agents, plain.delegated, plain.parallel) == (0, False, False)
    assert wf.agent_calls == 0 and wf.delegated and wf.parallel
    assert plain.time_to_first_agent_s is None
    # the lead's Workflow call is its first delegation
    assert wf.time_to_first_agent_s is not None and 0 <= wf.time_to_first_agent_s < wf.wall_s
    assert (wf.workflow_agents, wf.workflow_agents_lost, wf.workflow_agents_cached) == (4, 1, 0)
    assert wf.workflow_agents_at_once == 2 == peak  # the variant's cap, as the server saw it
    assert wf.agents_at_once == 2
    report, _, _ = report_for(tmp_path / "out", control="baseline", seed=1, json_=True, plots=False)
    shown = report.to_json()["variants"]["workflows"]["workflow_agents"]
    assert (shown["started"], shown["most_at_once"], shown["lost"]) == (4, 2, 1)
