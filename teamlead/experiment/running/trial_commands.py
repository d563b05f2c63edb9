"""A trial's ``setup`` and ``check`` commands: run in the workspace, bounded, recorded.

Commands are argument lists run without a shell (write ``["sh", "-c", "..."]`` to get
one); a relative program or path resolves against the workspace. Their environment is
the trial's minus the API key and tokens. Output (stdout and stderr, interleaved) goes to
a file next to ``trials.jsonl``; the record keeps its path and the tail. A command that
outlives its timeout is stopped with its whole process group.

Example:
    >>> run = await run_command(["pytest", "-q"], cwd=ws, env=env, timeout_s=600,
    ...                         out_dir=out, name="baseline.t1.0.1.check")  # doctest: +SKIP
    >>> run.ok  # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

from ..._redact import redact
from ..specs.records import CommandRun

__all__ = ["OUTPUT_DIR", "TAIL_CHARS", "command_env", "output_name", "run_command"]

OUTPUT_DIR = "commands"
"""The directory, next to ``trials.jsonl``, that holds every command's output file."""

TAIL_CHARS = 2000
_SECRET_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
_GRACE_S = 2.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``env`` on top, minus the API key and tokens."""
    merged = {**os.environ, **env}
    for name in _SECRET_VARS:
        merged.pop(name, None)
    return merged


def output_name(*parts: object) -> str:
    """A file name from ``parts`` (variant, task, ...) that is safe on every file system."""
    return ".".join(_UNSAFE.sub("_", str(p)) or "_" for p in parts) + ".log"


async def _stop_group(process: Process) -> None:
    """SIGTERM to the command's process group, then SIGKILL to what is left of it: the
    command may be gone while a child it left behind ignores SIGTERM."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with anyio.move_on_after(_GRACE_S):
            await process.wait()


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    out_dir: Path,
    name: str,
) -> CommandRun:
    """Run ``argv`` in ``cwd`` and wait at most ``timeout_s``; never raises for its failure.

    Output goes to ``out_dir/commands/<name>``; the record names it relative to ``out_dir``.
    Whatever the command left running in its process group is stopped when it ends.
    """
    folder = out_dir / OUTPUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    relative = f"{OUTPUT_DIR}/{name}"
    start = time.monotonic()
    timed_out = False
    error: str | None = None
    code: int | None = None
    with path.open("wb") as sink:
        try:
            process = await anyio.open_process(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            error = f"cannot start {argv[0]!r}: {exc.strerror or exc}"
            sink.write((error + "\n").encode())
        else:
            try:
                with anyio.move_on_after(timeout_s) as scope:
                    code = await process.wait()
                timed_out = scope.cancelled_caught
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop_group(process)
            if timed_out:
                code = None
                sink.write(f"\n[teamlead: timed out after {timeout_s:g}s; stopped]\n".encode())
    return CommandRun(
        argv=list(argv),
        exit_code=code,
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        error=error,
        output_file=relative,
        output_tail=_tail(path),
    )


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - 4 * TAIL_CHARS))
            text = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return redact(text[-TAIL_CHARS:])
