"""Durable runs across machines: ``teamlead ask`` on one machine dies, ``teamlead resume`` on
another finishes it from the session store, on the real CLI offline.

Two machines are two homes (their own ``HOME``, ``CLAUDE_CONFIG_DIR``, ``TMPDIR`` and cache)
that share only a real ``redis-server`` and the project directory's path. A machine dies
by SIGKILL of its whole process group (teamlead and the CLI it runs), once the store holds
what the test waits for: it polls the store, never sleeps a fixed time.

The scripted lead runs one ``Workflow`` of four agents (prompts ``WFJOB <key>``, so the
server's records say whose request each was); two answer at once, two hang on their first
request. The store holds the session's transcripts (the SDK mirrors them) and the
workflow's journal (teamlead mirrors it: the CLI does not), so the second machine resumes
the run with the finished agents replayed from the journal: no second request for them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from teamlead.sessions import stored_sessions
from teamlead.testing import ScriptedServer
from teamlead.testing.scripts import WorkflowFanOut, findings_in, workflow_key

from ..isolated import run_to_the_end
from ..polling import poll
from ..redis_server import REDIS_SERVER, RedisServer, redis_server
from ..session_stores import Machine, finished_line, in_store, machine
from .conftest import TEAMLEAD, cli_processes, start_ask
from .scripted import Redelegates

pytestmark = [
    pytest.mark.cli,
    pytest.mark.slow,
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed"),
]

KEYS = ["a", "b", "c", "d"]
RUN = ["--json", "--allow-workflows", "--wait", "5", "--deadline", "240"]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis") as server:
        yield server


def journaled_session(url: str, results: int) -> str | None:
    """The session whose workflow journal in the store holds ``results`` results, if any."""

    async def check(store: Any) -> str | None:
        for session in await stored_sessions(store):
            key = {"project_key": session.project_key, "session_id": session.session_id}
            for sub in await store.list_subkeys(key):
                if sub.endswith("/journal"):
                    lines = await store.load({**key, "subpath": sub}) or []
                    if sum(1 for e in lines if e.get("type") == "result") >= results:
                        return str(session.session_id)
        return None

    return in_store(url, check)


def requests_by_key(server: ScriptedServer) -> dict[str, int]:
    """How many requests each workflow agent's job sent, on both machines."""
    out: dict[str, int] = {}
    for rec in server.recorded():
        key = workflow_key(rec.request)
        if key is not None:
            out[key] = out.get(key, 0) + 1
    return out


def die_once_journaled(
    first: Machine, project: Path, url: str, results: int, *extra: str
) -> tuple[str, subprocess.Popen[str]]:
    """``teamlead ask`` on ``first``, SIGKILLed with all it started once the store's journal
    holds ``results`` results; returns the session id."""
    return die_once(first, project, url, lambda: journaled_session(url, results), *extra)


def die_once(
    first: Machine, project: Path, url: str, ready: Callable[[], str | None], *extra: str
) -> tuple[str, subprocess.Popen[str]]:
    """``teamlead ask`` on ``first``, SIGKILLed with all it started once ``ready()`` names
    the session (what the test waits for is in the store); returns the session id."""
    out = (project.parent / "ask.out").open("w")
    proc = start_ask(
        first.claude, *RUN, "--session-store", url, *extra,
        base=first.env, cwd=project, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the machine dies whole
    )  # fmt: skip
    try:
        session = poll(ready, within_s=120, unless=lambda: proc.poll() is not None)
        assert session, "the store never held it:\n" + (project.parent / "ask.out").read_text()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        out.close()
    assert poll(lambda: not cli_processes(first.claude.state_dir), within_s=10)
    return session, proc


def completed_on(
    second: Machine, session: str, project: Path, url: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``teamlead resume SESSION`` on ``second`` from the store at ``url``, which must end
    ``completed`` (exit 0); its process and its ``finished`` line."""
    done = run_to_the_end(
        [*TEAMLEAD, "resume", session, *RUN, "--session-store", url],
        env=second.env,
        cwd=project,
        timeout=200,
    )
    finished = finished_line(done.stdout)
    assert done.returncode == 0, (done.stderr[-3000:], json.dumps(finished))
    assert finished["status"] == "completed", finished["reasons"]
    return done, finished


def test_a_run_whose_machine_died_is_finished_on_another_from_the_redis_store(
    tmp_path: Path, redis: RedisServer
) -> None:
    script = WorkflowFanOut(KEYS, delay=0.2, hang=frozenset({"c", "d"}), hang_once=True)
    project = tmp_path / "project"  # the same path on both machines
    project.mkdir()
    with ScriptedServer(script) as server:
        first, second = machine(tmp_path, "a", server), machine(tmp_path, "b", server)
        session, _ = die_once_journaled(first, project, redis.url, 2)
        assert requests_by_key(server) == {"a": 1, "b": 1, "c": 1, "d": 1}
        assert not list(second.claude.config_dir.glob("projects/*/*.jsonl"))  # never here
        done, finished = completed_on(second, session, project, redis.url)
        assert set(findings_in(finished["result"] or "")) >= set(KEYS)  # 4 of 4
        # the finished agents were replayed from the journal: their job asked nothing again
        assert requests_by_key(server) == {"a": 1, "b": 1, "c": 2, "d": 2}
        assert "warning" not in done.stderr, done.stderr
        listed = run_to_the_end(
            [*TEAMLEAD, "sessions", "--json", "--session-store", redis.url],
            env=second.env,
            timeout=60,
        )
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    row = next(r for r in rows if r["session_id"] == session)
    assert row["status"]["status"] == "completed" and row["status"]["reason"] == "all_results_used"
    assert row["version"] == 1 and row["last_modified"] > 1e12


def stored_with(url: str, *needles: str) -> str | None:
    """The session whose transcript in the store holds every one of ``needles``, if any."""

    async def check(store: Any) -> str | None:
        for session in await stored_sessions(store):
            key = {"project_key": session.project_key, "session_id": session.session_id}
            text = json.dumps(await store.load(key) or [])
            if all(n in text for n in needles):
                return str(session.session_id)
        return None

    return in_store(url, check)


def test_lost_agents_delegated_again_on_another_machine_are_superseded(
    tmp_path: Path, redis: RedisServer
) -> None:
    script = Redelegates()
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedServer(script) as server:
        first, second = machine(tmp_path, "a", server), machine(tmp_path, "b", server)
        # the machine dies once the store holds the lead's a and b, and c and d hang
        session, _ = die_once(
            first,
            project,
            redis.url,
            lambda: (
                stored_with(redis.url, "FINDING[a]", "FINDING[b]")
                if script.hung >= {"c", "d"}
                else None
            ),
        )
        _, finished = completed_on(second, session, project, redis.url)
    assert sorted(findings_in(finished["result"] or "")) == ["a", "b", "c", "d"]
    rows = [r for r in finished["tasks"] if r["kind"] == "task"]
    for name in "cd":
        lost, again = (r for r in rows if r["description"] == name)
        assert (lost["disposition"], lost["ended"]) == ("not_run", "lost")
        assert f"superseded by task {again['id']}" in lost["reason"]
        assert (again["disposition"], again["ended"]) == ("included", "finished")
