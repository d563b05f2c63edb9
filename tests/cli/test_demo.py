"""`teamlead demo` makes its point: a bare `claude_agent_sdk.query` on the same script, beside it.

It also reports the 529s as overloads (not 429s), explains the governor's limits, names
its cost as the estimate it is for a scripted model (nothing charged), and its live rows
show each agent's last tool.
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from teamlead._cli.demo import run_demo
from teamlead.events import EVENT_VERSION
from teamlead.testing.scripts import findings_in

from ..isolated import isolated_env
from .conftest import TEAMLEAD


@dataclass(frozen=True)
class DemoRun:
    """One demo's output, and what the machine's store of learnt limits held after it."""

    returncode: int
    stdout: str
    stderr: str
    stored_limits: list[object]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One `teamlead demo` as a user runs it (the demo, then the same script under a bare
    query: two CLI runs), read by each test of what it prints.

    It starts before any test's own isolation, so it isolates itself alike. It runs alone:
    how many synthesis turns the CLI injects (the 529s counted below) depends on the
    agents ending apart, which a second demo beside it on a busy machine can blur."""
    root = tmp_path_factory.mktemp("demo")
    env = isolated_env(root)
    proc = subprocess.run([*TEAMLEAD, "demo"], env=env, capture_output=True, text=True, timeout=240)
    # what the machine's store of learnt limits holds after the demo: `teamlead limits`
    stored = subprocess.run(
        [*TEAMLEAD, "limits", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    return DemoRun(proc.returncode, proc.stdout, proc.stderr, json.loads(stored.stdout))


@pytest.mark.cli
@pytest.mark.slow  # reads the shared demo run (demo_run)
@pytest.mark.timeout(300)
def test_demo_exits_0_with_every_finding(
    demo_run: DemoRun,
) -> None:
    proc = demo_run
    assert proc.returncode == 0, proc.stderr
    assert sorted(findings_in(proc.stdout)) == [
        "api-surface",
        "load-profile",
        "reviewer",
        "security",
    ]
    assert "resuming session" in proc.stderr and "waiting up to" in proc.stderr
    # the demo's scripted upstream taught the machine nothing a real run would read
    assert proc.stored_limits == []


@pytest.mark.cli
@pytest.mark.slow  # reads the shared demo run (demo_run)
@pytest.mark.timeout(300)
def test_the_demo_ends_with_a_bare_query_beside_teamleads_answer(
    demo_run: DemoRun,
) -> None:
    proc = demo_run
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    lines = err[err.index("the same script, two apps:") :].splitlines()
    bare, ours = lines[1], lines[2]
    assert bare.startswith("  bare claude_agent_sdk.query: raised ResultError (API Error: 529")
    assert "findings used 0 of 4;" in bare
    assert "answer: 'The agents are working; I will synthesize when they report.'" in bare
    assert ours.startswith("  teamlead.run:                completed after 1 resume(s);")
    assert "findings used 4 of 4: api-surface, security, load-profile, reviewer;" in ours
    # the 529s are overloads, and a scripted model's cost is an estimate, nothing charged
    assert "API 529 (overloaded) for claude-opus-5-5 (lead): passed on to the CLI" in err
    assert "3 overloaded (529) passed on" in err and "429/529" not in err
    assert "requests allowed in flight per model, as learnt: " in err
    assert "list-price estimate for a scripted model, nothing charged" in err
    assert "no cost" not in err


@pytest.mark.cli
@pytest.mark.timeout(180)
def test_the_live_rows_show_each_agents_last_tool(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(output="live", compare=False) == 0
    err = capsys.readouterr().err
    rows = {
        name: line
        for line in err.splitlines()
        for name in ("api-surface", "security")
        if name in line and "│" in line
    }
    assert "Glob" in rows["api-surface"] and "Grep" in rows["security"], err


@pytest.mark.cli
@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_json_and_quiet_demos_skip_the_comparison(flag: str) -> None:
    proc = subprocess.run([*TEAMLEAD, "demo", flag], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bare claude_agent_sdk.query" not in proc.stderr + proc.stdout
    if flag == "--quiet":  # stdout is the answer
        assert "FINDING[reviewer]" in proc.stdout
    else:  # --json: stdout is the run's NDJSON alone, ending in the one finished line
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        assert all(r["version"] == EVENT_VERSION for r in lines)
        assert [r["type"] for r in lines].count("finished") == 1
        assert lines[-1]["type"] == "finished" and lines[-1]["status"] == "completed"
        assert "reviewer" in findings_in(lines[-1]["result"])


def test_on_a_terminal_the_comparison_is_a_table_of_two_columns() -> None:
    from teamlead._cli.demo import BareOutcome, _print_comparison
    from teamlead.events import Finished

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    bare = BareOutcome(
        answer="Working on it.", error="ResultError (API Error: 529 Overloaded)", results=4
    )
    ours = Finished(
        status="completed",
        result="FINDING[security] and FINDING[reviewer]",
        session_id="s",
        resumes=1,
    )
    _print_comparison(bare, ours, out)
    screen = out.getvalue()
    header = next(line for line in screen.splitlines() if "bare claude_agent_sdk.query" in line)
    assert "teamlead.run" in header  # the two apps side by side, one column each
    assert "0 of 4" in screen and "2 of 4: security, reviewer" in screen


@pytest.mark.cli
@pytest.mark.timeout(180)
def test_ctrl_c_stops_the_demo_with_no_resume_hint_and_no_comparison() -> None:
    """Ctrl-C while the demo's agents run: the demo ends there (exit 130) with one honest
    line; no ``teamlead resume`` hint (its session and scripted model are gone with its
    directory), no bare run or comparison table after a run cut short, and nothing written
    to the machine's store of learnt limits, which real runs read."""
    lines: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    with subprocess.Popen(
        [*TEAMLEAD, "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)
        reader.start()
        try:
            while True:  # until an agent runs: the demo is well under way
                line = lines.get(timeout=120)
                err.append(line)
                if "task started:" in line:
                    break
            proc.send_signal(signal.SIGINT)
            out = proc.stdout.read()
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(timeout=10)
    while not lines.empty():
        err.append(lines.get_nowait())
    stderr = "".join(err)
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == (
        "teamlead: interrupted; nothing to resume (its session and scripted model are gone)"
    )
    assert "teamlead resume" not in stderr
    assert "bare claude_agent_sdk.query" not in stderr + out
    # what its relay learnt of the scripted model stayed in its process, cut short or not
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "teamlead" / "limits.sqlite3").exists()
