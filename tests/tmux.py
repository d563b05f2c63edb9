"""Drive a real terminal: a command in a tmux pane, keys sent to it, the screen read back.

Each :class:`Pane` runs its own tmux server on a socket in the test's temp dir (never the
developer's sessions), starts one command in a detached session of a fixed size, and is
torn down with the server. ``screen()`` is what a person would see (``capture-pane -p``:
tmux has interpreted every byte the program wrote, so an escape sequence that got through
would show as its effect, not as text). Waits poll the screen with a deadline
(:func:`tests.polling.poll`); there are no fixed sleeps.

Example:
    >>> with Pane(tmp_path) as pane:  # doctest: +SKIP
    ...     pane.start([sys.executable, "-m", "teamlead", "ask", "hi"], env=env, cwd=cwd)
    ...     pane.wait_for("approve?")
    ...     pane.send("y")
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.polling import poll

__all__ = ["Pane", "needs_tmux"]

#: Skip a test when tmux is not installed (CI installs it: see .ci/run).
needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)"
)


class Pane:
    """One command in a detached tmux pane of ``width`` x ``height`` cells."""

    def __init__(self, tmp: Path, *, width: int = 200, height: int = 50) -> None:
        self.dir = Path(tmp) / "tmux"
        self.dir.mkdir(parents=True, exist_ok=True)
        # a unix socket's path is short (about 100 bytes): not under a test's long temp dir
        self._socket_dir = Path(tempfile.mkdtemp(prefix="tl-tmux-"))
        self.socket = self._socket_dir / "s"
        self.width = width
        self.height = height
        self.exit_file = self.dir / "exit-code"
        self.stty_file = self.dir / "stty-after"
        self._started = False

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=check,
        )

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        """Run ``argv`` in the pane with exactly ``env`` (plus TERM), in ``cwd``.

        The command's exit code (:meth:`exit_code`) and the terminal's modes after it
        (:meth:`terminal_modes`) are written to files when it ends; the pane stays open so
        its last screen can still be read.
        """
        script = self.dir / "run.sh"
        # the environment is the command's only, not the shell's: the shell that stays to
        # keep the pane open must not count as the command's process (tests look processes
        # up by their CLAUDE_CONFIG_DIR)
        # and the pane's size is the terminal's: a COLUMNS or LINES from the test runner's
        # environment would make the program lay out for another width
        assignments = " ".join(
            shlex.quote(f"{name}={value}")
            for name, value in env.items()
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and name not in ("COLUMNS", "LINES")
        )
        script.write_text(
            "#!/bin/sh\n"
            # Ctrl-C goes to the pane's whole process group: the shell must outlive it to
            # write the exit code (a handler, unlike an ignore, is not inherited by exec)
            + "trap : INT\n"
            + f"cd {shlex.quote(str(cwd))}\n"
            + f"env -i TERM=xterm-256color {assignments} "
            + " ".join(shlex.quote(a) for a in argv)
            + f"\ncode=$?\nstty -a > {shlex.quote(str(self.stty_file))} 2>&1\n"
            + f"echo $code > {shlex.quote(str(self.exit_file))}.tmp\n"
            + f"mv {shlex.quote(str(self.exit_file))}.tmp {shlex.quote(str(self.exit_file))}\n"
            + "exec sleep 600\n"  # keep the pane (and its last screen) until teardown
        )
        script.chmod(0o755)
        self._tmux(
            "-f",
            os.devnull,
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            f"env -i TERM=xterm-256color PATH={shlex.quote(os.environ.get('PATH', ''))} "
            f"{shlex.quote(str(script))}",
        )
        self._started = True

    def send(self, *keys: str, literal: bool = True) -> None:
        """Type ``keys`` (``literal``: as text; else tmux key names such as ``C-c``)."""
        args = ["send-keys", "-t", "t"]
        if literal:
            args.append("-l")
        self._tmux(*args, *keys)

    def screen(self) -> str:
        """The pane's visible text now, lines joined by newlines."""
        return self._tmux("capture-pane", "-p", "-t", "t", "-J").stdout

    def title(self) -> str:
        """The pane's title (what an OSC 0/2 sequence would set)."""
        return self._tmux("display-message", "-p", "-t", "t", "#{pane_title}").stdout.strip()

    def wait_for(self, expected: str | Callable[[str], bool], *, within_s: float = 60.0) -> str:
        """The screen once it shows ``expected`` (a substring or a predicate); fails with
        the last screen when the deadline comes first or the command ended without it."""

        def seen() -> str | None:
            text = self.screen()
            ok = expected(text) if callable(expected) else expected in text
            return text if ok else None

        found = poll(seen, within_s=within_s, every_s=0.1)
        if found is None:
            screen = self.screen()
            ended = f" (exit code {self.exit_code()})" if self.exit_code() is not None else ""
            raise AssertionError(f"the pane never showed {expected!r}{ended}:\n{screen}")
        return found

    def exit_code(self) -> int | None:
        """The command's exit code once it has ended, else ``None``."""
        try:
            return int(self.exit_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def wait_exit(self, *, within_s: float = 60.0) -> int:
        """The exit code, waiting for the command to end."""
        code = poll(
            lambda: (self.exit_code(),) if self.exit_code() is not None else None,
            within_s=within_s,
            every_s=0.1,
        )
        if code is None:
            raise AssertionError(f"the command did not end within {within_s} s:\n{self.screen()}")
        value = code[0]
        assert value is not None
        return value

    def terminal_modes(self) -> set[str]:
        """The pane terminal's modes once the command ended (``stty -a`` words such as
        ``icanon`` or ``-echo``), to check the command restored them."""
        if self.exit_code() is None:
            raise AssertionError("the command has not ended yet")
        return set(self.stty_file.read_text().replace(";", " ").split())

    def close(self) -> None:
        """Stop the tmux server and everything in its panes."""
        if self._started:
            self._tmux("kill-server", check=False)
            self._started = False
        shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> Pane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
