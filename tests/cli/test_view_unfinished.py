"""``teamlead view LOG`` on the log of a real run killed mid-way (SIGKILL: no ``finished``
line): a ``teamlead ask --json`` on the scripted server whose first agent ends and whose
second is still working when the run is killed. The live tree shows the lead's last tool
before the kill; the log, served by the real command, lists both agents, the one that never
ended and the run marked unfinished, in its JSON and on the page (a real headless Chromium).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from teamlead._cli.runs import run_detail
from teamlead._control.registry import Registry
from teamlead._control.runlog import UNFINISHED, UNFINISHED_REASON, read_log
from teamlead.errors import TeamleadError
from teamlead.testing import AgentCall, OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..browser import chromium_page, detail_events, serving_view
from ..isolated import isolated_env
from ..polling import poll
from .conftest import ask_env, end_ask, start_ask

pytestmark = [pytest.mark.cli, pytest.mark.slow]


def _by_label(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {tree["label"]: tree}
    for child in tree["children"]:
        out.update(_by_label(child))
    return out


def _live_tree() -> dict[str, Any] | None:
    """The only live run's tree once its quick agent is done, the slow one running and the
    lead's last tool known."""
    listing = Registry().listing()
    if len(listing.live) != 1:
        return None
    try:
        tree: dict[str, Any] = run_detail(listing.live[0].run)["tree"]
    except TeamleadError:  # not answering yet
        return None
    nodes = _by_label(tree)
    quick, slow = nodes.get("quick"), nodes.get("slow")
    ready = quick is not None and quick["state"] == "done" and slow is not None
    return tree if ready and tree["last_tool"] == "Agent" else None


def test_view_of_a_killed_runs_log_lists_the_agents_it_saw_marked_unfinished(
    tmp_path: Path,
) -> None:
    calls = [
        AgentCall(description="quick", prompt="SUBTASK-1: investigate part 1."),
        AgentCall(description="slow", prompt="SUBTASK-2: investigate part 2."),
    ]
    server = ScriptedServer(FanOut(agents=calls, delays={"quick": 0.2, "slow": 60.0})).start()
    claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
    env = ask_env(claude, isolated_env(tmp_path))
    log = tmp_path / "run.ndjson"
    with log.open("w") as out:
        run = start_ask(claude, "--json", base=env, stdout=out)
    try:
        # live: the lead called Agent last, and its tree says so
        live = poll(_live_tree, within_s=120, every_s=0.2, unless=lambda: run.poll() is not None)
        assert live is not None, f"the run's tree never showed it: {run.poll()}"
        assert _by_label(live)["slow"]["state"] == "running"
        # the log holds the quick agent's end: kill the run as a lost machine would
        written = poll(lambda: '"type": "task_ended"' in log.read_text(), within_s=30)
        assert written, log.read_text()[-2000:]
        run.kill()
        run.communicate(timeout=30)
        text = log.read_text()
        assert '"type": "finished"' not in text and '"type": "task_started"' in text

        detail = read_log(log).to_json()
        assert (detail["status"], detail["reason"]) == (UNFINISHED, UNFINISHED_REASON)
        nodes = _by_label(detail["tree"])
        assert [c["label"] for c in detail["tree"]["children"]] == ["quick", "slow"]
        assert (nodes["quick"]["state"], nodes["slow"]["state"]) == ("done", UNFINISHED)
        assert nodes["quick"]["duration_s"] is not None and nodes["quick"]["tokens"]
        lead = detail["tree"]
        assert (lead["state"], lead["last_tool"]) == (UNFINISHED, "Agent")
        assert lead["requests"]

        with serving_view(env, str(log)) as url:
            assert next(detail_events(url)) == detail
            with chromium_page(url) as page:
                page.locator("#live.unfinished").wait_for(timeout=30_000)
                assert page.locator("#live").inner_text().startswith("an unfinished run")
                status = page.locator("#detail-status.unfinished").inner_text()
                assert status.startswith("unfinished (the log ends without a `finished` line")
                assert status.endswith("from its log (read-only)")
                slow = page.locator('#tree li[data-kind="agent"][data-state="unfinished"]')
                assert slow.locator(".label").all_inner_texts() == ["slow"]
                done = page.locator('#tree li[data-kind="agent"][data-state="done"]')
                assert done.locator(".label").all_inner_texts() == ["quick"]
                lead_tool = page.locator('#tree li[data-kind="lead"] > .node .tool')
                assert lead_tool.inner_text() == "Agent"
                assert page.locator("button").count() == 0
                path = tmp_path / "view-unfinished.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"screenshot: {path}")
    finally:
        end_ask(run, tmp_path / "s")
        server.stop()
