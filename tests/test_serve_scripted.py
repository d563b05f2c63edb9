"""`teamlead serve-scripted`: its scenario list, its start message and its request log.

The start message's ``export`` line must be all a shell needs to run `teamlead ask`
against the server: the test pastes it, as a user would, and the run completes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._cli.demo import offline_exports, request_line
from teamlead.testing import ScriptedServer
from teamlead.testing.recorded import RecordedRequest
from teamlead.testing.scripts import SCENARIO_SUMMARIES, SCENARIOS, scenario

TEAMLEAD = [sys.executable, "-m", "teamlead"]


def test_list_shows_every_scenario_with_one_line_each() -> None:
    result = CliRunner().invoke(main, ["serve-scripted", "--list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == sorted(SCENARIOS)
    for line in lines:
        name = line.split()[0]
        assert line.split(None, 1)[1] == SCENARIO_SUMMARIES[name]


def test_every_scenario_has_a_summary() -> None:
    assert set(SCENARIO_SUMMARIES) == set(SCENARIOS)


def test_the_export_line_carries_every_variable_a_run_needs() -> None:
    line = offline_exports("http://127.0.0.1:8765")
    assert line.startswith("export ")
    values = dict(word.split("=", 1) for word in shlex.split(line)[1:])
    assert values["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8765"
    assert values["CLAUDE_CODE_MAX_RETRIES"] == "0"  # else a 429/529 scenario looks hung
    assert values["ANTHROPIC_API_KEY"] and values["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
    assert "127.0.0.1" in values["NO_PROXY"]


def test_each_answered_request_is_one_log_line() -> None:
    import anthropic

    records: list[RecordedRequest] = []
    with (
        ScriptedServer(scenario("broken"), on_request=records.append) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as client,
    ):
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "ping"}]
            )
        server.script = scenario("echo")
        client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "ping"}]
        )
    lines = [request_line(r, records[0].started) for r in records]
    assert len(lines) == 2
    assert re.fullmatch(r"\[ +0\.0s\] #0 other -> 500 fault 500 \(\d+\.\d\d s\)", lines[0])
    assert re.fullmatch(r"\[ +\d+\.\ds\] #1 other -> 200 text, 10 chars \(\d+\.\d\d s\)", lines[1])


@pytest.mark.cli
@pytest.mark.slow  # a server process and a real `teamlead ask` against it
@pytest.mark.timeout(180)
def test_the_printed_export_line_is_all_ask_needs(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [*TEAMLEAD, "serve-scripted", "--scenario", "rate-limited", "--log", "on"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        exports = ""
        for _ in range(3):
            line = server.stderr.readline()
            if line.startswith("export "):
                exports = line
                break
        assert exports, "no export line in the start message"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
        env.update(word.split("=", 1) for word in shlex.split(exports)[1:])
        home = tmp_path / "user"
        (home / ".claude").mkdir(parents=True)
        (tmp_path / "tmp").mkdir()
        env.update(
            HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude"), TMPDIR=str(tmp_path / "tmp")
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        ask = subprocess.run(
            [*TEAMLEAD, "ask", "Investigate.", "--quiet"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        server.terminate()
        _, log = server.communicate(timeout=10)
    assert ask.returncode == 0, ask.stderr
    assert "FINDING[agent-1]" in ask.stdout and "FINDING[agent-2]" in ask.stdout
    served = int(re.search(r"stopped after (\d+) requests", log).group(1))  # type: ignore[union-attr]
    logged = [line for line in log.splitlines() if re.match(r"\[ *\d+\.\ds\] #\d+ ", line)]
    assert len(logged) == served and served >= 4
    assert any("-> 429 fault 429" in line for line in logged)
    assert any("lead -> 200 tool_use Agent (2 calls)" in line for line in logged)
