"""The launcher of ``teamlead-claude`` in Python: it hands the session to a warm teamlead.

An SDK app starts ``teamlead-claude`` for every query, and loading teamlead with the Agent
SDK and the relay costs a second of CPU, more than the whole of a short query on the bare
CLI. So this module (outside the ``teamlead`` package, whose import would load it) uses only
the interpreter's built-in modules: for a stream-json session it asks a warm teamlead
process (``teamlead._shim.warm``) to run the session on this process's standard streams,
starting that process first if none serves this user, interpreter and code; it passes on
the stop signals it gets and exits with the session's exit code. Anything else (another
command line, ``TEAMLEAD_CLAUDE_WARM=0``, a platform without abstract Unix sockets, a warm
process that cannot be reached or started) runs in this process, cold, as
``teamlead._shim.main``: the same session either way.

It is installed as ``teamlead-claude-py``. ``teamlead-claude`` is the same launcher compiled
(``_teamlead_claude.c``), which hands a session over without an interpreter's start on the
card this one leaves it (:func:`_card`), and runs this one in its place for all else; where
it could not be compiled, ``teamlead-claude`` is this one too (``hatch_build.py``).

``TEAMLEAD_CLAUDE_WARM``: the seconds a warm process waits for the next session before it
ends (default 300; 0 turns the warm process off).
"""

from __future__ import annotations

import os
import sys

try:
    from _socket import AF_UNIX, SCM_RIGHTS, SO_PEERCRED, SOCK_STREAM, SOL_SOCKET
    from _socket import socket as Socket
except ImportError:  # no Unix sockets (Windows): always cold
    pass

WARM_VAR = "TEAMLEAD_CLAUDE_WARM"
# set by the compiled launcher (``_teamlead_claude.c``) that runs this one in its place:
# ``card:PATH`` (leave it the warm process's name there) or ``cold``
HANDOFF_VAR = "TEAMLEAD_CLAUDE_LAUNCHER"
_CARD_MAGIC = b"tlcc1"
_IDLE_S = 300.0
_START_S = 3.0  # a started warm process listens in this (before it loads teamlead)
_READY_S = 60.0  # ... and has loaded teamlead in this
_TRIES = 3  # connections to a warm process a session tries before it runs cold
_INSTALLED = ("site-packages", "dist-packages")  # the folders an install puts this file in
_SHAPING = ("PYTHON", "LC_", "LANG")  # the variables that shape what an interpreter loads


def main() -> None:
    """Run ``teamlead-claude``: warm when it can, else here."""
    handoff = os.environ.pop(HANDOFF_VAR, "")  # not the session's
    argv = sys.argv[1:]
    idle = _idle_s(os.environ.get(WARM_VAR, ""))
    if idle is None:
        sys.stderr.write(
            f"teamlead-claude: {WARM_VAR}: {os.environ[WARM_VAR]!r} is not a number of "
            "seconds (0 turns the warm process off)\n"
        )
        sys.stderr.flush()
        os._exit(2)
    warm = handoff != "cold" and sys.platform == "linux"
    if idle and warm and _is_stream_session(argv):
        import _signal  # type: ignore[import-not-found]

        def quiet(signum: int, _frame: object) -> None:  # nothing of the session ran yet
            os._exit(128 + signum)

        stops = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
        before = {signum: _signal.signal(signum, quiet) for signum in stops}
        code = _warm(argv, idle, handoff[5:] if handoff.startswith("card:") else "")
        if code is not None:
            os._exit(code)
        for signum, handler in before.items():  # as a fresh interpreter has them
            _signal.signal(signum, handler)
    from teamlead._shim import main as cold

    cold()


def _idle_s(value: str) -> float | None:
    """The warm process's idle time ``TEAMLEAD_CLAUDE_WARM`` asks for (0: off); ``None``
    for a value that is not a number of seconds."""
    try:
        idle = float(value) if value.strip() else _IDLE_S
    except ValueError:
        return None
    return idle if 0 <= idle < float("inf") else None


def _is_stream_session(argv: list[str]) -> bool:
    if "--input-format=stream-json" in argv:
        return True
    pairs = zip(argv, argv[1:])  # noqa: B905 (one shorter, on purpose)
    return ("--input-format", "stream-json") in pairs


def _warm(argv: list[str], idle: float, card: str) -> int | None:
    """The session's exit code, run by a warm process; ``None`` if none could take it
    (nothing of the session was read then). The warm process's name is left on ``card``
    for the compiled launcher, if it asked."""
    seen: list[tuple[str, int, int]] | None = [] if card else None
    name = _name(idle, seen)
    if seen is not None:
        _card(card, name, seen)
    # again if the process behind the name ended as it was asked, or if the one started
    # found the name still taken (by a warm process, or its worker, that is ending)
    for _try in range(_TRIES):
        conn = _connect(name, 0.0, None)
        if conn is None:
            started = _start(name, idle)
            if started is None:
                return None
            conn = _connect(name, _START_S, started)
            if conn is None:
                continue
        try:
            conn.settimeout(_READY_S)
            _send(conn, argv)
            answer = _line(conn)
        except TimeoutError:
            return None
        except OSError:
            answer = b""
        if not answer:  # it ended before it held the streams: nothing of them was read
            conn.close()
            continue
        if not answer.startswith(b"pid "):  # "cold": it will not run this session
            return None
        try:
            conn.sendall(b"g")
            conn.settimeout(None)
        except OSError:
            return None
        return _wait(conn)
    return None


def _wait(conn: Socket) -> int:
    """Pass the stop signals on until the session's ``exit N``."""
    import _signal

    def forward(signum: int, _frame: object) -> None:
        try:
            conn.send(bytes([signum]))
        except OSError:
            pass

    for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(signum, forward)
    try:
        last = _line(conn)
    except OSError:
        last = b""
    if last.startswith(b"exit "):
        return int(last[5:])
    sys.stderr.write("teamlead-claude: the warm teamlead process running it ended early\n")
    return 1


def _line(conn: Socket) -> bytes:
    """One ``\\n``-ended line from ``conn`` (what came before its end, at its end)."""
    got = b""
    while not got.endswith(b"\n"):
        more = conn.recv(1)
        if not more:
            break
        got += more
    return got.strip()


def _connect(name: str, within: float, started: int | None) -> Socket | None:
    """A connection to this user's warm process ``name``, tried for ``within`` seconds
    (not past the end of the one this launcher ``started``, if it did)."""
    import time

    give_up = time.monotonic() + within
    while True:
        conn = Socket(AF_UNIX, SOCK_STREAM)
        try:
            conn.connect("\0" + name)
            if _peer_uid(conn) == os.getuid():  # not a name another user took first
                return conn
        except OSError:
            pass
        conn.close()
        if time.monotonic() >= give_up or (started and os.waitpid(started, os.WNOHANG)[0]):
            return None
        time.sleep(0.01)


def _peer_uid(conn: Socket) -> int:
    """The user of the process at the other end of ``conn``."""
    creds = conn.getsockopt(SOL_SOCKET, SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    return int.from_bytes(creds[4:8], sys.byteorder)


def _send(conn: Socket, argv: list[str]) -> None:
    """The request: this process's directory, umask, argv and environment, and its three
    standard streams."""
    umask = os.umask(0o022)
    os.umask(umask)
    env = [k + b"=" + v for k, v in os.environb.items()]
    fields = [b"tlc1", os.fsencode(os.getcwd()), b"%o" % umask, b"%d" % len(argv)]
    payload = b"\0".join([*fields, *map(os.fsencode, argv), *env])
    data = len(payload).to_bytes(4, "big") + payload
    fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
    sent = conn.sendmsg([data], [(SOL_SOCKET, SCM_RIGHTS, fds)])
    conn.sendall(data[sent:])


def _start(name: str, idle: float) -> int | None:
    """Start the warm process, detached (its own session, no terminal, no streams of
    ours); its pid, or ``None`` if it cannot be started."""
    # -c, not -m, and the working directory left off the module path at once: a module in
    # the app's directory is never loaded in its place. Its name is taken before teamlead
    # loads (a second of CPU, more on a loaded machine): this launcher connects at once
    # and waits for the load; a name taken already ends it at once.
    code = (
        "import socket, sys; sys.path[:] = filter(None, sys.path); "
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); "
        "s.bind('\\0' + sys.argv[1]); s.listen(64); "
        "from teamlead._shim import warm; warm.main(s)"
    )
    command = [sys.executable, "-c", code, name, repr(idle)]
    null = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0)]
    dup = [(os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
    # its environment is only what shapes what it loads: each session brings its own
    kept = ("PATH", *_SHAPING)
    env = {k: v for k, v in os.environ.items() if k.startswith(kept)}
    try:
        return os.posix_spawn(sys.executable, command, env, file_actions=null + dup, setsid=True)
    except OSError:
        return None


def _name(idle: float, seen: list[tuple[str, int, int]] | None = None) -> str:
    """The warm process's socket name: whose it is, what it loaded (the interpreter, its
    module path, the installed packages and teamlead's code, the variables that shape
    them) and its idle time. Each file and folder it reads is added to ``seen``, if given
    (with the module path's ``.pth`` files, which make the module path)."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]
        except ImportError:
            from hashlib import sha256
    digest = sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        namespace = ""
    for part in (repr(idle), sys.executable, namespace, *sys.path):
        digest.update(os.fsencode(part) + b"\0")
    for key in sorted(k for k in os.environ if k.startswith(_SHAPING)):
        digest.update(os.fsencode(f"{key}={os.environ[key]}\0"))
    for folder in sys.path:  # an install or removal changes its folder
        try:
            digest.update(b"%d\0" % _stat(folder or ".", seen).st_mtime_ns)
        except OSError:
            pass
        if seen is not None:  # the .pth files there make the module path
            try:
                pths = [f for f in os.listdir(folder or ".") if f.endswith(".pth")]
            except OSError:
                pths = []
            for pth in pths:
                try:
                    _stat(os.path.join(folder or ".", pth), seen)
                except OSError:  # gone meanwhile: read as missing
                    pass
    # teamlead's own code, for a checkout installed in place (an install's code changes
    # with its folder, stated above)
    stack = [] if os.path.basename(here) in _INSTALLED else [os.path.join(here, "teamlead")]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
            _stat(folder, seen)  # an added or removed file changes it
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                stack.append(entry.path)
            elif entry.name.endswith(".py"):
                stat = entry.stat()
                digest.update(
                    b"%s %d %d\0" % (os.fsencode(entry.path), stat.st_mtime_ns, stat.st_size)
                )
                if seen is not None:
                    seen.append((os.path.abspath(entry.path), stat.st_mtime_ns, stat.st_size))
    return f"teamlead-claude/{os.getuid()}/{digest.hexdigest()[:32]}"


def _stat(path: str, seen: list[tuple[str, int, int]] | None) -> os.stat_result:
    """``os.stat(path)``, added to ``seen`` (if given) as found, or as missing."""
    try:
        stat = os.stat(path)
    except OSError:
        if seen is not None:
            seen.append((os.path.abspath(path), -1, -1))
        raise
    if seen is not None:
        seen.append((os.path.abspath(path), stat.st_mtime_ns, stat.st_size))
    return stat


def _card(path: str, name: str, seen: list[tuple[str, int, int]]) -> None:
    """Leave the compiled launcher the warm process's ``name`` at ``path``, with what it
    can check that the name still holds: the mount namespace, the variables the name was
    made from, and each file and folder read for it. Only in a folder of this user's that no
    one else can write; a card that cannot be left is not (that launcher asks again)."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, 0o700, exist_ok=True)
        stat = os.lstat(folder)
        if stat.st_uid != os.getuid() or stat.st_mode & 0o7077 or not os.path.isdir(folder):
            return
        namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return
    kinds, warm = tuple(map(os.fsencode, _SHAPING)), os.fsencode(WARM_VAR)
    pairs = [k + b"=" + v for k, v in os.environb.items() if k.startswith(kinds) or k == warm]
    fields = [_CARD_MAGIC, name.encode(), os.fsencode(namespace), b"%d" % len(pairs), *pairs]
    fields.append(b"%d" % len(seen))
    for file, mtime_ns, size in seen:
        fields += [os.fsencode(file), b"%d" % mtime_ns, b"%d" % size]
    temporary = f"{path}.{os.getpid()}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as out:
            out.write(b"\0".join(fields) + b"\0")
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass


if __name__ == "__main__":
    main()
