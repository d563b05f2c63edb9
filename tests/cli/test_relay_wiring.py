"""The request relay as teamlead runs it: on by default in ``teamlead.run`` and ``ask``.

The real CLI against a scripted model with a hidden limit of 3 concurrent subagent streams
(429 with ``retry-after: 1`` past it) and ``CLAUDE_CODE_MAX_RETRIES=0``: any 429 reaching the
CLI would fail a subagent, so every finding arriving proves the relay absorbed them.
"""

from __future__ import annotations

import collections
import json
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import ConcurrencyChanged, Finished, RateLimited
from teamlead.policy import LimitsPolicy
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, FirstWaveHolds, findings_in

from .conftest import ask

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

AGENTS = 24
LIMIT = 3


def _subagent_429s(server: ScriptedServer) -> collections.Counter[str]:
    return collections.Counter(
        r.request.agent.description
        for r in server.recorded("subagent")
        if r.status == 429 and r.request.agent is not None
    )


async def test_query_relays_a_24_agent_storm_by_default(tmp_path: Path) -> None:
    # 24 at once against 3; the first wave holds the places while the storm arrives
    script = FirstWaveHolds(FanOut.of(AGENTS, delays=0.5), replies=LIMIT, seconds=2.0)
    with ScriptedServer(
        script, concurrency_limit=LIMIT, retry_after=1, limit_roles={"subagent"}
    ) as server:
        env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(AGENTS)}
        claude = OfflineClaude(server.base_url, state_dir=tmp_path, max_retries=0, env=env)
        items: list[Any] = [
            item
            async for item in teamlead.run(
                "Investigate 24 parts.",
                claude.options(),
                policy=teamlead.Policy(wait_s=5, deadline_s=240),
            )
        ]
        recorded = server.recorded()
    done = items[-1]
    assert isinstance(done, Finished)
    # every subagent's finding is in the one final answer
    assert sorted(findings_in(done.result or "")) == sorted(
        f"agent-{n}" for n in range(1, AGENTS + 1)
    )
    assert done.status == "completed"
    # at most one 429 per subagent (but for one, see the storm in test_limits.py), all
    # absorbed, none passed on to the CLI
    rejected = _subagent_429s(server)
    assert sum(rejected.values()) >= 1 and max(rejected.values()) <= 2
    assert sum(1 for n in rejected.values() if n > 1) <= 1
    limited = [i for i in items if isinstance(i, RateLimited)]
    assert len(limited) == sum(rejected.values())
    assert all(e.outcome == "absorbed" and e.role == "subagent" for e in limited)
    assert any(isinstance(i, ConcurrencyChanged) and i.cap == LIMIT for i in items)
    # the summary on Finished: this run's requests, 429s absorbed, the limit learnt
    relay = done.relay
    assert relay is not None
    assert (relay.absorbed, relay.passed) == (sum(rejected.values()), 0)
    assert relay.requests == len(recorded) - relay.absorbed
    assert [b.limit for b in relay.buckets] == [LIMIT]
    assert relay.buckets[0].rate_limited == relay.absorbed


def test_ask_json_reports_the_relay_and_never_the_key(tmp_path: Path) -> None:
    agents = 6
    with ScriptedServer(
        FanOut.of(agents, delays=0.4), concurrency_limit=2, retry_after=1, limit_roles={"subagent"}
    ) as server:
        claude = OfflineClaude(
            server.base_url,
            state_dir=tmp_path / "s",
            env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)},
        )
        proc = ask(claude, "--json", "--wait", "5", timeout=180)
        key = claude.env["ANTHROPIC_API_KEY"]
        seen_keys = {v for r in server.recorded() for k, v in r.headers if k.lower() == "x-api-key"}
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    limited = [r for r in lines if r["type"] == "rate_limited"]
    assert limited and all(r["outcome"] == "absorbed" for r in limited)
    assert any(r["type"] == "concurrency_changed" for r in lines)
    finished = lines[-1]
    assert finished["type"] == "finished" and finished["status"] == "completed"
    assert sorted(findings_in(finished["result"])) == [f"agent-{n}" for n in range(1, agents + 1)]
    assert finished["relay"]["absorbed"] == len(limited) and finished["relay"]["passed"] == 0
    assert finished["relay"]["buckets"][0]["limit"] == 2
    # the key reached the upstream untouched, and nowhere in what teamlead printed
    assert seen_keys == {key}
    assert key not in proc.stdout and key not in proc.stderr


def test_no_relay_goes_direct_and_the_cli_meets_the_429s(tmp_path: Path) -> None:
    agents = 3
    with ScriptedServer(
        FanOut.of(agents, delays=1.0), concurrency_limit=1, retry_after=1, limit_roles={"subagent"}
    ) as server:
        claude = OfflineClaude(
            server.base_url,
            state_dir=tmp_path / "s",
            env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)},
        )
        proc = ask(claude, "--json", "--no-relay", "--wait", "2", "--max-resumes", "0", timeout=180)
        rejected = _subagent_429s(server)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines and lines[-1]["type"] == "finished", proc.stderr
    assert lines[-1]["relay"] is None
    assert not [r for r in lines if r["type"] in ("rate_limited", "concurrency_changed")]
    # nothing held the requests back: the server's 429s went to the CLI, whose subagents
    # (CLAUDE_CODE_MAX_RETRIES=0) failed on them
    assert sum(rejected.values()) >= 1
    assert len(findings_in(lines[-1]["result"] or "")) < agents


def test_teamlead_no_relay_variable_turns_it_off(tmp_path: Path) -> None:
    with ScriptedServer(FanOut.of(1, delays=0.1)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = ask(claude, "--json", extra={"TEAMLEAD_NO_RELAY": "1"}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["relay"] is None


def test_a_refused_upstream_ends_the_run_at_once_in_one_line_naming_it_and_the_fix(
    tmp_path: Path,
) -> None:
    """A wrong ``ANTHROPIC_BASE_URL`` (nothing listens there) is the user's setting: the
    run ends before its CLI starts, with one line naming the URL as the user set it (host
    and port, never the relay's own port, never the credentials in it), that the
    connection was refused, and the fix; never the CLI's three minutes of retries and its
    "server-side issue, usually temporary"."""
    with socket.socket() as dead:  # bound, never listening: connections are refused
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        claude = OfflineClaude(f"http://127.0.0.1:{port}", state_dir=tmp_path / "s")
        wrong = f"http://someone:hunter2@127.0.0.1:{port}/v1"
        proc = ask(claude, prompt="x", extra={"ANTHROPIC_BASE_URL": wrong}, timeout=20)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"teamlead: error: cannot connect to ANTHROPIC_BASE_URL http://127.0.0.1:{port}: "
        "connection refused; set ANTHROPIC_BASE_URL to your API's address, or unset it for "
        "the Anthropic API"
    ]
    assert proc.stdout == ""


def test_a_relay_that_cannot_start_warns_once_and_the_run_goes_direct(tmp_path: Path) -> None:
    with ScriptedServer(FanOut.of(1, delays=0.1)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        # uvicorn missing: the relay module cannot serve, the run must still work
        shim = tmp_path / "shim"
        shim.mkdir()
        (shim / "uvicorn.py").write_text("raise ImportError('uvicorn is broken here')\n")
        path = os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])
        proc = ask(claude, "--json", extra={"PYTHONPATH": path}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["relay"] is None
    warnings = [line for line in proc.stderr.splitlines() if "relay" in line]
    assert len(warnings) == 1 and "running direct" in warnings[0], proc.stderr


def test_an_app_that_stops_reading_at_finished_leaves_nothing_open(tmp_path: Path) -> None:
    """``return`` inside ``async for`` at ``Finished``, then the event loop ends at once:
    the relay must be stopped before ``Finished`` is yielded, since the loop's generator
    finaliser runs too late to finish a stop (it used to leak upstream sockets)."""
    import anyio
    import psutil

    async def app(options: Any) -> Finished:
        async for item in teamlead.run("Investigate two parts.", options):
            if isinstance(item, Finished):
                return item
        raise AssertionError("no Finished")

    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path)
        done = anyio.run(app, claude.options())
        upstream_port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        mine = psutil.Process().net_connections(kind="tcp")
    assert done.status == "completed" and done.relay is not None and done.relay.requests >= 3
    # no socket of this process still talks to the upstream (the relay's pooled
    # connections), and no relay is listening any more
    to_upstream = [c for c in mine if c.raddr and c.raddr.port == upstream_port]
    listening = [
        c for c in mine if c.status == psutil.CONN_LISTEN and c.laddr.port != upstream_port
    ]
    assert to_upstream == [] and listening == []


async def test_two_runs_in_one_process_each_keep_their_own_model_limit(tmp_path: Path) -> None:
    """One process, one upstream, one account (so one relay and one governor): a run with
    a ceiling of 2 requests and a run beside it with a ceiling of 4 each keep their own,
    exactly, and each gets all of its findings."""
    script = FanOut.of(6, delays=1.5)
    with ScriptedServer(script) as server:
        homes = {ceiling: tmp_path / f"home-{ceiling}" for ceiling in (2, 4)}
        done: dict[int, Finished] = {}

        async def run(ceiling: int) -> None:
            claude = OfflineClaude(server.base_url, state_dir=homes[ceiling], max_retries=0)
            policy = teamlead.Policy(wait_s=5, deadline_s=240, limits=LimitsPolicy(default=ceiling))
            async for item in teamlead.run("Investigate 6 parts.", claude.options(), policy=policy):
                if isinstance(item, Finished):
                    done[ceiling] = item

        async with anyio.create_task_group() as tg:
            for ceiling in homes:
                tg.start_soon(run, ceiling)
    for ceiling, finished in done.items():
        assert finished.status == "completed", finished.reasons
        assert sorted(findings_in(finished.result or "")) == sorted(
            f"agent-{n}" for n in range(1, 7)
        )
        assert server.max_concurrent(session_id=finished.session_id) == ceiling
        assert finished.relay is not None
        assert [b.limit for b in finished.relay.buckets] == [ceiling]
    assert sorted(done) == [2, 4]
