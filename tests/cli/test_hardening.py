"""On the real CLI: a stop signal to ``experiment run`` leaves no CLI child behind, and no
output carries a secret (a stop signal to ``ask`` is in ``test_stop_signals.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions

from teamlead.experiment.running.runner import run_experiment
from teamlead.experiment.specs.records import read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.policy import Policy
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..isolated import isolated_env, side_by_side
from ..polling import poll
from ..records import ab_spec
from .conftest import TEAMLEAD, ask, cli_processes

SPEC = ab_spec(
    1, 1, concurrency=2, name="sig", seed=1, task_id="t", prompt="Investigate.", rubric="r"
)


def _stop_and_check(proc: subprocess.Popen[str], sig: signal.Signals, state: Path) -> str:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert poll(lambda: not cli_processes(state), within_s=5), [
        p.cmdline() for p in cli_processes(state)
    ]
    return err


@pytest.mark.cli
@pytest.mark.timeout(180)
def test_sigterm_to_experiment_run_leaves_no_cli_child(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    with ScriptedServer(FanOut.of(2, delays=30.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = subprocess.Popen(
            [*TEAMLEAD, "experiment", "run", str(spec), "--out", str(out), "-q"],
            env={**os.environ, **claude.env},
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert poll(lambda: len(server.recorded("subagent")) >= 2, within_s=60), "no trial started"
        assert cli_processes(tmp_path / "s")
        err = _stop_and_check(proc, signal.SIGTERM, tmp_path / "s")
    assert "interrupted; finished trials are kept in" in err
    # the lock is released: the out dir can be taken again
    from teamlead.experiment.running.outdir import OutDir

    with OutDir(out):
        pass


SECRET = "sk-ant-offline-test-key"  # the key OfflineClaude gives the CLI


MODES = ("plain", "--json")


def _asked_for_the_key(mode: str, root: Path) -> subprocess.CompletedProcess[str]:
    def script(req: ScriptedRequest) -> Reply:
        return Reply.text(f"Your key is {SECRET}. Done.")

    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        assert claude.env["ANTHROPIC_API_KEY"] == SECRET
        args = [mode] if mode != "plain" else []
        return ask(claude, *args, prompt="What is my key?", base=isolated_env(root), timeout=90)


@pytest.fixture(scope="module")
def key_asks(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """One `ask` per output mode, side by side: each its own process, state and model."""
    return side_by_side(_asked_for_the_key, MODES, tmp_path_factory, root_name=lambda _: "key")


@pytest.mark.cli
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES)
def test_an_api_key_echoed_by_the_model_is_redacted(
    key_asks: dict[str, subprocess.CompletedProcess[str]], mode: str
) -> None:
    proc = key_asks[mode]
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    assert "Your key is [redacted]" in proc.stdout
    if mode == "--json":
        finished = json.loads(proc.stdout.splitlines()[-1])
        assert finished["type"] == "finished" and "[redacted]" in finished["result"]


class _Echoes:
    """A scripted ``query_fn`` whose answer echoes the key it was given in ``options.env``."""

    async def __call__(self, *, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        session = str(options.session_id)
        yield {"type": "system", "subtype": "init", "session_id": session, "cwd": "/"}
        yield {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": f"key {options.env['ANTHROPIC_API_KEY']}",
            "session_id": session,
            "num_turns": 1,
            "total_cost_usd": 0.0,
            "api_error_status": None,
        }


def test_trials_jsonl_final_text_is_redacted(tmp_path: Path) -> None:
    secret = "sk-ant-given-to-the-child-only"
    spec = parse_spec(SPEC)
    base = ClaudeAgentOptions(env={"ANTHROPIC_API_KEY": secret})
    summary = anyio.run(
        lambda: run_experiment(
            spec, tmp_path / "out", base_options=base, query_fn=_Echoes(), policy=Policy()
        )
    )
    assert summary.ran == 2
    text = (tmp_path / "out" / "trials.jsonl").read_text()
    assert secret not in text
    assert [r.final_text for r in read_records(tmp_path / "out" / "trials.jsonl").records] == [
        "key [redacted]"
    ] * 2
