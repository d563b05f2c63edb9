"""``teamlead view`` on real runs, in a real headless Chromium (the system's, driven by
Playwright): a live ``teamlead ask`` against the scripted server, whose agent tree the page
follows as its agents progress and whose governor cut its limit (the chart), and a finished
workflow run opened from its NDJSON log, read-only.

The live run's first agent has a hostile description, which the page must show as text.
Each page keeps a screenshot in the test's temp directory (printed as ``screenshot:``).
"""

from __future__ import annotations

import http.client
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from teamlead.testing import AgentCall, OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, WorkflowFanOut

from ..browser import chromium_page, serving_view
from ..isolated import isolated_env
from .conftest import TEAMLEAD, ask, ask_env, end_ask, start_ask

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.cli, pytest.mark.slow]

HOSTILE = '<img src=x onerror="window.pwned=1"><b>agent-1</b>&amp;'


def _shot(page: Page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def _agent(page: Page, label: str, state: str | None) -> Any:
    """The tree's node of the agent labelled ``label`` once it is in ``state`` (any state:
    ``None``)."""
    where = f'[data-state="{state}"]' if state is not None else ""
    node = page.locator(f'#tree li[data-kind="agent"]{where}').filter(
        has=page.locator(".label", has_text=label)
    )
    node.first.wait_for(timeout=90_000)
    return node.first


def test_the_page_follows_a_live_runs_agent_tree_and_draws_its_governors_limit(
    tmp_path: Path,
) -> None:
    calls = [
        AgentCall(description=HOSTILE, prompt="SUBTASK-1: investigate part 1."),
        AgentCall(description="agent-2", prompt="SUBTASK-2: investigate part 2."),
        AgentCall(description="agent-3", prompt="SUBTASK-3: investigate part 3."),
    ]
    script = FanOut(agents=calls, delays={HOSTILE: 2.0, "agent-2": 4.0, "agent-3": 60.0})
    # an account that takes two requests at once: the lead and three agents meet 429s,
    # and the governor cuts its limit (the chart's line)
    server = ScriptedServer(script, concurrency_limit=2, retry_after=0.5).start()
    claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
    env = ask_env(claude, isolated_env(tmp_path))
    run = start_ask(claude, "--json", base=env)
    try:
        with serving_view(env) as url, chromium_page(url) as page:
            # the only run is picked by itself: its tree grows as the agents start (the
            # 2 s one may be done already when a loaded machine first draws the page)
            first = _agent(page, HOSTILE, None)
            assert first.locator(".label").first.inner_text() == HOSTILE
            _agent(page, "agent-3", "running")
            assert page.locator('#tree li[data-kind="lead"]').count() == 1
            # the first two finish while the third goes on
            done = _agent(page, HOSTILE, "done")
            _agent(page, "agent-2", "done")
            assert page.locator('#tree li[data-kind="agent"]').count() == 3
            tokens = done.locator(":scope > .node .tokens").inner_text()
            assert tokens.endswith(" tok") and tokens != "- tok", tokens
            assert done.locator(":scope > .node .requests").inner_text() != "- req"
            # the governor's cut is drawn: a line per bucket, a dot per change
            page.locator("#chart svg g[data-key] polyline").first.wait_for(timeout=60_000)
            assert page.locator("#chart svg g[data-key] circle").count() >= 1
            assert page.evaluate("window.pwned") is None
            assert page.locator("#detail img, #detail script, #tree b").count() == 0
            _shot(page, tmp_path / "view-live.png")
            # stop it from the page: it wraps up, and the detail goes on from the run
            # history, the run finished: its prompt and its reasons
            page.locator('button[data-op="stop"]').first.click()
            page.locator("#said", has_text="stopping run").wait_for(timeout=30_000)
            status = page.locator("#detail-status", has_text="from the run history")
            status.wait_for(timeout=90_000)
            assert status.inner_text() == "partial (interrupted), finished, from the run history"
            assert page.locator("#detail-prompt").inner_text() == "Investigate."
            # the list of runs comes on its own stream: it catches up, with nothing to steer
            from playwright.sync_api import expect

            expect(page.locator('#runs button[data-op="stop"]')).to_have_count(0, timeout=30_000)
            assert page.locator('#runs button[data-op="detail"]').count() == 1
        out, err = run.communicate(timeout=90)
        assert run.returncode == 3, err  # partial: stopped
        finished = json.loads(out.splitlines()[-1])
        assert finished["type"] == "finished" and finished["reason"] == "interrupted"
        assert any(json.loads(line)["type"] == "concurrency_changed" for line in out.splitlines())
    finally:
        end_ask(run, tmp_path / "s")
        server.stop()


def test_view_of_a_finished_runs_log_shows_its_workflow_tree_read_only(tmp_path: Path) -> None:
    server = ScriptedServer(WorkflowFanOut(["a", "b"], shape="pipeline", delay=0.2)).start()
    try:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = ask_env(claude, isolated_env(tmp_path))
        done = ask(claude, "--json", "--allow-workflows", prompt="Scan it.", base=env, timeout=300)
        assert done.returncode == 0, done.stderr
        log = tmp_path / "run.ndjson"
        log.write_text(done.stdout)
        with serving_view(env, str(log)) as url, chromium_page(url) as page:
            workflow = page.locator('#tree li[data-kind="workflow"]')
            workflow.wait_for(timeout=30_000)
            phases = workflow.locator('li[data-kind="phase"] > .node .label')
            assert phases.all_inner_texts() == ["Scan", "Check"]
            agents = workflow.locator('li[data-kind="workflow_agent"]')
            labels = agents.locator(".label").all_inner_texts()
            assert sorted(labels) == ["check:a", "check:b", "wf:a", "wf:b"]
            assert {a.get_attribute("data-state") for a in agents.all()} == {"done"}
            assert all(t != "- tok" for t in agents.locator(".tokens").all_inner_texts())
            status = page.locator("#detail-status").inner_text()
            assert status.startswith("completed (all_results_used)") and "read-only" in status
            assert page.locator("#runs-table").is_hidden()
            assert page.locator("button").count() == 0
            _shot(page, tmp_path / "view-log.png")
            # even a request that carries the token, from the page's origin, changes nothing
            address = urlsplit(url)
            connection = http.client.HTTPConnection("127.0.0.1", address.port, timeout=10)
            body = json.dumps({"run": "log", "op": "stop"})
            connection.request(
                "POST",
                "/act",
                body,
                {
                    "x-teamlead-token": url.split("token=", 1)[1],
                    "origin": f"http://127.0.0.1:{address.port}",
                    "content-type": "application/json",
                },
            )
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == (
                403,
                b"teamlead view: a run's log is read-only",
            )
            connection.close()
        bad = tmp_path / "not-a-log.ndjson"
        bad.write_text('{"hello": "world"}\nnot json\n')
        done = subprocess.run(
            [*TEAMLEAD, "view", str(bad)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2
        (line,) = done.stderr.strip().splitlines()
        assert "holds no record of a run" in line
    finally:
        end_ask(None, tmp_path / "s")
        server.stop()
