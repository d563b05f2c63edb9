"""The real-CLI tier: the bundled Claude Code CLI against the scripted model server.

Every test that drives the real CLI lives here, with the ``cli`` mark (``tests/test_house.py``
checks that no test with it lives elsewhere); a few cheap tests sit beside the real runs
whose set-up they share. tests/conftest.py's autouse fixtures apply here as everywhere: each
test has its own Claude state, cache, temp dir and process state.

What the tier's modules share:

- :func:`offline`: a scripted server and an isolated CLI home, stopped after the test;
- :data:`TEAMLEAD`, the one way to start the ``teamlead`` command, and :func:`ask` and
  :func:`start_ask`, the one way to run ``teamlead ask`` on a scripted model;
- :func:`run`, :func:`run_on_a_client` and :func:`finished`, a run in this process through
  :func:`teamlead.run` or a ``ClaudeSDKClient``;
- :func:`cli_processes`, the CLI processes a test started, to check none is left.

The scripts and the readers of what the scripted server saw are in ``scripted.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import teamlead
from teamlead.clock import SYSTEM_CLOCK, Clock
from teamlead.events import Finished
from teamlead.testing import OfflineClaude, Script, ScriptedServer

from ..isolated import TEAMLEAD, run_to_the_end, warm_processes

__all__ = [
    "TEAMLEAD",
    "OfflineFactory",
    "ask",
    "ask_env",
    "cli_processes",
    "shim_asked",
    "shim_with_agents_running",
    "warm_processes",
    "finished",
    "run",
    "run_on_a_client",
    "start_ask",
]

OfflineFactory = Callable[..., tuple[ScriptedServer, OfflineClaude]]


@pytest.fixture
def offline(tmp_path: Path) -> Iterator[OfflineFactory]:
    """Start a scripted server and an isolated CLI home: ``server, claude = offline(script)``."""
    started: list[ScriptedServer] = []

    def make(script: Script, **server_kwargs: object) -> tuple[ScriptedServer, OfflineClaude]:
        server = ScriptedServer(script, **server_kwargs).start()  # type: ignore[arg-type]
        started.append(server)
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / f"claude-{len(started)}")
        return server, claude

    yield make
    for server in started:
        server.stop()


# -- the teamlead command --------------------------------------------------------------------
def ask_env(
    claude: OfflineClaude,
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a ``teamlead`` command on ``claude``'s scripted model: ``base``
    (the test's own ``os.environ`` by default, which tests/conftest.py isolates; a
    module-scoped fixture, set up before that isolation, passes ``isolated_env(root)``),
    ``claude``'s variables over it, and ``extra`` over those."""
    return {**(os.environ if base is None else base), **claude.env, **(extra or {})}


def ask(
    claude: OfflineClaude,
    *args: str,
    prompt: str = "Investigate.",
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 150,
    **run: Any,
) -> subprocess.CompletedProcess[str]:
    """``teamlead ask PROMPT ARGS`` as a user runs it, to its end, in ``claude``'s project
    (or ``cwd``) with :func:`ask_env`'s environment (``run`` goes to ``subprocess.run``:
    ``stdin``...). A run that does not end within ``timeout`` is killed and comes back
    with code -1 (:func:`~tests.isolated.run_to_the_end`), so that runs side by side fail
    one by one."""
    return run_to_the_end(
        [*TEAMLEAD, "ask", prompt, *args],
        env=ask_env(claude, base, extra),
        cwd=cwd or claude.cwd,
        timeout=timeout,
        **run,
    )


def start_ask(
    claude: OfflineClaude,
    *args: str,
    prompt: str = "Investigate.",
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """:func:`ask`, started in the background (for a test that signals or watches it): its
    output is piped unless ``popen`` says otherwise; the caller ends it (``communicate``)."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen(
        [*TEAMLEAD, "ask", prompt, *args],
        env=ask_env(claude, base, extra),
        cwd=cwd or claude.cwd,
        text=True,
        **streams,
    )


# -- a run in this process -------------------------------------------------------------------
async def run(
    options: Any,
    policy: teamlead.Policy | None = None,
    limit_s: float = 150,
    clock: Clock = SYSTEM_CLOCK,
    *,
    prompt: str = "Investigate.",
    into: list[Any] | None = None,
    **query: Any,
) -> list[Any]:
    """Every item of one :func:`teamlead.run` run, within ``limit_s``; each is also
    put in ``into`` as it comes (for a test that watches the run as it goes)."""
    items = [] if into is None else into
    with anyio.fail_after(limit_s):
        async for item in teamlead.run(prompt, options, policy=policy, clock=clock, **query):
            items.append(item)
    return items


async def run_on_a_client(
    options: Any,
    policy: teamlead.Policy,
    limit_s: float = 150,
    clock: Clock = SYSTEM_CLOCK,
    *,
    into: list[Any] | None = None,
) -> list[Any]:
    """:func:`run`, on a ``ClaudeSDKClient`` read with ``receive_all``."""
    from claude_agent_sdk import ClaudeSDKClient

    items: list[Any] = [] if into is None else into
    with anyio.fail_after(limit_s):
        async with (
            teamlead.ClientRun(options, policy, clock=clock) as client_run,
            ClaudeSDKClient(options=client_run.options) as client,
        ):
            await client.query("Investigate.")
            async for item in teamlead.receive_all(client, client_run):
                items.append(item)
    return items


def finished(items: list[Any]) -> Finished:
    """The run's last item, its :class:`~teamlead.events.Finished`."""
    done = items[-1]
    assert isinstance(done, Finished)
    return done


# -- the processes a test started ------------------------------------------------------------
def end_ask(run: subprocess.Popen[str] | None, state_dir: Path) -> None:
    """However the test ended: kill ``run`` if it still runs, close its pipes, and kill
    every CLI process it left under ``state_dir``."""
    if run is not None:
        if run.poll() is None:
            run.kill()
        run.communicate(timeout=10)
    for leftover in cli_processes(state_dir):
        leftover.kill()


def cli_processes(state_dir: Path) -> list[psutil.Process]:
    """Live processes whose CLAUDE_CONFIG_DIR is under ``state_dir``: the CLI children a
    test started there (and all they started). Zombies are left out: they have ended."""
    found = []
    for proc in psutil.process_iter(["environ"]):
        try:
            env = proc.info["environ"] or {}
            ours = str(state_dir) in env.get("CLAUDE_CONFIG_DIR", "") and proc.pid != os.getpid()
            if ours and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:  # it ended while we looked
            continue
    return found


def shim_asked(
    shim: Path,
    env: Mapping[str, str],
    cwd: Path,
    *args: str,
    prompt: str = "Investigate.",
    stderr: Any = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """``teamlead-claude`` started as an SDK app starts it (stream-json both ways, then
    ``args``; its stderr discarded unless ``stderr`` says where), given one user message
    (``prompt``); the caller ends it (``communicate``)."""
    stream_json = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]
    process = subprocess.Popen(
        [str(shim), *stream_json, *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    assert process.stdin is not None and process.stdout is not None
    user = {"type": "user", "message": {"role": "user", "content": prompt}}
    process.stdin.write(json.dumps(user).encode() + b"\n")
    process.stdin.flush()
    return process


def shim_with_agents_running(
    shim: Path, env: Mapping[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    """:func:`shim_asked`, read until its agents run; the caller ends it (``communicate``)."""
    process = shim_asked(shim, env, cwd)
    assert process.stdout is not None
    for line in process.stdout:
        if json.loads(line).get("subtype") == "task_started":
            return process
    process.kill()
    process.communicate(timeout=10)
    raise AssertionError("the command ended before any agent ran")
