"""The warm ``teamlead-claude``: the launcher an SDK app starts hands its session to a warm
teamlead process, which runs each session in a worker of its own, on the app's own
streams, argv, environment and working directory.

Every test of ``test_claude_shim.py`` runs warm too (the default); these check what only
the warm path has: one warm process serving apps of separate worlds, the app's resource
limits, its idle end, a launcher killed mid-session, the warm process killed from outside,
a bad request on its socket, and the bad setting.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import ClaudeAgentOptions, PermissionResultAllow, ResultMessage, query

from teamlead.testing import OfflineClaude, Reply, ScriptedRequest
from teamlead.testing.scripts import FanOut, bash

from ..isolated import warm_idle
from ..polling import poll
from .conftest import OfflineFactory, cli_processes, shim_with_agents_running, warm_processes

pytestmark = [pytest.mark.cli, pytest.mark.slow]

SHIM = Path(sys.executable).with_name("teamlead-claude")
_STREAM_JSON = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]


async def _result(options: ClaudeAgentOptions) -> ResultMessage:
    """The app: its first ``ResultMessage`` (its stream left to the event loop's end, as
    most apps leave it)."""
    with anyio.fail_after(60):
        async for message in query(prompt="Say who you are.", options=options):
            if isinstance(message, ResultMessage):
                return message
    raise AssertionError("the app got no result")


def _answer(text: str) -> Any:
    def script(request: ScriptedRequest) -> Reply:
        return Reply.text(text)

    return script


def _serving(idle: str) -> list[psutil.Process]:
    """The warm processes (not their workers) started with idle time ``idle``."""
    warm = warm_processes()
    pids = {p.pid for p in warm}
    return [p for p in warm if p.info["ppid"] not in pids and _idles(p, idle)]


def _idles(process: psutil.Process, idle: str) -> bool:
    """Whether ``process`` (one of :func:`warm_processes`) was started with ``idle``."""
    return bool(process.info["cmdline"][-1] == repr(float(idle)))


def test_apps_of_two_worlds_are_served_by_one_warm_process_each_in_its_own(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    worlds = []
    for name in ("a", "b"):
        _, claude = offline(_answer(f"I am {name}."))
        history = tmp_path / f"history-{name}"
        env = {
            **claude.env,
            "TEAMLEAD_HISTORY_DIR": str(history),
            "TEAMLEAD_CLAUDE_WARM": warm_idle(120),
        }
        worlds.append((name, claude, history, claude.options(cli_path=SHIM, env=env)))

    results = {name: anyio.run(_result, options) for name, _, _, options in worlds}
    serving = _serving(warm_idle(120))

    assert {name: r.result for name, r in results.items()} == {"a": "I am a.", "b": "I am b."}
    assert len(serving) == 1  # one warm process served both
    for name, claude, history, _ in worlds:
        session = results[name].session_id
        # the CLI ran on this world's Claude state, teamlead kept the run in this world's
        # history: each session's environment, not the warm process's, decided both
        assert list(claude.config_dir.glob(f"projects/*/{session}.jsonl"))
        assert poll(lambda c=claude: not cli_processes(c.state_dir), within_s=20) is not None
        kept = [json.loads(p.read_text()) for p in history.glob("*.json")]  # kept at the end
        assert [k.get("session_id") for k in kept] == [session]


def test_the_warm_process_ends_after_its_idle_time(offline: OfflineFactory) -> None:
    _, claude = offline(_answer("Done."))
    env = {**claude.env, "TEAMLEAD_CLAUDE_WARM": warm_idle(1.5)}

    assert anyio.run(_result, claude.options(cli_path=SHIM, env=env)).result == "Done."
    assert _serving(warm_idle(1.5))  # it serves the next session for 1.5 s

    assert poll(lambda: not _serving(warm_idle(1.5)), within_s=20) is not None
    # and the worker it had waiting ends with it
    assert poll(lambda: not _serving_or_waiting(warm_idle(1.5)), within_s=10) is not None


def test_two_workers_wait_for_the_next_sessions_and_one_that_ends_is_replaced(
    offline: OfflineFactory,
) -> None:
    claude, warm = _served_warm(offline, warm_idle(128))

    def waiting() -> list[int] | None:
        """The warm process's workers, once the one that served a session has ended and
        two wait (each replaced half a second after it took its session)."""
        pids = sorted(child.pid for child in warm.children() if _running(child))
        return pids if len(pids) == 2 else None

    first = poll(waiting, within_s=20)
    assert first is not None, [child.pid for child in warm.children()]
    ended, kept = first
    os.kill(ended, signal.SIGKILL)  # a waiting worker, ended from outside
    again = poll(lambda: (pids := waiting()) and ended not in pids and pids, within_s=20)
    assert again is not None and kept in again  # replaced; the other one waits on
    _, ancestors = _limits_seen(claude, warm_idle(128))
    assert "warm.main(s)" in ancestors, ancestors  # the next session runs warm
    assert _serving(warm_idle(128)) == [warm]  # in the same warm process


@pytest.mark.skipif(
    SHIM.read_bytes()[:4] != b"\x7fELF",
    reason="teamlead-claude was installed in Python (no C compiler at its install)",
)
def test_the_next_session_is_handed_over_by_the_compiled_launcher_on_the_first_ones_card(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    _, claude = offline(_answer("Done."))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**claude.env, "TEAMLEAD_CLAUDE_WARM": warm_idle(130), "XDG_RUNTIME_DIR": str(runtime)}
    options = claude.options(cli_path=SHIM, env=env)

    assert anyio.run(_result, options).result == "Done."  # the launcher in Python ran it
    (card,) = (runtime / f"teamlead-claude-{os.getuid()}").iterdir()  # and left its card
    left = card.stat()
    assert anyio.run(_result, options).result == "Done."
    again = card.stat()
    # read, not left again: the launcher in Python did not run
    assert (again.st_ino, again.st_mtime_ns) == (left.st_ino, left.st_mtime_ns)
    assert len(_serving(warm_idle(130))) == 1  # both ran in one warm process


def test_a_warm_session_imports_nothing_its_warm_process_did_not_load(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # a CLI path that loads what a warm process loads, runs the app's session as a worker
    # runs it, and writes down every module the session imported (each one an import paid
    # by every warm session, in a forked worker)
    _, claude = offline(_answer("Loaded."))
    imported = tmp_path / "imported.json"
    as_warm = tmp_path / "as-warm-teamlead-claude"
    as_warm.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "from teamlead._shim import finish, session, warm\n"
        "warm._load()\n"
        "before = set(sys.modules)\n"
        "code = session(sys.argv[1:])\n"
        f"with open({str(imported)!r}, 'w') as out:\n"
        "    json.dump(sorted(set(sys.modules) - before), out)\n"
        "finish()\n"
        "os._exit(code)\n"
    )
    as_warm.chmod(0o755)

    assert anyio.run(_result, claude.options(cli_path=as_warm)).result == "Loaded."
    assert poll(imported.exists, within_s=20) is not None
    assert json.loads(imported.read_text()) == []


#: the session's POSIX message queue limit (a limit node leaves as it is; it raises the
#: open-file one), and the command lines of its shell's ancestors
_LIMITS_AND_ANCESTORS = (
    "{ ulimit -Sq; p=$$; while [ \"$p\" -gt 1 ]; do tr '\\0' ' ' < /proc/$p/cmdline; echo; "
    "p=$(awk '/^PPid/ {print $2}' /proc/$p/status); done; } > limits.txt"
)


def _looks(req: ScriptedRequest) -> Reply:
    """A lead that runs :data:`_LIMITS_AND_ANCESTORS`, then answers."""
    if req.role == "lead" and not req.tool_uses_sent:
        return Reply.tools(bash(_LIMITS_AND_ANCESTORS))
    return Reply.text("Seen.")


def _limits_seen(claude: OfflineClaude, idle: str, cli: Path = SHIM) -> tuple[int, str]:
    """An app session on :func:`_looks`: the message queue limit its lead's shell had (in
    bytes), and that shell's ancestors."""

    async def allow(name: str, data: dict[str, Any], context: Any) -> Any:
        return PermissionResultAllow()

    async def prompt() -> AsyncIterator[dict[str, Any]]:  # can_use_tool needs a stream
        yield {"type": "user", "message": {"role": "user", "content": "Look."}}

    async def app() -> None:
        env = {**claude.env, "TEAMLEAD_CLAUDE_WARM": idle}
        options = claude.options(
            cli_path=cli, env=env, permission_mode="default", can_use_tool=allow
        )
        with anyio.fail_after(60):
            async for message in query(prompt=prompt(), options=options):
                if isinstance(message, ResultMessage):
                    return

    anyio.run(app)
    limit, _, ancestors = (claude.cwd / "limits.txt").read_text().partition("\n")
    return int(limit), ancestors


def _running(process: psutil.Process) -> bool:
    """Whether ``process`` runs (not ended, nor ended and not yet collected)."""
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _served_warm(offline: OfflineFactory, idle: str) -> tuple[OfflineClaude, psutil.Process]:
    """An app's session on :func:`_looks`, checked to have run warm, and the warm process
    (started with ``idle``) that ran it."""
    _, claude = offline(_looks)
    _, ancestors = _limits_seen(claude, idle)
    assert "warm.main(s)" in ancestors, ancestors
    (warm,) = _serving(idle)
    return claude, warm


def test_a_warm_session_has_the_apps_resource_limits(offline: OfflineFactory) -> None:
    _, claude = offline(_looks)
    soft, hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    before, ancestors = _limits_seen(claude, warm_idle(122))  # the warm process starts with these
    assert before == soft and "warm.main(s)" in ancestors, ancestors
    lower = soft // 2
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (lower, hard))  # the app's ulimit -Sq
    try:
        after, ancestors = _limits_seen(claude, warm_idle(122))
    finally:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (soft, hard))
    assert "warm.main(s)" in ancestors, ancestors  # run warm, by the same warm process
    assert after == lower  # with the app's limit, not the warm process's
    assert len(_serving(warm_idle(122))) == 1


def test_a_session_whose_limits_the_warm_process_cannot_take_runs_cold(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    _, claude = offline(_looks)
    soft, _ = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    lowered = tmp_path / "lowered-teamlead-claude"  # an app whose hard limit is lower
    lowered.write_text(f'#!/bin/bash\nulimit -q {soft // 2}\nexec "{SHIM}" "$@"\n')
    lowered.chmod(0o755)
    before, ancestors = _limits_seen(claude, warm_idle(124), lowered)  # it starts the warm process
    assert before == soft // 2 and "warm.main(s)" in ancestors, ancestors
    after, ancestors = _limits_seen(claude, warm_idle(124))  # an app whose hard limit is above it
    assert after == soft and "warm.main(s)" not in ancestors, ancestors  # cold, as it asks
    assert len(_serving(warm_idle(124))) == 1  # the warm process serves on


def test_a_session_right_after_the_warm_process_was_killed_runs_warm_again(
    offline: OfflineFactory,
) -> None:
    claude, warm = _served_warm(offline, warm_idle(126))
    warm.kill()  # from outside, while its workers wait for the next session
    # the waiting workers end with it (a launcher quick enough still reaches one that has
    # not ended yet, which runs its session), so the name is free: the next launcher
    # starts a new warm process instead of reaching a worker and running cold
    assert poll(lambda: not _serving_or_waiting(warm_idle(126)), within_s=20) is not None
    _, ancestors = _limits_seen(claude, warm_idle(126))
    assert "warm.main(s)" in ancestors, ancestors
    (again,) = _serving(warm_idle(126))
    assert again.pid != warm.pid


def _serving_or_waiting(idle: str) -> list[psutil.Process]:
    """The warm processes started with idle time ``idle``, and their workers (as found:
    one that ends meanwhile is still listed)."""
    return [p for p in warm_processes() if _idles(p, idle)]


def test_a_launcher_killed_mid_session_stops_the_session_and_its_cli(
    offline: OfflineFactory,
) -> None:
    _, claude = offline(FanOut.of(3, delays=[30, 30, 30]))
    launcher = shim_with_agents_running(SHIM, {**os.environ, **claude.env}, claude.cwd)
    try:
        assert cli_processes(claude.state_dir)
        launcher.send_signal(signal.SIGKILL)  # the app's CLI, gone without a word
        launcher.wait(timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.communicate(timeout=10)
    # the worker saw its launcher go, stopped the run as on SIGTERM: no CLI is left
    assert poll(lambda: not cli_processes(claude.state_dir), within_s=30) is not None


def test_a_bad_request_on_the_socket_leaves_the_warm_process_serving(
    offline: OfflineFactory,
) -> None:
    _, claude = offline(_answer("Still here."))
    env = {**claude.env, "TEAMLEAD_CLAUDE_WARM": warm_idle(60)}
    assert anyio.run(_result, claude.options(cli_path=SHIM, env=env)).result == "Still here."
    (warm,) = _serving(warm_idle(60))
    name = warm.info["cmdline"][-2]

    for junk in (b"", b"GET / HTTP/1.1\r\n\r\n", b"\xff" * 70_000):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect("\0" + name)
            bad.sendall(junk)
            bad.shutdown(socket.SHUT_WR)
            bad.settimeout(10)
            try:  # refused: the connection is closed (reset, if some was left unread)
                said = bad.recv(100)
            except ConnectionResetError:
                said = b""
            assert said == b""  # and nothing was said

    assert anyio.run(_result, claude.options(cli_path=SHIM, env=env)).result == "Still here."
    assert [p.pid for p in _serving(warm_idle(60))] == [warm.pid]


@pytest.mark.parametrize("value", ["soon", "-5"])
def test_a_bad_warm_setting_is_one_line_and_a_usage_failure(
    offline: OfflineFactory, value: str
) -> None:
    _, claude = offline(_answer("unused"))
    done = subprocess.run(
        [str(SHIM), *_STREAM_JSON],
        env={**os.environ, **claude.env, "TEAMLEAD_CLAUDE_WARM": value},
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        f"teamlead-claude: TEAMLEAD_CLAUDE_WARM: {value!r} is not a number of seconds "
        "(0 turns the warm process off)"
    ]


def test_a_stop_before_the_warm_process_took_the_session_is_a_quiet_exit(
    offline: OfflineFactory,
) -> None:
    _, claude = offline(_answer("unused"))
    idle = warm_idle(7.25)  # a warm process of its own: this launcher starts it, and waits for it
    launcher = subprocess.Popen(
        [str(SHIM), *_STREAM_JSON],
        env={**os.environ, **claude.env, "TEAMLEAD_CLAUDE_WARM": idle},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # the warm process it started is loading teamlead (about a second): the launcher
        # waits for it, with nothing of the session read yet
        assert poll(lambda: _serving_or_waiting(idle), within_s=20) is not None
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=20)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=10)
    assert (launcher.returncode, out, err) == (128 + signal.SIGINT, b"", b"")
    assert not cli_processes(claude.state_dir)


def test_a_warm_process_that_cannot_load_keeps_its_name_and_the_sessions_run_cold(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # a broken install: the relay's server stack does not import (only the warm process
    # loads it before a session; the cold command finds out when its run starts)
    broken = tmp_path / "broken" / "uvicorn"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("uvicorn is broken here")\n')
    _, claude = offline(_answer("Answered cold."))
    said: list[str] = []
    env = {**claude.env, "TEAMLEAD_CLAUDE_WARM": warm_idle(9.5), "PYTHONPATH": str(broken.parent)}
    options = claude.options(cli_path=SHIM, env=env, stderr=said.append)

    answers = [anyio.run(_result, options).result for _ in range(2)]

    assert answers == ["Answered cold.", "Answered cold."]
    # each session ran cold and said why its relay is off, in its own words
    assert said == ["request relay off, running direct: uvicorn is broken here"] * 2
    # the first launcher started one warm process, which refuses sessions but keeps its
    # name: the second launcher did not start another
    assert len(_serving_or_waiting(warm_idle(9.5))) == 1
