"""An upstream whose headers are absurd costs no agent and no result, on the real CLI.

Each run has the CLI's own retries off (``CLAUDE_CODE_MAX_RETRIES=0``): whatever survives
is teamlead's doing. The runs are ``teamlead ask`` processes sharing one machine store (one
``XDG_CACHE_HOME``), as two commands typed one after the other on one machine would.

- A subagent's 429 with ``retry-after: 1e9`` is a faulty header: ignored, the request backs
  off and goes through; no other request waits on it, the store keeps no pause from it,
  and the next process on the machine runs as if it never happened.
- A successful reply saying a window is empty until 2099 pauses nothing either.
- A plausible 120 s pause that one subagent met does not starve the lead: the run ends
  within its deadline with the others' results in its answer.
- Two upstreams on one machine store: what one teaches never limits the other.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import FanOut, OverloadBurst, finding_text, findings_in

from .conftest import TEAMLEAD, ask

pytestmark = [pytest.mark.cli]

ROOT = Path(__file__).resolve().parents[2]


class FirstTryOf:
    """``script``, but the first request of the subagent ``agent`` gets ``reply``; with
    ``after``, only once those subagents' requests have reached the server (within 30 s),
    so that the reply's pause meets them in flight whatever the machine's load."""

    def __init__(
        self,
        script: Callable[[ScriptedRequest], Reply],
        agent: str,
        reply: Reply,
        *,
        after: tuple[str, ...] = (),
    ):
        self.script, self.agent, self.reply, self.after = script, agent, reply, set(after)
        self.used = False
        self._seen: set[str] = set()
        self._changed = threading.Condition()

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role != "subagent":
            return self.script(req)
        with self._changed:
            self._seen.add(req.agent_description or "")
            self._changed.notify_all()
            if req.agent_description != self.agent or self.used:
                return self.script(req)
            self.used = True
            if not self._changed.wait_for(lambda: self.after <= self._seen, timeout=30):
                raise AssertionError(f"{sorted(self.after - self._seen)} never reached the server")
        return self.reply


def ask_finished(
    claude: OfflineClaude, cache: Path, *args: str, within_s: float = 120
) -> dict[str, Any]:
    """``teamlead ask --json`` on ``claude``'s home and the machine store under ``cache``;
    its ``finished`` line, with its wall time and stderr."""
    machine = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = ask(
        claude, "--json", "--wait", "5", *args,
        prompt="Investigate 3 parts.", extra=machine, timeout=within_s,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines, proc.stderr
    finished: dict[str, Any] = json.loads(lines[-1])
    assert finished["type"] == "finished", proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    finished["_wall_s"] = time.monotonic() - started
    finished["_stderr"] = proc.stderr
    return finished


def stored_pauses(cache: Path) -> dict[str, float]:
    """Each stored bucket's pause, in seconds from now, as the machine store holds it."""
    db = cache / "teamlead" / "limits.sqlite3"
    if not db.is_file():
        return {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT key, data FROM limits").fetchall()
    now = time.time()
    out = {}
    for key, data in rows:
        until = json.loads(data).get("cooldown_until") or 0.0
        out[key] = max(0.0, float(until) - now)
    return out


def home(server: ScriptedServer, root: Path, name: str) -> OfflineClaude:
    return OfflineClaude(server.base_url, state_dir=root / name, max_retries=0)


ALL = ["agent-1", "agent-2", "agent-3"]


def test_an_absurd_retry_after_is_ignored_and_costs_no_agent_nor_the_next_process(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    poisoned = FirstTryOf(FanOut.of(3, delays=0.3), "agent-1", Reply.error(429, retry_after=1e9))
    with ScriptedServer(poisoned) as server:
        first = ask_finished(home(server, tmp_path, "one"), cache, "--deadline", "90")
        pauses = stored_pauses(cache)
        second = ask_finished(home(server, tmp_path, "two"), cache, "--deadline", "60")
    assert poisoned.used
    for done in (first, second):
        assert done["status"] == "completed", done["_stderr"]
        assert sorted(findings_in(done["result"] or "")) == ALL
    assert first["relay"]["absorbed"] == 1 and first["relay"]["passed"] == 0
    assert "not a plausible rate-limit pause" in first["_stderr"]
    # nothing of the 1e9 s was stored for the machine: at most the relay's own backoff
    assert all(p <= 30 for p in pauses.values()), pauses
    assert second["_wall_s"] < 45  # the next process was not held by the first's header


def test_a_window_reset_in_2099_pauses_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    empty_until_2099 = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:00Z",
    }
    reply = Reply.text(finding_text("agent-1"), headers=empty_until_2099)
    script = FirstTryOf(FanOut.of(3, delays=0.3), "agent-1", reply)
    with ScriptedServer(script) as server:
        first = ask_finished(home(server, tmp_path, "one"), cache, "--deadline", "60")
        pauses = stored_pauses(cache)
    assert first["status"] == "completed", first["_stderr"]
    assert sorted(findings_in(first["result"] or "")) == ALL
    assert all(p == 0 for p in pauses.values()), pauses
    assert first["_wall_s"] < 45


def test_a_subagents_plausible_pause_never_starves_the_leads_synthesis(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # agent-1's 429 is answered once agent-2's and agent-3's requests are with the upstream:
    # had one come after it, the pause would rightly answer it a 429 too (the CLI's retries
    # being off, that agent would fail), and the run would have fewer results to use
    paused = FirstTryOf(
        FanOut.of(3, delays=0.3),
        "agent-1",
        Reply.error(429, retry_after=120),
        after=("agent-2", "agent-3"),
    )
    with ScriptedServer(paused) as server:
        done = ask_finished(home(server, tmp_path, "one"), cache, "--deadline", "90", within_s=150)
        lead = [r for r in server.recorded("lead") if r.status == 200]
    # the 120 s pause is longer than the run may wait: agent-1's 429 went on and, with the
    # CLI's retries off, agent-1 failed; the other two results are in the lead's answer
    assert done["_wall_s"] < 90, done["_stderr"]
    assert {"agent-2", "agent-3"} <= set(findings_in(done["result"] or ""))
    assert len(lead) >= 2  # the fan-out, and the synthesis the pause did not hold back
    assert done["relay"]["passed"] == 1  # agent-1's 429 alone went on to the CLI
    rows = {row["description"]: row for row in done["tasks"] if row.get("description")}
    assert {name: (row["status"], row["disposition"]) for name, row in rows.items()} == {
        "agent-1": ("failed", "failed"),
        "agent-2": ("completed", "included"),
        "agent-3": ("completed", "included"),
    }
    assert (done["status"], done["reason"]) == ("partial", "work_failed")


def test_what_one_upstream_teaches_never_limits_another(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fan = FanOut.of(6, delays=1.0)
    with (
        ScriptedServer(
            fan, concurrency_limit=2, retry_after=0.5, limit_roles={"subagent"}
        ) as limited,
        ScriptedServer(FanOut.of(6, delays=1.0)) as free,
    ):
        taught = ask_finished(home(limited, tmp_path, "one"), cache, "--deadline", "90")
        other = ask_finished(home(free, tmp_path, "two"), cache, "--deadline", "90")
        free_peak = free.max_concurrent("subagent")
    assert taught["relay"]["buckets"][0]["limit"] == 2
    assert other["status"] == "completed" and sorted(findings_in(other["result"] or "")) == [
        f"agent-{n}" for n in range(1, 7)
    ]
    # the second upstream ran its six agents at once: the first's limit of 2 is its own
    assert free_peak == 6
    assert other["relay"]["buckets"][0]["limit"] > 2
    keys = set(stored_pauses(cache))
    assert len({key.split("/", 1)[0] for key in keys}) == 2, keys  # one account each
    # what `teamlead limits` shows of it: each account apart, the limit learnt, no secret
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    listed = subprocess.run(
        [*TEAMLEAD, "limits", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    rows = json.loads(listed.stdout)
    limited_host, free_host = (s.base_url.split("//", 1)[1] for s in (limited, free))
    by_host = {row["account"].split("#")[0]: row for row in rows}
    assert set(by_host) == {limited_host, free_host}
    assert by_host[limited_host]["limit"] == 2 and by_host[limited_host]["host"]
    assert OfflineClaude(limited.base_url).env["ANTHROPIC_API_KEY"] not in listed.stdout
    # clearing one account leaves the other's entries
    account = by_host[limited_host]["account"]
    cleared = subprocess.run(
        [*TEAMLEAD, "limits", "clear", account], env=env, capture_output=True, text=True
    )
    assert cleared.returncode == 0 and "cleared 1 learnt limit(s)" in cleared.stdout
    after = json.loads(
        subprocess.run(
            [*TEAMLEAD, "limits", "--json"], env=env, capture_output=True, text=True
        ).stdout
    )
    assert [row["account"] for row in after] == [
        by_host[free.base_url.split("//", 1)[1]]["account"]
    ]


#: The CLI's own stream timeouts at their floor (10 s): a hold longer than them that the
#: relay did not keep alive would trip them.
SHORT_TIMEOUTS = {
    "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS": "10000",
    "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "10000",
}


def test_an_overload_burst_longer_than_the_clis_timeouts_costs_no_agent(tmp_path: Path) -> None:
    burst = OverloadBurst(FanOut.of(4, delays=0.3), seconds=15)
    with ScriptedServer(burst) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "one", env=SHORT_TIMEOUTS)
        done = ask_finished(claude, tmp_path / "cache", "--deadline", "120", within_s=180)
        jobs = [
            r.request.agent.description
            for r in server.recorded("subagent")
            if r.status == 200 and r.request.agent is not None
        ]
        agent_ids = {
            value
            for r in server.recorded("subagent")
            for name, value in r.headers
            if name.lower() == "x-claude-code-agent-id"
        }
    assert burst.overloaded >= 4  # every agent met the burst
    assert done["status"] == "completed", done["_stderr"]
    assert sorted(findings_in(done["result"] or "")) == [f"agent-{n}" for n in range(1, 5)]
    # no agent re-spawned: one agent id per job, each job answered once
    assert sorted(jobs) == [f"agent-{n}" for n in range(1, 5)] and len(agent_ids) == 4
    assert done["relay"]["passed"] == 0 and done["relay"]["overloaded"] == burst.overloaded
    assert all(row["status"] == "completed" for row in done["tasks"])


def test_an_overload_burst_that_outlasts_the_hold_goes_on_and_leaks_nothing(
    tmp_path: Path,
) -> None:
    burst = OverloadBurst(FanOut.of(2, delays=0.3), seconds=600)
    with ScriptedServer(burst) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "one")
        done = ask_finished(
            claude, tmp_path / "cache", "--deadline", "60", "--overload-hold", "2", within_s=120
        )
    # past the hold the overloads reached the CLI (its retries off): the agents failed,
    # one line each, and so did the lead when resumed: the run ended by itself, failed (its
    # answer, if any, is the acknowledgement of the launch: whether the lead's turn after the
    # launch beat the burst to the upstream is a race in the CLI)
    assert (done["status"], done["reason"]) == ("failed", "resume_failed")
    assert done["relay"]["passed"] >= 2 and done["_wall_s"] < 60
    tasks = sorted(
        (row["description"], row["status"]) for row in done["tasks"] if row["kind"] == "task"
    )
    assert tasks == [("agent-1", "failed"), ("agent-2", "failed")]
    assert not [line for line in done["_stderr"].splitlines() if "Traceback" in line]
