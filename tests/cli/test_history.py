"""The run history on the real CLI offline: a plain ``teamlead ask`` whose output is thrown
away is kept, and ``teamlead ps --all``, ``show`` and ``view`` find it from new processes.

One run (a lead that fans out to two agents, whose synthesis turn fails once so that
teamlead resumes it) is made once for the module, in a world of its own; each test reads
the history it left with the verbs a user types.
"""

from __future__ import annotations

import json
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..browser import chromium_page, serving_view
from ..isolated import isolated_env, run_to_the_end
from .conftest import TEAMLEAD, OfflineFactory, ask

pytestmark = [pytest.mark.cli]

PROMPT = "Audit the parsers \x1b]0;pwned\x07 please."


@dataclass
class World:
    """The module's run: its environment and what its ``ask`` printed."""

    env: dict[str, str]
    history: Path
    done: subprocess.CompletedProcess[str]
    server: ScriptedServer

    def verb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_to_the_end([*TEAMLEAD, *args], timeout=60, env=self.env)

    def ps_all(self) -> list[dict[str, Any]]:
        done = self.verb("ps", "--all", "--json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert isinstance(rows, list)
        return rows


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("history")
    script = FanOut.of(2, delays=0.2, synthesis_fault=Reply.error(529))
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        env = isolated_env(root)
        done = ask(claude, "--quiet", prompt=PROMPT, base=env, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        yield World(env, root / "history", done, server)


def test_a_plain_ask_is_listed_by_ps_all_from_a_new_process(world: World) -> None:
    rows = world.ps_all()
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "completed"
    assert row["finished"] is True
    assert row["session_id"] and len(row["session_id"]) == 36
    assert row["answer"] == world.done.stdout.strip()
    assert row["agents"] == {"running": 0, "queued": 0, "done": 2, "failed": 0}


def test_ps_without_all_lists_only_running_runs(world: World) -> None:
    done = world.verb("ps", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])


def test_ps_quiet_prints_the_ids_only(world: World) -> None:
    done = world.verb("ps", "-a", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [world.ps_all()[0]["run"]]


def test_ps_filter_keeps_the_runs_of_a_status_and_age(world: World) -> None:
    run = world.ps_all()[0]["run"]
    assert world.verb("ps", "-aq", "--filter", "status=completed").stdout.split() == [run]
    assert world.verb("ps", "-aq", "--filter", "status=failed").stdout.split() == []
    assert world.verb("ps", "-aq", "--filter", "since=1h").stdout.split() == [run]
    assert world.verb("ps", "-aq", "--filter", "since=2999-01-01").stdout.split() == []


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("colour=red", "--filter 'colour' is not a filter: give status=STATUS or since="),
        ("status", "--filter 'status' is not KEY=VALUE: give status=STATUS or since="),
        ("since=yesterday", "--filter since='yesterday' is neither an age nor a date"),
        ("status=complete", "--filter status='complete' is no status: give one of completed, "),
    ],
)
def test_a_bad_filter_is_one_line_and_exit_2(world: World, given: str, said: str) -> None:
    done = world.verb("ps", "-a", "--filter", given)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert said in done.stderr


def test_show_prints_the_prompt_the_answer_and_each_agents_prompt_and_result(
    world: World,
) -> None:
    run = world.ps_all()[0]["run"]
    done = world.verb("show", run[:6])
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert f"run {run}: completed (all_results_used)" in text
    assert "Audit the parsers \\x1b]0;pwned\\x07 please." in text  # escaped, never raw
    assert "\x1b" not in text
    assert world.done.stdout.strip().splitlines()[0] in text
    assert "agents (2):" in text
    data = json.loads(world.verb("show", run, "--json").stdout)
    assert data["prompt"] == PROMPT
    assert data["result"] == world.done.stdout.strip()
    assert data["reason"] == "all_results_used"
    agents = sorted(data["agents"], key=lambda a: a["description"])
    assert [a["status"] for a in agents] == ["completed", "completed"]
    for n, agent in enumerate(agents, 1):  # its prompt as the lead wrote it, its result
        assert agent["prompt"] == f"SUBTASK-{n}: investigate part {n} and report one finding."
        assert agent["result"].startswith(f"FINDING[agent-{n}]")


def test_show_of_an_unknown_run_is_one_line(world: World) -> None:
    done = world.verb("show", "0123456789ab")
    assert done.returncode == 4
    assert done.stderr.splitlines() == [
        "teamlead: error: no run '0123456789ab' in the history (see `teamlead ps --all`)"
    ]


def test_the_record_is_private_in_a_private_directory(world: World) -> None:
    assert stat.S_IMODE(world.history.stat().st_mode) == 0o700
    (record,) = world.history.glob("*.json")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert json.loads(record.read_text())["version"] == 1


def test_the_view_shows_the_finished_run_with_its_prompt_and_answer(world: World) -> None:
    run = world.ps_all()[0]["run"]
    answer = world.done.stdout.strip()
    with serving_view(world.env) as url, chromium_page(url) as page:
        row = page.locator(f'#runs tr[data-run="{run}"]')
        row.wait_for(timeout=30_000)
        assert row.locator(".status").text_content() == "completed"
        row.locator('button[data-op="detail"]').click()
        prompt = page.locator("#detail-prompt")
        prompt.wait_for(timeout=30_000)
        # the page shows control characters escaped, as the terminal does
        assert prompt.text_content() == "Audit the parsers \\x1b]0;pwned\\x07 please."
        assert page.locator("#detail-answer").text_content() == answer
        agents = page.locator("#tree li[data-kind='task']")
        assert agents.count() == 2
        first = agents.first
        first.locator("summary").first.click()
        shown = first.locator(".result").first.text_content() or ""
        assert shown.startswith("FINDING[")


def test_ask_no_history_keeps_nothing(offline: OfflineFactory, tmp_path: Path) -> None:
    _, claude = offline(FanOut.of(1, delays=0.1))
    done = ask(claude, "--no-history", "--quiet", stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (0, "")
    assert not (tmp_path / "history").exists()
    listed = run_to_the_end([*TEAMLEAD, "ps", "-aq"], timeout=60)
    assert (listed.returncode, listed.stdout) == (0, "")
