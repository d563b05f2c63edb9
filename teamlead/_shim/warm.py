"""The warm ``teamlead-claude``: a process with teamlead loaded that serves the next sessions.

Loading teamlead, the Agent SDK and the relay takes a second of CPU; the bare CLI answers a
short query in under half of one. So the ``teamlead-claude`` an app starts is a launcher
that loads nothing of them (``_teamlead_claude``, outside this package): for a stream-json
session it asks a warm process (:func:`main`) over a Unix socket to run it, and only
runs it itself when no warm process can.

The warm process is started by the first launcher that finds none, runs detached, and ends
after ``idle_s`` seconds without a session. Its socket (in Linux's abstract namespace) is
named after what it loaded: the user, the interpreter and its module path, the code of
teamlead and of the installed packages, and the mount namespace; it serves only its own
user's processes (the peer's credentials are checked). For each session it forks a worker,
which takes the launcher's standard streams, argv, environment (the whole of it), working
directory, umask and resource limits, and runs the session exactly as ``teamlead-claude``
run cold would (:func:`teamlead._shim.session`). While it waits, a worker goes once through
a session's start with nothing to serve (:func:`.bridge.rehearse`), so the pages a session
writes are its own already and each piece has set itself up. The launcher passes on the
stop signals it gets; if the launcher is gone, the worker stops as on ``SIGTERM``. The
worker's exit code becomes the launcher's.

The protocol, one connection a session: the launcher sends a length-prefixed request (its
three standard streams attached) ``tlc1 NUL cwd NUL umask NUL argc NUL argv... NUL
env...``; the worker answers ``pid N`` once it holds the streams, and touches them only
after the launcher's ``g`` (a launcher that gave up meanwhile runs the session itself), or
``cold`` when it will not run the session (the launcher runs it then; one that gets no
answer, its warm process ending, asks once more); then the launcher sends a byte per stop
signal, and the worker's last line is ``exit N``.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import queue
import resource
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence

from ..clock import SYSTEM_CLOCK

__all__ = ["Request", "main"]

_REQUEST_S = 5.0  # a connected launcher sends its request and its go in this
_MAX_REQUEST = 4 << 20
_REAP_TICK_S = 1.0
_WORKERS = 2  # workers waiting for a session at once
# a worker that took a session is replaced this much later (the session's CLI starts
# meanwhile, on the same cores)
_SETTLE_S = 0.5
_PR_SET_PDEATHSIG = 1
_MAGIC = b"tlc1"
_COLD = b"cold\n"  # the answer of a worker that will not run the session
# what a session loads beyond the doors: the bridge (which a command that is not a
# session never loads), and modules the relay and the event loop import late
_LATE_IMPORTS = (
    "teamlead._shim.bridge",
    "anyio",
    "anyio._backends._asyncio",
    "anyio._core._signals",
    "anyio._core._subprocesses",
    "uvicorn.lifespan.off",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "netrc",
    "sqlite3",
)


class Request:
    """One launcher's session: what the worker runs, and the streams it runs on.

    Attributes:
        cwd: the launcher's working directory.
        umask: its umask.
        argv: its arguments (without the program name).
        env: its whole environment.
        fds: its standard input, output and error, received.
    """

    def __init__(self, payload: bytes, fds: Sequence[int]) -> None:
        fields = payload.split(b"\0")
        if len(fields) < 4 or fields[0] != _MAGIC or len(fds) != 3:
            raise ValueError("not a teamlead-claude request")
        argc = int(fields[3])
        self.cwd = os.fsdecode(fields[1])
        self.umask = int(fields[2], 8)
        self.argv = [os.fsdecode(a) for a in fields[4 : 4 + argc]]
        pairs = (item.partition(b"=") for item in fields[4 + argc :] if item)
        self.env = {os.fsdecode(k): os.fsdecode(v) for k, _, v in pairs}
        self.fds = list(fds)


def main(listener: socket.socket) -> None:
    """Load teamlead and serve sessions on ``listener`` until ``idle_s`` seconds (the
    process's second argument) pass without one. ``listener`` listens on the warm
    process's name already (bound before anything was loaded, so the launcher that
    started it connects at once and waits for the load, however loaded the machine).

    Workers are forked before their sessions come (each waits in ``accept``, its start
    rehearsed), :data:`_WORKERS` at once, so a session right after another still finds
    one ready. One that took a session is replaced once that session's CLI has started
    (:data:`_SETTLE_S` later): a fork (page tables copied) and a rehearsal beside a
    session's start would slow it. With none waiting, one is forked for a launcher that
    comes meanwhile.
    """
    idle_s = float(sys.argv[2])
    os.chdir("/")  # a warm process holds no directory of anyone's
    try:
        _load()
        usable = threading.active_count() == 1  # a thread would not survive the forks
        gc.freeze()  # the collector of a worker never walks (and so copies) what is loaded
    except Exception:  # a broken install: the launchers run cold and show why
        usable = False
    if not usable:  # keep the name, so the launchers do not start another, and refuse
        _refuse(listener, idle_s)
        return
    clock, warm = SYSTEM_CLOCK, os.getpid()
    waiting: dict[int, int] = {}  # a waiting worker's pipe (read once it is taken): its pid
    now = clock.monotonic()
    due = [now + i * _SETTLE_S for i in range(_WORKERS)]  # when the others are forked
    idle_at, launcher = now + idle_s, False
    while True:
        now = clock.monotonic()
        if now >= idle_at:  # idle: the waiting workers end with the warm process
            for pid in waiting.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            return
        if due and (now >= due[0] or launcher):  # due, or a launcher waits for none
            del due[0]
            taken, tell = os.pipe()
            pid = os.fork()
            if pid == 0:
                for fd in (taken, *waiting):
                    os.close(fd)
                _worker(listener, tell, warm)
            os.close(tell)
            waiting[taken], launcher = pid, False
            continue
        until = min(idle_at, due[0]) if due else idle_at
        watched: list[int | socket.socket] = [*waiting] if waiting else [listener]
        ready = select.select(watched, [], [], min(_REAP_TICK_S, max(0.0, until - now)))[0]
        _reap()
        launcher, now = listener in ready, clock.monotonic()
        for fired in ready:  # a session (or the worker ended: its pipe closed)
            if isinstance(fired, int):
                os.close(fired)
                del waiting[fired]
                due.append(now + _SETTLE_S)
                idle_at = now + idle_s


def _refuse(listener: socket.socket, idle_s: float) -> None:
    """Answer every connection ``cold`` (its launcher runs its session itself) until
    ``idle_s`` seconds pass without one."""
    listener.settimeout(idle_s)
    with contextlib.suppress(OSError):
        while True:
            conn = listener.accept()[0]
            with contextlib.suppress(OSError):
                conn.sendall(_COLD)
            conn.close()


def _load() -> None:
    """Load every module a session uses, so a worker starts with nothing left to import."""
    import importlib
    import pkgutil

    import teamlead

    for wing in pkgutil.iter_modules(teamlead.__path__, "teamlead."):
        if wing.ispkg and not wing.name.endswith((".experiment", ".testing")):
            importlib.import_module(wing.name)
    done: set[str] = set()
    while todo := sorted(m for m in sys.modules if m.startswith("teamlead") and m not in done):
        for name in todo:  # every name a loaded door names (and the doors those load)
            done.add(name)
            module = sys.modules[name]
            for attr in getattr(module, "__all__", ()):
                getattr(module, attr, None)
    from . import read_setup

    with contextlib.suppress(Exception):  # the policy of this environment's variables
        read_setup()
    for name in _LATE_IMPORTS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            for attr in getattr(module, "__all__", ()):  # a lazy module's names
                getattr(module, attr, None)


def _launcher(conn: socket.socket) -> int | None:
    """The pid of the process at the other end of ``conn`` if it is this user's, else
    ``None``."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    pid, uid, _gid = struct.unpack("iII", creds)
    return int(pid) if uid == os.getuid() else None


def _limits_of(pid: int) -> bool:
    """Take process ``pid``'s resource limits (the launcher's ``ulimit`` values, which the
    session's processes would have had cold); ``False`` if one cannot be taken (a hard
    limit above this process's): the launcher then runs its session itself."""
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            kind = getattr(resource, name)
            try:
                resource.setrlimit(kind, resource.prlimit(pid, kind))
            except (OSError, ValueError):
                return False
    return True


def _reap() -> None:
    """Collect the workers that have ended."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _worker(listener: socket.socket, tell: int, warm: int) -> None:
    """Wait for one launcher (``tell`` the warm process, pid ``warm``, when it comes) and
    run its session in this process; never returns. A worker still waiting ends with its
    warm process (a worker left waiting would hold the name and turn the next launcher
    away). It rehearses its session's start first, unless a launcher is waiting."""
    _ends_with_parent(signal.SIGKILL)
    if os.getppid() != warm:  # it ended before that
        os._exit(0)
    if not select.select([listener], [], [], 0)[0]:
        with contextlib.suppress(Exception):  # the session's start, rehearsed: faster then
            from .bridge import rehearse

            rehearse()
    # the thread that relays the launcher's stop signals, started now, not on its way
    relay: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
    threading.Thread(target=lambda: _relay_signals(relay.get()), daemon=True).start()
    try:
        conn = _accept(listener)
        os.write(tell, b"1")
        os.close(tell)
        listener.close()
        launcher = _launcher(conn)
        if launcher is None:
            os._exit(0)
        conn.settimeout(_REQUEST_S)
        request = _receive(conn)
        if not _limits_of(launcher):  # the launcher runs it cold
            conn.sendall(_COLD)
            os._exit(0)
        conn.sendall(b"pid %d\n" % os.getpid())
        entered = _enter(request)  # while the launcher answers: nothing of it is touched
        if conn.recv(1) != b"g":  # the launcher gave up and runs it itself
            os._exit(0)
        conn.settimeout(None)
    except (OSError, ValueError):
        os._exit(0)
    code = 1
    try:
        code = _run(request, conn, entered, relay.put)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # shown as the command run cold would show it; exit 1
        traceback.print_exc()
    finally:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the app sees its streams end before the launcher's exit
            os.dup2(null, fd)
        with contextlib.suppress(OSError):
            conn.sendall(b"exit %d\n" % code)
        os._exit(code)


def _accept(listener: socket.socket) -> socket.socket:
    """The next launcher's connection; from then on, the session goes on whatever becomes
    of the warm process."""
    conn = listener.accept()[0]
    _ends_with_parent(0)
    return conn


def _ends_with_parent(signum: int) -> None:
    """The signal this process gets when its parent ends (0: none), as ``prctl`` sets it."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _receive(conn: socket.socket) -> Request:
    """The launcher's request, with its standard streams."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            if len(data) >= 4 and int.from_bytes(data[:4], "big") > _MAX_REQUEST:
                raise ValueError("not a teamlead-claude request: too large")
            more = conn.recv(1 << 16)
            if not more:
                raise ValueError("not a teamlead-claude request: cut short")
            data += more
        return Request(data[4 : 4 + int.from_bytes(data[:4], "big")], fds)
    except BaseException:
        for fd in fds:  # streams received with a request refused are closed
            os.close(fd)
        raise


def _enter(request: Request) -> str | None:
    """Take the launcher's environment, umask, argv and working directory (and the policy
    its variables describe); what kept this process from its directory, if anything."""
    from . import read_policy

    now = dict(os.environ)  # set only what differs: each change is a putenv
    for name in now.keys() - request.env.keys():
        del os.environ[name]
    os.environ.update((k, v) for k, v in request.env.items() if now.get(k) != v)
    tempfile.tempdir = None  # found again, from this environment
    os.umask(request.umask)
    sys.argv = ["teamlead-claude", *request.argv]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(Exception):  # parsed now, told by the session
        read_policy(request.env)
    try:
        os.chdir(request.cwd)
    except OSError as exc:
        return f"teamlead-claude: cannot enter {request.cwd!r}: {exc.strerror}"
    return None


def _run(
    request: Request,
    conn: socket.socket,
    entered: str | None,
    relay_signals: Callable[[socket.socket], None],
) -> int:
    """Become the launcher's ``teamlead-claude`` (:func:`_enter` took its environment) and
    run its session, the launcher's stop signals relayed from ``conn`` once it runs."""
    from . import finish, session

    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    if entered is not None:
        print(entered, file=sys.stderr)
        return 1
    relay_signals(conn)
    code = session(request.argv)
    finish()
    return code


def _relay_signals(conn: socket.socket) -> None:
    """The launcher's stop signals, to this process; its end (killed) stops it as SIGTERM."""
    while True:
        try:
            got = conn.recv(16)
        except OSError:
            got = b""
        for signum in got or bytes([signal.SIGTERM]):
            os.kill(os.getpid(), signum)
        if not got:
            return
