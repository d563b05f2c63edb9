"""The warm ``teamlead-claude``'s parts that need no CLI: the launcher's request on the wire
as the warm process reads it, the socket name that keeps worlds apart, the idle setting.
The sessions themselves run in ``tests/cli/test_claude_warm.py``."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

import _teamlead_claude as launcher
from teamlead._shim import bridge
from teamlead._shim.warm import Request, _launcher, _receive


def test_the_request_carries_argv_environment_directory_umask_and_the_three_streams(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TEAMLEAD_X", "a=b c\u00e9")  # an '=' and a non-ASCII value
    monkeypatch.setenv("EMPTY", "")
    argv = ["--input-format", "stream-json", "--system-prompt", "two\nlines"]
    ours, theirs = socket.socketpair()
    with ours, theirs:
        launcher._send(ours, argv)
        request = _receive(theirs)
    try:
        assert request.argv == argv
        assert request.env == dict(os.environ)
        assert request.cwd == str(tmp_path)
        mask = os.umask(0o022)
        os.umask(mask)
        assert request.umask == mask
        assert len(request.fds) == 3
        same = [os.path.samestat(os.fstat(fd), os.fstat(i)) for i, fd in enumerate(request.fds)]
        assert same == [True, True, True]
    finally:
        for fd in request.fds:
            os.close(fd)


@pytest.mark.parametrize(
    ("payload", "fds"),
    [
        (b"tlc2\0/\0" + b"22\0" + b"0", [0, 1, 2]),  # another protocol
        (b"tlc1\0/\0" + b"22\0" + b"0", [0, 1]),  # a stream missing
        (b"tlc1\0/", [0, 1, 2]),  # cut short
        (b"tlc1\0/\0" + b"zz\0" + b"0", [0, 1, 2]),  # no umask
        (b"tlc1\0/\0" + b"22\0" + b"x", [0, 1, 2]),  # no argument count
    ],
)
def test_a_request_that_is_not_a_launchers_is_refused(payload: bytes, fds: list[int]) -> None:
    with pytest.raises(ValueError):
        Request(payload, fds)


def test_the_rehearsal_goes_through_a_relay_of_its_own_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A waiting worker's rehearsal starts a relay and sends a request through it (to an
    upstream of its own, which answers), and writes nothing a real run would read."""
    world = tmp_path / "world"
    world.mkdir()
    for name in ("HOME", "TMPDIR", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(name, str(world))
    monkeypatch.setattr("tempfile.tempdir", None)
    assert bridge.rehearse() == 200
    assert list(world.iterdir()) == []


def test_the_warm_process_is_named_after_what_it_loaded_and_its_idle_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    first = launcher._name(300.0)
    assert launcher._name(300.0) == first  # the same interpreter, code and settings
    assert first.startswith(f"teamlead-claude/{os.getuid()}/")
    assert launcher._name(30.0) != first  # another idle time: another warm process

    monkeypatch.setenv("PYTHONHASHSEED", "7")  # a variable that shapes the interpreter
    assert launcher._name(300.0) != first
    monkeypatch.delenv("PYTHONHASHSEED")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not a key")  # the session's, not the process's
    assert launcher._name(300.0) == first

    stamp = folder.stat().st_mtime_ns
    (folder / "newly_installed.py").write_text("")  # a package installed on the path
    os.utime(folder, ns=(stamp + 10**9, stamp + 10**9))
    assert launcher._name(300.0) != first


@pytest.mark.parametrize(
    ("value", "idle"),
    [("", 300.0), (" ", 300.0), ("0", 0.0), ("2.5", 2.5), ("abc", None), ("-1", None)]
    + [("inf", None), ("nan", None)],
)
def test_the_idle_setting_is_a_number_of_seconds(value: str, idle: float | None) -> None:
    assert launcher._idle_s(value) == idle


def test_the_launcher_connects_to_its_own_users_warm_process() -> None:
    name = f"teamlead-claude-test/{os.getpid()}/mine"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0" + name)
        server.listen(1)
        conn = launcher._connect(name, 0.0, None)
        assert conn is not None
        conn.close()
    assert launcher._connect(name, 0.0, None) is None  # nobody listens there now


#: an interpreter another user may run (this one may live in a home only its user enters)
_SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(
    os.getuid() != 0 or not _SYSTEM_PYTHON.exists(),
    reason="needs another user: run as root, with /usr/bin/python3, to check",
)
def test_the_launcher_refuses_a_warm_name_another_user_took_first() -> None:
    # an abstract socket's name is anyone's to take: one taken by another user must not
    # get the session's environment (its credentials) or its streams
    name = f"teamlead-claude-test/{os.getpid()}/squatted"
    squatter = subprocess.Popen(
        [str(_SYSTEM_PYTHON), "-c", _SQUAT, name],
        user=65534,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "listening"
        assert launcher._connect(name, 0.0, None) is None
    finally:
        squatter.kill()
        squatter.communicate(timeout=10)


_SQUAT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0" + sys.argv[1])
s.listen(8)
print("listening", flush=True)
while True:
    s.accept()
"""


@pytest.mark.skipif(
    os.getuid() != 0 or not _SYSTEM_PYTHON.exists(),
    reason="needs another user: run as root, with /usr/bin/python3, to check",
)
def test_the_warm_process_serves_only_its_own_user() -> None:
    name = f"teamlead-claude-test/{os.getpid()}/served"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0" + name)
        server.listen(2)
        server.settimeout(30)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as own:
            own.connect("\0" + name)
            mine, _ = server.accept()
            with mine:
                assert _launcher(mine) == os.getpid()
        stranger = subprocess.Popen(
            [str(_SYSTEM_PYTHON), "-c", _KNOCK, name], user=65534, stdin=subprocess.PIPE
        )
        try:
            theirs, _ = server.accept()
            with theirs:
                assert _launcher(theirs) is None
        finally:
            stranger.communicate(b"", timeout=10)


_KNOCK = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\\0" + sys.argv[1])
sys.stdin.read()
"""
