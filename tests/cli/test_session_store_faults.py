"""A session store's faults cost one line each, and lose nothing the local files hold.

Real ``teamlead`` commands on the real CLI offline, with a real ``redis-server`` or an
SQLite file: a store down at the start, a store that hangs mid-run, a session the store
does not hold, entries in the store that are no transcript lines, and a machine that dies
with Agent-tool agents still running (the CLI cannot resume those: their results are
honestly missing, the finished ones are not asked for again). Plus the usage errors of the
store's URL, through click's runner.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from teamlead._cli.commands import main
from teamlead.sessions import stored_sessions
from teamlead.testing import ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

from ..isolated import run_to_the_end
from ..polling import poll
from ..redis_server import REDIS_SERVER, RedisServer, free_port, redis_server
from ..session_stores import Machine, finished_line, in_store, machine
from .conftest import TEAMLEAD, ask, cli_processes, start_ask

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


def store_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` about the session store."""
    return [line for line in stderr.splitlines() if "session store" in line]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", "hi", "--session-store", "postgres://db/1"], "rediss://HOST:PORT/DB or sqlite"),
        (["resume", "s1", "--session-store", "redis://127.0.0.1/abc"], "must be a number"),
        (["sessions", "--session-store", "sqlite://host/x.db"], "no host"),
    ],
)
def test_a_session_store_url_that_is_none_is_one_usage_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_the_session_store_option_reads_its_teamlead_variable() -> None:
    result = CliRunner().invoke(main, ["sessions"], env={"TEAMLEAD_SESSION_STORE": "x://y"})
    assert result.exit_code == 2 and "got 'x://y'" in result.output


@pytest.fixture
def redis(tmp_path: Path) -> Any:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis") as server:
        yield server


def ask_on(where: Machine, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``teamlead ask --wait 5`` on ``where``, in the project both machines share."""
    return ask(where.claude, "--wait", "5", *args, base=where.env, cwd=project)


@pytest.mark.cli
@needs_redis
def test_a_redis_down_at_the_start_costs_one_warning_line_and_the_run_completes(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        here = machine(tmp_path, "a", server)
        done = ask_on(
            here, project, "--quiet", "--session-store", f"redis://127.0.0.1:{free_port()}/0"
        )
    assert done.returncode == 0, done.stderr
    assert sorted(findings_in(done.stdout)) == ["agent-1", "agent-2"]
    (line,) = store_lines(done.stderr)
    assert "cannot be reached" in line and "goes on with the local files" in line


@pytest.mark.cli
@pytest.mark.parametrize(
    ("content", "said"),
    [
        pytest.param(b"my notes, not a database\n" * 50, "is not an SQLite database", id="junk"),
        pytest.param(b"", "is an empty file", id="empty"),
    ],
)
def test_an_sqlite_path_naming_a_file_of_the_user_is_one_warning_and_left_untouched(
    tmp_path: Path, content: bytes, said: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    notes = tmp_path / "notes.db"
    notes.write_bytes(content)
    notes.chmod(0o644)
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        here = machine(tmp_path, "a", server)
        done = ask_on(here, project, "--quiet", "--session-store", f"sqlite://{notes}")
    assert done.returncode == 0, done.stderr
    assert sorted(findings_in(done.stdout)) == ["agent-1", "agent-2"]
    (line,) = store_lines(done.stderr)
    assert said in line and "goes on with the local files" in line
    assert notes.read_bytes() == content and notes.stat().st_mode & 0o777 == 0o644


@pytest.mark.cli
@pytest.mark.slow
@needs_redis
def test_a_store_that_hangs_mid_run_costs_one_warning_line_and_the_run_completes(
    tmp_path: Path, redis: RedisServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedServer(FanOut.of(2, delays=[0.2, 6.0])) as server:
        here = machine(tmp_path, "a", server)
        proc = start_ask(
            here.claude, "--quiet", "--session-store", redis.url, base=here.env, cwd=project
        )
        try:

            async def mirrored(store: Any) -> bool:
                return bool(await stored_sessions(store))

            started = poll(lambda: in_store(redis.url, mirrored), within_s=60)
            assert started, "the store never got the session"
            redis.pause()  # hung: every call to it waits for its timeout from now on
            out, err = proc.communicate(timeout=150)
        finally:
            redis.resume()
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert sorted(findings_in(out)) == ["agent-1", "agent-2"]  # from the local files
    (line,) = store_lines(err)
    assert "failed" in line and "goes on with the local files" in line


@pytest.mark.cli
@needs_redis
def test_a_session_the_store_lacks_resumes_from_the_local_files_or_is_one_usage_line(
    tmp_path: Path, redis: RedisServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        first, second = machine(tmp_path, "a", server), machine(tmp_path, "b", server)
        done = ask_on(first, project, "--json")  # no store: the session is only here
        assert done.returncode == 0, done.stderr
        session = finished_line(done.stdout)["session_id"]
        resume = [*TEAMLEAD, "resume", session, "--quiet", "--session-store", redis.url]
        here = run_to_the_end(resume, env=first.env, cwd=project, timeout=120)
        there = run_to_the_end(resume, env=second.env, cwd=project, timeout=120)
    assert here.returncode == 0, here.stderr
    (line,) = store_lines(here.stderr)
    assert "holds no copy of session" in line and "resuming this machine's files" in line
    assert there.returncode == 2, there.stderr
    lines = [line for line in there.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"no session {session} on this machine nor in" in lines[0]
    assert "Redis at" in lines[0] and "this directory's" in lines[0]


def _uuids(path: Path) -> set[str]:
    found = set()
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if isinstance(record.get("uuid"), str):
            found.add(record["uuid"])
    return found


@pytest.mark.cli
def test_corrupted_entries_in_the_store_are_skipped_with_one_warning_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    url = f"sqlite://{tmp_path}/shared/sessions.db"  # a disk both machines mount
    with ScriptedServer(FanOut.of(2, delays=0.2)) as server:
        first, second = machine(tmp_path, "a", server), machine(tmp_path, "b", server)
        done = ask_on(first, project, "--json", "--session-store", url)
        assert done.returncode == 0, done.stderr
        session = finished_line(done.stdout)["session_id"]
        with sqlite3.connect(tmp_path / "shared" / "sessions.db") as db:
            keys = db.execute(
                "SELECT DISTINCT project_key, subpath FROM teamlead_session_entries"
            ).fetchall()
            for project_key, subpath in keys:  # junk after every transcript's lines
                for junk in ("not json", '{"no": "type"}', "[" * 50_000):
                    db.execute(
                        "INSERT INTO teamlead_session_entries (project_key, session_id, "
                        "subpath, uuid, body) VALUES (?, ?, ?, NULL, ?)",
                        (project_key, session, subpath, junk),
                    )
        back = run_to_the_end(
            [*TEAMLEAD, "resume", session, "--quiet", "--session-store", url],
            env=second.env,
            cwd=project,
            timeout=120,
        )
        listed = run_to_the_end(
            [*TEAMLEAD, "sessions", "--session-store", url], env=second.env, timeout=60
        )
    assert back.returncode == 0, back.stderr
    (line,) = store_lines(back.stderr)
    assert "skipped 3 unreadable entries" in line
    # every line of the first machine's transcripts is on the second one
    origin = first.claude.config_dir / "projects"
    copied = second.claude.config_dir / "projects"
    transcripts = sorted(origin.glob(f"*/{session}.jsonl")) + sorted(
        origin.glob(f"*/{session}/subagents/agent-*.jsonl")
    )
    assert len(transcripts) == 3
    for path in transcripts:
        twin = copied / path.relative_to(origin)
        assert _uuids(path) <= _uuids(twin), path.name
    assert listed.returncode == 0, listed.stderr
    assert session in listed.stdout and "completed (all_results_used)" in listed.stdout


@pytest.mark.cli
@pytest.mark.slow
@needs_redis
def test_agents_running_when_a_machine_died_are_missing_and_the_finished_not_asked_again(
    tmp_path: Path, redis: RedisServer
) -> None:
    """The CLI resumes no Agent-tool agent that was running when its process died (it
    reports it stopped): on the second machine the finished agents' results are there,
    from the store, without a request; the others are reported lost, not made up."""
    project = tmp_path / "project"
    project.mkdir()

    async def answered(store: Any) -> str | None:
        for item in await stored_sessions(store):
            key = {"project_key": item.project_key, "session_id": item.session_id}
            found = 0
            for sub in await store.list_subkeys(key):
                lines = await store.load({**key, "subpath": sub}) or []
                found += any(
                    e.get("type") == "assistant" and "FINDING[" in json.dumps(e) for e in lines
                )
            if found >= 2:
                return str(item.session_id)
        return None

    script = FanOut.of(4, delays=[0.2, 0.2, 600, 600])
    with ScriptedServer(script) as server:
        first, second = machine(tmp_path, "a", server), machine(tmp_path, "b", server)
        proc = start_ask(
            first.claude, "--json", "--session-store", redis.url,
            base=first.env, cwd=project,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            session = poll(lambda: in_store(redis.url, answered), within_s=120)
            assert session, "the store never held two answers"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert poll(lambda: not cli_processes(first.claude.state_dir), within_s=10)
        done = run_to_the_end(
            [*TEAMLEAD, "resume", session, "--json", "--wait", "5", "--session-store", redis.url],
            env=second.env,
            cwd=project,
            timeout=150,
        )
        asked = [
            r.request.agent.description for r in server.recorded("subagent") if r.request.agent
        ]
    finished = finished_line(done.stdout)
    assert done.returncode == 3, done.stderr  # partial: two results are missing
    assert {"agent-1", "agent-2"} <= set(findings_in(finished["result"] or ""))
    rows = {r["description"]: r for r in finished["tasks"] if r["kind"] == "task"}
    assert {rows[f"agent-{i}"]["status"] for i in (3, 4)} <= {"stopped", "lost"}
    assert all(rows[f"agent-{i}"]["disposition"] != "included" for i in (3, 4))
    assert sorted(asked) == ["agent-1", "agent-2", "agent-3", "agent-4"]  # each asked once
