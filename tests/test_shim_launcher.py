"""The compiled ``teamlead-claude`` (``_teamlead_claude.c``), against a warm process played
here: the session handed over on the launcher in Python's card, and everything else left
to that launcher (here a script that says how it was asked). Real sessions through it run
in ``tests/cli/test_claude_warm.py``."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import _teamlead_claude as launcher
from teamlead._shim.warm import Request, _receive

_SOURCE = Path(launcher.__file__).with_suffix(".c")
_STREAM = ["--output-format", "stream-json", "--input-format", "stream-json", "--verbose"]
#: the launcher in Python, played: how it was asked, and an exit code of its own
_PYTHON = '#!/bin/sh\necho "python [$TEAMLEAD_CLAUDE_LAUNCHER] $*"\nexit 3\n'

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("cc") is None,
    reason="the compiled launcher is built on Linux, with a C compiler",
)


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The launcher, compiled as the wheel's build does, with the launcher in Python
    played beside it."""
    folder = tmp_path_factory.mktemp("bin")
    program = folder / "teamlead-claude"
    subprocess.run(
        ["cc", "-O2", "-std=c11", "-Wall", "-Werror", "-o", str(program), str(_SOURCE)],
        check=True,
    )
    python = folder / "teamlead-claude-py"
    python.write_text(_PYTHON)
    python.chmod(0o755)
    return program


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The launcher's environment: its own runtime folder for the card."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TEAMLEAD_CLAUDE",))}
    return {**keep, "XDG_RUNTIME_DIR": str(tmp_path)}


def _card_path(binary: Path, env: dict[str, str]) -> Path:
    """Where the compiled launcher looks for its card (it says so when it finds none)."""
    said = _run(binary, _STREAM, env).stdout
    assert said.startswith("python [card:"), said
    return Path(said.split("[card:", 1)[1].split("]", 1)[0])


def _run(binary: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *argv], env=env, capture_output=True, text=True, timeout=30, check=False
    )


class _Warm:
    """A warm process played: it takes one session, hands its request to ``serve`` (which
    answers on the connection), and keeps what it was sent."""

    def __init__(self, name: str, serve: Callable[[socket.socket, Request], None]) -> None:
        self.name, self.serve = name, serve
        self.request: Request | None = None
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + name)
        self.listener.listen(1)
        self.listener.settimeout(30)
        self.thread = threading.Thread(target=self._one, daemon=True)
        self.thread.start()

    def _one(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            try:
                self.request = _receive(conn)
            except ValueError:  # the knock of close()
                return
            for fd in self.request.fds:
                os.close(fd)
            self.serve(conn, self.request)

    def close(self) -> None:
        if self.thread.is_alive():  # still in its accept: a connection with nothing ends it
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as knock:
                knock.connect("\0" + self.name)
        self.thread.join(30)
        self.listener.close()


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Callable[[Callable[[socket.socket, Request], None]], _Warm]]:
    made: list[_Warm] = []

    def start(serve: Callable[[socket.socket, Request], None]) -> _Warm:
        made.append(_Warm(f"teamlead-claude-test/{os.getpid()}/{tmp_path.name}", serve))
        return made[-1]

    yield start
    for one in made:
        one.close()


def _leave_card(
    card: Path, name: str, env: dict[str, str], seen: list[tuple[str, int, int]]
) -> None:
    """The card the launcher in Python leaves, for a launcher started with ``env``."""
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        launcher._card(str(card), name, seen)
    finally:
        os.environ.clear()
        os.environ.update(before)
    assert card.exists()


def _card_reading(binary: Path, env: dict[str, str], served: _Warm, *files: Path) -> Path:
    """The card naming ``served``, made from ``files``: each written empty and read, or
    read as missing (``missing`` in its name)."""
    card = _card_path(binary, env)
    seen: list[tuple[str, int, int]] = []
    for file in files:
        if "missing" not in file.name:
            file.write_text("")
        with contextlib.suppress(OSError):  # a missing one is read as missing
            launcher._stat(str(file), seen)
    _leave_card(card, served.name, env, seen)
    return card


def _serve_exit(code: int) -> Callable[[socket.socket, Request], None]:
    def serve(conn: socket.socket, _request: Request) -> None:
        conn.sendall(b"pid %d\n" % os.getpid())
        assert conn.recv(1) == b"g"
        conn.sendall(b"exit %d\n" % code)

    return serve


def test_with_no_card_the_launcher_in_python_runs_and_is_told_where_to_leave_one(
    binary: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = _run(binary, _STREAM, env)
    assert done.returncode == 3  # the launcher in Python's own exit code
    card = _card_path(binary, env)
    assert card.parent == tmp_path / f"teamlead-claude-{os.getuid()}"
    assert done.stdout.strip().endswith(" ".join(_STREAM))  # with the session's argv


@pytest.mark.parametrize(
    ("argv", "variables"),
    [
        (["--version"], {}),  # not a stream-json session
        (_STREAM, {"TEAMLEAD_CLAUDE_WARM": "0"}),  # warm processes off
    ],
)
def test_anything_but_a_warm_session_is_the_launcher_in_pythons(
    binary: Path, env: dict[str, str], argv: list[str], variables: dict[str, str]
) -> None:
    done = _run(binary, argv, {**env, **variables})
    assert (done.returncode, done.stdout) == (3, f"python [] {' '.join(argv)}\n")


def test_a_card_that_holds_hands_the_session_to_the_warm_process_and_returns_its_exit(
    binary: Path, env: dict[str, str], warm: Callable[..., _Warm], tmp_path: Path
) -> None:
    served = warm(_serve_exit(7))
    _card_reading(binary, env, served, tmp_path / "module.py", tmp_path / "missing")
    (tmp_path / "work").mkdir()
    done = subprocess.run(
        [str(binary), *_STREAM, "--model", "two words"],
        env=env,
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, "", "")
    served.thread.join(30)
    request = served.request
    assert request is not None
    assert request.argv == [*_STREAM, "--model", "two words"]
    assert request.cwd == str(tmp_path / "work")
    assert request.env == env  # the whole environment, and nothing of the launchers'


@pytest.mark.parametrize(
    "change",
    ["a file read changed", "a variable added", "another idle time", "a card others can write"],
)
def test_a_card_that_no_longer_holds_is_left_to_the_launcher_in_python(
    binary: Path, env: dict[str, str], warm: Callable[..., _Warm], tmp_path: Path, change: str
) -> None:
    served = warm(_serve_exit(0))
    code = tmp_path / "module.py"
    card = _card_reading(binary, env, served, code)
    if change == "a file read changed":
        code.write_text("changed = True\n")
    elif change == "a variable added":
        env = {**env, "PYTHONHASHSEED": "7"}
    elif change == "another idle time":
        env = {**env, "TEAMLEAD_CLAUDE_WARM": "60"}
    else:
        card.chmod(0o666)
    done = _run(binary, _STREAM, env)
    assert done.stdout.startswith(f"python [card:{card}]"), done.stdout
    assert served.request is None  # nothing reached the warm process


@pytest.mark.parametrize(
    ("answer", "handoff"),
    [(b"cold\n", "cold"), (b"", "card:")],  # it will not run it; it ended before it held
)
def test_a_warm_process_that_does_not_take_the_session_leaves_it_to_the_launcher_in_python(
    binary: Path,
    env: dict[str, str],
    warm: Callable[..., _Warm],
    answer: bytes,
    handoff: str,
) -> None:
    card = _card_path(binary, env)

    def serve(conn: socket.socket, _request: Request) -> None:
        conn.sendall(answer)

    served = warm(serve)
    _leave_card(card, served.name, env, [])
    done = _run(binary, _STREAM, env)
    assert done.returncode == 3
    assert done.stdout.startswith(f"python [{handoff}"), done.stdout


def test_the_stop_signals_are_passed_on_to_the_session(
    binary: Path, env: dict[str, str], warm: Callable[..., _Warm]
) -> None:
    card = _card_path(binary, env)
    taken, got = threading.Event(), []

    def serve(conn: socket.socket, _request: Request) -> None:
        conn.sendall(b"pid %d\n" % os.getpid())
        assert conn.recv(1) == b"g"
        taken.set()
        got.append(conn.recv(1))  # the signal, as a byte
        conn.sendall(b"exit 143\n")

    served = warm(serve)
    _leave_card(card, served.name, env, [])
    with subprocess.Popen([str(binary), *_STREAM], env=env, stdin=subprocess.PIPE) as app:
        assert taken.wait(30), "the session was not handed over"
        app.send_signal(signal.SIGTERM)
        assert app.wait(30) == 143
    assert got == [bytes([signal.SIGTERM])]


def test_a_warm_process_that_ends_mid_session_is_said(
    binary: Path, env: dict[str, str], warm: Callable[..., _Warm]
) -> None:
    card = _card_path(binary, env)

    def serve(conn: socket.socket, _request: Request) -> None:
        conn.sendall(b"pid %d\n" % os.getpid())
        assert conn.recv(1) == b"g"

    served = warm(serve)
    _leave_card(card, served.name, env, [])
    done = _run(binary, _STREAM, env)
    assert done.returncode == 1
    assert done.stderr == "teamlead-claude: the warm teamlead process running it ended early\n"


def test_a_card_is_left_only_in_a_folder_of_this_users_that_no_one_else_can_write(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    launcher._card(str(folder / "card"), "teamlead-claude/x", [])
    assert not (folder / "card").exists()
    launcher._card(str(tmp_path / "own" / "card"), "teamlead-claude/x", [])
    assert (tmp_path / "own" / "card").stat().st_mode & 0o077 == 0
    assert (tmp_path / "own").stat().st_mode & 0o777 == 0o700
