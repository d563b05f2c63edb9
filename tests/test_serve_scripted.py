"""`teamlead serve-scripted`: its scenario list, its start message and its request log.

That the start message's ``export`` line is all a shell needs to run `teamlead ask`
against the server is checked on the real CLI, in tests/cli/test_serve_scripted.py.
"""

from __future__ import annotations

import re
import shlex

import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._cli.demo import offline_exports, request_line
from teamlead.testing import ScriptedServer
from teamlead.testing.recorded import RecordedRequest
from teamlead.testing.scripts import SCENARIO_SUMMARIES, SCENARIOS, scenario


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
