"""OpenTelemetry on the real CLI offline: ``teamlead ask`` exporting to a real receiver.

Each run is a fresh ``teamlead ask --json`` process configured only by the standard
``OTEL_*`` variables, exporting with the SDK's OTLP/HTTP exporter to the test bed's
receiver, which decodes the protobuf that arrived. The deadline's wrap-up runs in this
process instead, on a clock held until its scene is set, with a process state of its own
(so its providers, built from the same variables, are its own, and closed at its end).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead import Finished, Policy, ProcessState
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer, ToolUse
from teamlead.testing.otlp import OtlpReceiver, dead_endpoint, otlp_env
from teamlead.testing.scripts import FanOut, findings_in

from ..skip_clock import SkipClock, holding
from .conftest import ask
from .scripted import one_done_one_running, wrap_up_answers

pytestmark = pytest.mark.cli

AGENTS = 3
ROOT = "invoke_agent teamlead"


def untraced() -> dict[str, str]:
    """This test's environment with no ``OTEL_`` setting or trace context of its own: a run
    exports as the variables a test gives it say, and nothing else."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACE"))}


def ask_exporting(claude: OfflineClaude, env: dict[str, str], timeout: float = 120) -> Any:
    """``teamlead ask --json --wait 5`` on ``claude``'s scripted model, exporting as ``env``
    says."""
    return ask(claude, "--json", "--wait", "5", base=untraced(), extra=env, timeout=timeout)


def finished(proc: Any, exit_code: int = 0) -> dict[str, Any]:
    assert proc.returncode == exit_code, proc.stderr
    last: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert last["type"] == "finished"
    return last


def test_a_fan_out_is_one_trace_a_root_and_an_agent_span_per_subagent(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver, ScriptedServer(FanOut.of(AGENTS, delays=0.3)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        # Claude Code's own spans too: they must nest under the run (TRACEPARENT)
        env = receiver.env(
            CLAUDE_CODE_ENABLE_TELEMETRY="1",
            CLAUDE_CODE_ENHANCED_TELEMETRY_BETA="1",  # Claude Code's traces are in beta
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_LOGS_EXPORTER="none",
        )
        done = finished(ask_exporting(claude, env))
        key = claude.env["ANTHROPIC_API_KEY"]
        spans = receiver.wait_for_spans(lambda got: any(s.name == ROOT for s in got))
        served = server.recorded()
    assert done["status"] == "completed"
    assert sorted(findings_in(done["result"])) == [f"agent-{n}" for n in range(1, AGENTS + 1)]
    (root,) = [s for s in spans if s.name == ROOT]
    assert root.parent_span_id == ""
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert root.resource["service.name"] == "teamlead-test"
    assert root.attributes["gen_ai.provider.name"] == "anthropic"
    assert root.attributes["gen_ai.conversation.id"] == done["session_id"]
    assert root.attributes["teamlead.status"] == "completed"
    assert root.attributes["teamlead.reason"] == "all_results_used"
    assert root.attributes["teamlead.strategy"] == "delegation"  # ask's default
    # one agent span per subagent, under the run, with the usage the server sent
    agents = [
        s for s in spans if s.name.startswith("invoke_agent agent-") and s.scope == "teamlead"
    ]
    assert sorted(s.attributes["gen_ai.agent.name"] for s in agents) == [
        f"agent-{n}" for n in range(1, AGENTS + 1)
    ]
    task_ids = {t["id"] for t in done["tasks"]}
    assert {s.attributes["gen_ai.agent.id"] for s in agents} == task_ids
    for agent in agents:
        assert agent.parent_span_id == root.span_id
        assert agent.attributes["teamlead.agent.status"] == "completed"
        name = agent.attributes["gen_ai.agent.name"]
        sent = [r for r in served if r.request.agent and r.request.agent.description == name]
        assert agent.attributes["gen_ai.usage.input_tokens"] == sum(
            r.reply.input_tokens for r in sent if r.reply is not None
        )
        assert agent.attributes["gen_ai.usage.output_tokens"] > 0
    # a chat span per request, each under its agent (or the run, for the lead's)
    ours = [s for s in spans if s.scope == "teamlead"]
    chats = [s for s in ours if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == len([r for r in served if r.status == 200])
    by_id = {s.span_id: s for s in spans}
    for chat in chats:
        parent = by_id[chat.parent_span_id]
        assert parent.attributes.get("gen_ai.agent.id") == chat.attributes.get("gen_ai.agent.id")
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats
    )
    # Claude Code's own spans are in the same trace, under the run
    claude_code = [s for s in spans if s.name.startswith("claude_code.")]
    assert claude_code, "the CLI exported no span of its own"
    tops = [s for s in claude_code if s.parent_span_id not in {c.span_id for c in claude_code}]
    assert tops and all(s.parent_span_id == root.span_id for s in tops)
    # the API key is nowhere in what was exported; no metric has an id among its labels
    assert not any(key.encode() in body for body in receiver.bodies())
    points = receiver.points()
    assert {p.metric for p in points} >= {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
    }
    ids = {"gen_ai.agent.id", "gen_ai.conversation.id", "gen_ai.response.id"}
    assert all(not ids & p.attributes.keys() for p in points)


def test_a_relayed_429_is_an_event_of_its_request(tmp_path: Path) -> None:
    with (
        OtlpReceiver() as receiver,
        ScriptedServer(
            FanOut.of(AGENTS, delays=0.4),
            concurrency_limit=1,
            retry_after=1,
            limit_roles={"subagent"},
        ) as server,
    ):
        claude = OfflineClaude(
            server.base_url,
            state_dir=tmp_path / "s",
            max_retries=0,
            env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(AGENTS)},
        )
        done = finished(ask_exporting(claude, receiver.env()))
        spans = receiver.wait_for_spans(lambda got: any(s.name == ROOT for s in got))
        rejected = sum(1 for r in server.recorded() if r.status == 429)
    assert done["status"] == "completed" and rejected >= 1
    events = [
        (chat, e)
        for chat in spans
        if chat.attributes.get("gen_ai.operation.name") == "chat" and chat.scope == "teamlead"
        for e in chat.events
        if e.name == "rate_limited"
    ]
    assert len(events) == rejected == done["relay"]["absorbed"]
    for chat, event in events:
        assert event.attributes["teamlead.outcome"] == "absorbed"
        assert event.attributes["teamlead.retry_after_s"] == 1.0
        assert chat.attributes["teamlead.relay.attempts"] >= 2
        assert chat.attributes["teamlead.relay.wait_s"] > 0
        assert chat.attributes["teamlead.role"] == "subagent"
    (root,) = [s for s in spans if s.name == ROOT]
    assert root.attributes["teamlead.relay.absorbed"] == rejected
    assert any(e.name == "concurrency_changed" for e in root.events)
    limits = [p for p in receiver.points() if p.metric == "teamlead.governor.limit"]
    assert (
        limits
        and limits[-1].value == 1
        and limits[-1].attributes == {"teamlead.bucket": "anthropic/claude-opus-5-5"}
    )


UNSET_RUN = """
import json, sys, anyio, teamlead
from teamlead.testing import OfflineClaude

async def main():
    claude = OfflineClaude(sys.argv[1], state_dir=sys.argv[2])
    items = [i async for i in teamlead.run("Investigate.", claude.options())]
    return items[-1]

done = anyio.run(main)
costly = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto")
print(json.dumps({"status": done.status,
                  "loaded": sorted(m for m in sys.modules if m.startswith(costly))}))
"""


def test_with_the_variables_unset_nothing_is_exported_or_imported(tmp_path: Path) -> None:
    """No exporter is even imported, so nothing can be exported (a receiver on a port of
    its own would prove nothing: no exporter sends there unless told to)."""
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        base["OTEL_SERVICE_NAME"] = "unused"  # a name alone asks for no export
        proc = subprocess.run(
            [sys.executable, "-c", UNSET_RUN, server.base_url, str(tmp_path / "s")],
            env=base,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"status": "completed", "loaded": []}


def test_console_exporters_leave_stdout_to_the_ndjson_and_the_answer(tmp_path: Path) -> None:
    """With ``console`` exporters, spans and metrics go to stderr: ``--json``'s stdout is
    NDJSON and nothing else, and ``-q``'s is the answer and nothing else."""
    console = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    runs = {}
    for mode in ("--json", "-q"):
        with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
            claude = OfflineClaude(server.base_url, state_dir=tmp_path / mode.strip("-"))
            runs[mode] = ask(
                claude, mode, "--wait", "5", base=untraced(), extra=console, timeout=120
            )
    as_json, quiet = runs["--json"], runs["-q"]
    assert as_json.returncode == 0 and quiet.returncode == 0, as_json.stderr + quiet.stderr
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert all(isinstance(r.get("type"), str) for r in lines) and lines[-1]["type"] == "finished"
    assert sorted(findings_in(quiet.stdout)) == ["agent-1", "agent-2"]
    assert quiet.stdout.startswith("SYNTHESIS") and quiet.stdout.count("\n") == 1
    for proc in (as_json, quiet):  # the spans were written, to stderr
        assert f'"name": "{ROOT}"' in proc.stderr and '"trace_id"' in proc.stderr


def test_a_dead_collector_never_fails_or_holds_the_run(tmp_path: Path) -> None:
    """Every export is refused. The exporter's own timeout is short here so that the exit's
    flush gives up on its own; the bound on that flush, when the exporter would wait longer,
    is the stalled collector's test below."""
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        done = finished(
            ask_exporting(claude, otlp_env(dead_endpoint(), OTEL_EXPORTER_OTLP_TIMEOUT="0.5"))
        )
    assert done["status"] == "completed"
    assert sorted(findings_in(done["result"])) == ["agent-1", "agent-2"]


def test_a_stalled_collector_never_holds_the_run_past_the_exit_flush(tmp_path: Path) -> None:
    """The collector takes every export request and never answers, and the exporter would
    wait 60 s for each: the run still ends, and the process exits within the test's own
    timeout, because the exit's flush is bounded (a few seconds) and export runs in the
    background."""
    with OtlpReceiver(stall=True) as receiver, ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = receiver.env(OTEL_EXPORTER_OTLP_TIMEOUT="60", OTEL_BSP_SCHEDULE_DELAY="50")
        done = finished(ask_exporting(claude, env, timeout=50))
        assert receiver.requests >= 1  # export was tried, and it hung
    assert done["status"] == "completed"


EXPERIMENT_RUN = """
import sys, anyio
from pathlib import Path
from teamlead.experiment.running.runner import run_experiment
from teamlead.experiment.specs.spec import parse_spec
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer, ToolUse
from teamlead.testing.scripts import FanOut

spec = parse_spec('''
[experiment]
name = "ab"
trials = 1
control = "baseline"
[[variants]]
name = "baseline"
strategy = "baseline"
[[variants]]
name = "delegation"
strategy = "delegation"
[[tasks]]
id = "t1"
prompt = "Research."
rubric = "mentions parts"
''')
out = Path(sys.argv[1])
with ScriptedServer(FanOut.of(1, delays=0.1)) as server:
    claude = OfflineClaude(server.base_url, state_dir=out / "s")
    summary = anyio.run(lambda: run_experiment(spec, out / "out", base_options=claude.options()))
print(summary.ran, summary.failed)
"""


def test_an_experiment_gives_one_trace_per_trial_with_its_keys(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACE"))}
        proc = subprocess.run(
            [sys.executable, "-c", EXPERIMENT_RUN, str(tmp_path)],
            env={**base, **receiver.env()},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr
        spans = receiver.wait_for_spans(
            lambda got: len([s for s in got if s.name == "teamlead.trial"]) == 2
        )
    assert proc.stdout.split() == ["2", "0"]
    trials = [s for s in spans if s.name == "teamlead.trial"]
    assert sorted(s.attributes["teamlead.variant"] for s in trials) == ["baseline", "delegation"]
    assert len({s.trace_id for s in trials}) == 2  # one trace each
    for trial in trials:
        assert trial.parent_span_id == ""
        assert (trial.attributes["teamlead.task"], trial.attributes["teamlead.trial"]) == ("t1", 0)
        (run,) = [s for s in spans if s.name == ROOT and s.trace_id == trial.trace_id]
        assert run.parent_span_id == trial.span_id
        assert run.attributes["teamlead.variant"] == trial.attributes["teamlead.variant"]
        assert run.attributes["teamlead.strategy"] == trial.attributes["teamlead.strategy"]


WORKFLOW = "\n".join(
    [
        "export const meta = { name: 'probe', description: 'probe workflow',"
        " phases: [{ title: 'Scan' }] }",
        "const keys = ['a', 'b', 'c']",
        "const r = await parallel(keys.map(k => () =>"
        " agent(`WFJOB ${k}`, { label: `scan:${k}`, phase: 'Scan' })))",
        "return { r, n: r.length }",
    ]
)


def workflow_lead(req: ScriptedRequest) -> Reply:
    """A lead that runs a 3-agent workflow; each workflow agent answers one finding."""
    if "WFJOB" in req.first_user_text:
        return Reply.text(f"FINDING[{req.first_user_text.split('WFJOB')[1].split()[0]}]")
    if req.assistant_turns == 0:
        return Reply.tools(ToolUse("Workflow", {"script": WORKFLOW}))
    return Reply.text("SYNTHESIS done")


def test_a_workflows_agents_appear_by_the_agent_id_of_their_requests(tmp_path: Path) -> None:
    """Workflow agents never show in the stream; the relay names each by the agent id its
    requests carry, so each is an agent span with its requests and usage, and the run's rows
    give it its label and its place: under its workflow's span."""
    with OtlpReceiver() as receiver, ScriptedServer(workflow_lead) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = ask(
            claude, "--json", "--allowed-tools", "Workflow",
            prompt="Run the probe.", base=untraced(), extra=receiver.env(), timeout=120,
        )  # fmt: skip
        done = finished(proc)
        spans = receiver.wait_for_spans(lambda got: any(s.name == ROOT for s in got))
        by_agent: dict[str, int] = {}
        for r in server.recorded():
            agent = next((v for k, v in r.headers if k.lower() == "x-claude-code-agent-id"), None)
            if agent and r.reply is not None:
                by_agent[agent] = by_agent.get(agent, 0) + r.reply.input_tokens
    assert done["status"] == "completed" and len(by_agent) == 3
    (root,) = [s for s in spans if s.name == ROOT]
    (workflow,) = [s for s in spans if s.name.startswith("invoke_workflow")]
    assert workflow.parent_span_id == root.span_id
    assert workflow.attributes["teamlead.agent.status"] == "completed"
    agents = {
        s.attributes["gen_ai.agent.id"]: s
        for s in spans
        if s.attributes.get("teamlead.agent.kind") == "workflow_agent"
    }
    assert set(agents) == set(by_agent)
    # each named by its label, as its row in Finished.tasks is
    labels = {r["id"]: r["label"] for r in done["tasks"] if r["kind"] == "workflow_agent"}
    assert {s.name for s in agents.values()} == {
        "invoke_agent scan:a",
        "invoke_agent scan:b",
        "invoke_agent scan:c",
    }
    assert all(s.attributes["gen_ai.agent.name"] == labels[a] for a, s in agents.items())
    for agent_id, span in agents.items():
        assert span.trace_id == root.trace_id and span.parent_span_id == workflow.span_id
        assert span.attributes["gen_ai.usage.input_tokens"] == by_agent[agent_id]
        chats = [s for s in spans if s.parent_span_id == span.span_id]
        assert chats and all(c.attributes["gen_ai.agent.id"] == agent_id for c in chats)


CLIENT_RUN = """
import json, sys, anyio, teamlead
from claude_agent_sdk import ClaudeSDKClient
from teamlead.testing import OfflineClaude

async def main():
    claude = OfflineClaude(sys.argv[1], state_dir=sys.argv[2])
    policy = teamlead.Policy(wait_s=5)
    async with teamlead.ClientRun(claude.options(), policy) as run:
        async with ClaudeSDKClient(options=run.options) as client:
            await client.query("Investigate.")
            async for item in teamlead.receive_all(client, run):
                if isinstance(item, teamlead.Finished):
                    return item  # an app that stops reading at Finished

done = anyio.run(main)
print(json.dumps({"status": done.status, "session_id": done.session_id}))
"""


def test_a_client_run_gets_the_same_spans(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver, ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACE"))}
        proc = subprocess.run(
            [sys.executable, "-c", CLIENT_RUN, server.base_url, str(tmp_path / "s")],
            env={**base, **receiver.env()},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        spans = receiver.wait_for_spans(lambda got: any(s.name == ROOT for s in got))
    done = json.loads(proc.stdout)
    (root,) = [s for s in spans if s.name == ROOT]
    assert root.attributes["teamlead.mode"] == "client"
    assert root.attributes["teamlead.status"] == done["status"] == "completed"
    assert not root.error  # stopping at Finished is not a failure
    assert root.attributes["gen_ai.conversation.id"] == done["session_id"]
    agents = [s for s in spans if s.name.startswith("invoke_agent agent-")]
    assert len(agents) == 2 and all(a.parent_span_id == root.span_id for a in agents)
    assert all(a.attributes["gen_ai.usage.input_tokens"] > 0 for a in agents)  # relayed


SLOW_FAN = FanOut.of(2, delays=[0.3, 40.0])


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_the_deadlines_wrap_up_is_a_phase_and_the_stopped_agent_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process, on a clock held until agent-1 is done and agent-2 runs: an `ask`
    # process's clock would spend the deadline on a slow CLI start (agent-1 then stopped
    # too), this one spends none of it; from the release on it runs in real time
    for name in [k for k in os.environ if k.startswith(("OTEL_", "TRACE"))]:
        monkeypatch.delenv(name)
    clock = SkipClock(held=True)
    items: list[Any] = []
    with OtlpReceiver() as receiver, ScriptedServer(wrap_up_answers(SLOW_FAN)) as server:
        for name, value in receiver.env().items():
            monkeypatch.setenv(name, value)
        world = ProcessState(registry=False)  # its own providers, built from these variables
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")

        async def collect() -> None:
            with anyio.fail_after(120):
                policy = Policy(deadline_s=8)  # the reserve is half: 4 s on each side
                run = teamlead.run(
                    "Investigate.", claude.options(), policy=policy, clock=clock, process=world
                )
                items.extend([item async for item in run])

        try:
            scene = functools.partial(one_done_one_running, server, "agent-1", "agent-2")
            _, ready = await holding(clock, scene, collect())
        finally:
            world.telemetry.close()  # flushed: every span has been sent
        assert ready, "agent-1 never finished while agent-2 ran"
        spans = receiver.wait_for_spans(lambda got: any(s.name == ROOT for s in got))
    done = items[-1]
    assert isinstance(done, Finished)
    assert (done.status, done.reason) == ("partial", "deadline"), done.reasons
    (root,) = [s for s in spans if s.name == ROOT]
    assert (root.attributes["teamlead.status"], root.attributes["teamlead.reason"]) == (
        "partial",
        "deadline",
    )
    phases = sorted((s for s in spans if s.name.startswith("teamlead.")), key=lambda s: s.start_ns)
    assert [s.name for s in phases][0] == "teamlead.round"
    assert [s.name for s in phases][-1] == "teamlead.wrap_up"
    status = {
        s.attributes["gen_ai.agent.name"]: s.attributes["teamlead.agent.status"]
        for s in spans
        if s.name.startswith("invoke_agent agent-")
    }
    assert status == {"agent-1": "completed", "agent-2": "stopped"}
