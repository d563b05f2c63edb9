"""Every run of this user, findable: the registry of live runs in a per-user directory.

Each run registers itself while it goes: an entry ``<run>.json`` and its control endpoint,
a Unix socket ``<run>.sock`` (:mod:`.endpoint`), side by side in the user's runtime
directory (:func:`runtime_dir`: ``TEAMLEAD_RUNTIME_DIR``, else
``$XDG_RUNTIME_DIR/teamlead``, else ``teamlead-<uid>`` in the temp directory).

The directory is made mode 0700 when missing; one that exists must be this user's own
private, real directory and is never changed (:func:`runtime_private`), else the run goes
on unregistered with one warning naming a private alternative. Entries are written mode
0600, atomically, with no credential in their command line. A run removes its entry and
socket when it ends; an entry whose pid no longer runs the process that wrote it is dead,
and whoever lists the runs prunes it. An entry is read as untrusted data: at most
:data:`MAX_ENTRY_BYTES`, every field type-checked, unknown fields kept, a bad entry
skipped. Nothing here loads the SDK, so ``teamlead ps`` is fast.

Example:
    >>> registry = Registry(runtime_dir())  # doctest: +SKIP
    >>> registration = registry.register(mode="query", command="teamlead ask hi")  # doctest: +SKIP
    >>> registration.write()  # once its endpoint listens  # doctest: +SKIP
    >>> [e.run for e in registry.listing().live] == [registration.run]  # doctest: +SKIP
    True
    >>> registration.remove()  # the run ends  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

import psutil

from .._private import dir_problem, json_object, named_dir, read_small, uid, write_private
from .._procs import runs, started_here
from .._redact import redact, without_password
from ..clock import SYSTEM_CLOCK
from ..errors import AmbiguousRun, ControlError, NoSuchRun

if TYPE_CHECKING:
    from .._run import ProcessState

__all__ = [
    "ENTRY_VERSION",
    "MAX_ENTRY_BYTES",
    "NO_REGISTRY_VAR",
    "RUNTIME_DIR_VAR",
    "Listing",
    "Registration",
    "Registry",
    "RunEntry",
    "command_line",
    "labelled",
    "liveness",
    "parse_entry",
    "process_registry",
    "runtime_private",
    "run_label",
    "runtime_dir",
]

#: Where the runs register, when set (else ``$XDG_RUNTIME_DIR/teamlead``, else the temp dir).
RUNTIME_DIR_VAR = "TEAMLEAD_RUNTIME_DIR"
#: ``1`` (``true``, ``yes``, ``on``): runs do not register (they cannot be seen or steered).
NO_REGISTRY_VAR = "TEAMLEAD_NO_REGISTRY"
ENTRY_VERSION = 1
#: The largest entry file read; a larger one is not an entry of ours.
MAX_ENTRY_BYTES = 64 * 1024
#: Run ids are this many hex digits (docker's short ids are 12 too).
RUN_ID_CHARS = 12
#: A Unix socket's path must fit ``sockaddr_un`` (104 bytes on macOS, 108 on Linux).
_MAX_SOCKET_PATH = 103
_MAX_COMMAND = 500
_MAX_FIELD = 300
_TRUE = frozenset({"1", "true", "yes", "on"})

#: The temp directory's folder of sockets whose runtime directory is too long a path.
_SOCKET_DIR = "teamlead-{}-sockets"
Liveness: TypeAlias = Literal["live", "dead", "not_yours"]


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory this user's runs register in (see the module docstring); not made.

    Example:
        >>> runtime_dir({"TEAMLEAD_RUNTIME_DIR": "/tmp/x"})
        PosixPath('/tmp/x')
        >>> runtime_dir({"XDG_RUNTIME_DIR": "/run/user/1000"})
        PosixPath('/run/user/1000/teamlead')
    """
    named = named_dir(env, RUNTIME_DIR_VAR, "XDG_RUNTIME_DIR", "teamlead")
    return named or Path(tempfile.gettempdir()) / f"teamlead-{uid()}"


_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("run_label", default=None)


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Name the runs started inside the block (in this context): ``teamlead ps`` and the
    history show ``label`` for them (an experiment names each trial by its arm, task and
    trial), instead of only the command the process was started as."""
    token = _LABEL.set(label[:_MAX_FIELD])
    try:
        yield
    finally:
        _LABEL.reset(token)


def run_label() -> str | None:
    """The name :func:`labelled` gives the runs started here, if any."""
    return _LABEL.get()


def command_line(argv: list[str] | None = None) -> str:
    """What the process was started as, for ``teamlead ps`` and the run history:
    ``teamlead ask ...`` for the command (``python -m teamlead`` too), else the program's
    name and its arguments; at most 500 characters, with no credential in it (a URL's
    password, a secret-looking variable's value). Shown as text, escaped: it may hold
    anything the user typed."""
    words = list(sys.argv if argv is None else argv)
    if not words:
        return "python"
    first = words[0].replace("\\", "/")
    if first.endswith(("teamlead/__main__.py", "/teamlead")) or first == "teamlead":
        head = "teamlead"
    else:
        head = first.rsplit("/", 1)[-1] or "python"
    return _described(" ".join([head, *words[1:]]))


@dataclass(frozen=True)
class RunEntry:
    """One run's registry entry, as written by the run and parsed at the edge.

    Attributes:
        run: the run's id (12 hex digits).
        session_id: the lead's session id, once the run has seen it.
        pid: the run's process.
        pid_started: that process's start time (``psutil``'s ``create_time``), which tells
            a live run from a dead one whose pid was reused; ``None`` when the run could
            not read it (then a run lives while its pid does).
        uid: the user the run's process runs as.
        command: what the process was started as (untrusted text: render it escaped).
        mode: ``query`` (``ask``, ``resume``, ``query``) or ``client`` (``receive_all``).
        label: what the run is, when a program named it (:func:`labelled`).
        started: when the run started (seconds since the epoch).
        socket: the run's control endpoint.
        path: the entry's file.
        extra: fields this version does not know, kept.
    """

    run: str
    pid: int
    pid_started: float | None
    started: float
    socket: str
    path: Path
    session_id: str | None = None
    uid: int | None = None
    command: str = ""
    mode: str = "query"
    label: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as it is written: versioned, every field but ``path`` and ``extra``,
        and the unknown fields carried along."""
        written = {name: getattr(self, name) for name in _KNOWN if name != "version"}
        return {**dict(self.extra), "version": ENTRY_VERSION, **written}

    def matches(self, ref: str) -> bool:
        """Whether ``ref`` is this run's id or session id, or a prefix of one."""
        ref = ref.strip().lower()
        return bool(ref) and (
            self.run.startswith(ref)
            or (self.session_id is not None and self.session_id.lower().startswith(ref))
        )


#: The fields an entry's file holds (the rest are kept as its ``extra``).
_KNOWN = (
    "version",
    *(f.name for f in dataclasses.fields(RunEntry) if f.name not in ("path", "extra")),
)


def parse_entry(raw: bytes, path: Path) -> RunEntry | None:
    """The :class:`RunEntry` in ``raw`` (the bytes of ``path``), or ``None`` when it is not
    a well-formed entry: too large, not a JSON object, a field of the wrong type.

    Example:
        >>> parse_entry(b'{"run": "x"}', Path("x.json")) is None
        True
    """
    data = json_object(raw) if len(raw) <= MAX_ENTRY_BYTES else None
    if data is None:
        return None
    run, pid, socket = data.get("run"), data.get("pid"), data.get("socket")
    started, pid_started = data.get("started"), data.get("pid_started")
    if not (isinstance(run, str) and _is_run_id(run) and path.stem == run):
        return None
    if not (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0):
        return None
    if not (isinstance(socket, str) and 0 < len(socket) <= _MAX_FIELD):
        return None
    if not (_is_number(started) and (pid_started is None or _is_number(pid_started))):
        return None
    session = data.get("session_id")
    owner = data.get("uid")
    command = data.get("command")
    mode = data.get("mode")
    label = data.get("label")
    return RunEntry(
        run=run,
        pid=pid,
        pid_started=None if pid_started is None else float(cast(float, pid_started)),
        started=float(cast(float, started)),
        socket=socket,
        path=path,
        session_id=session if isinstance(session, str) and len(session) <= _MAX_FIELD else None,
        uid=owner if isinstance(owner, int) and not isinstance(owner, bool) else None,
        command=_described(command) if isinstance(command, str) else "",
        mode=mode if mode in ("query", "client") else "query",
        label=label[:_MAX_FIELD] if isinstance(label, str) else None,
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )


def _described(command: str) -> str:
    """A run's command line as the registry keeps and shows it: at most 500 characters,
    no credential of a URL in it (a ``--session-store redis://:PASSWORD@...``), no value
    of a secret-looking environment variable. Applied when an entry is written and when
    one is read (an entry written by another version is shown the same way)."""
    line = redact(without_password(command))
    return line if len(line) <= _MAX_COMMAND else line[: _MAX_COMMAND - 3] + "..."


def _is_number(value: object) -> bool:
    """A JSON number that is a finite float: not nan or infinite (``ps --json`` would print
    them, and they are no JSON), not a whole number too long for one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_run_id(text: str) -> bool:
    return len(text) == RUN_ID_CHARS and all(c in "0123456789abcdef" for c in text)


def liveness(entry: RunEntry) -> Liveness:
    """Whether ``entry``'s run still runs: its pid runs the process that started then (any
    process, when the run could not read its start)."""
    if not runs(entry.pid, entry.pid_started, unreadable=False):
        return "dead"
    try:
        uids = psutil.Process(entry.pid).uids()
    except (psutil.Error, AttributeError, OSError):
        return "live"
    return "live" if uids.real == uid() else "not_yours"


@dataclass(frozen=True)
class Listing:
    """What the registry holds: the live runs (oldest first), the dead entries it found
    (pruned as they were found), and the runs of other users it saw."""

    live: list[RunEntry]
    dead: list[RunEntry]
    not_yours: list[RunEntry]


class Registration:
    """One run's place in the registry: its entry while the run goes, removed at its end.

    Made by :meth:`Registry.register`; the run's side keeps it and calls :meth:`update`
    when it learns its session id, and :meth:`remove` when it ends.
    """

    def __init__(self, entry: RunEntry) -> None:
        self.entry = entry
        self._removed = False

    @property
    def run(self) -> str:
        """The run's id."""
        return self.entry.run

    @property
    def socket(self) -> Path:
        """Where the run's control endpoint listens."""
        return Path(self.entry.socket)

    def write(self) -> None:
        """Write the entry (atomically: a reader sees the old one or the new one)."""
        if not self._removed:
            write_private(self.entry.path, json.dumps(self.entry.to_json()) + "\n")

    def update(self, *, session_id: str) -> None:
        """The run learnt its session id: the entry names it from now on."""
        if session_id and session_id != self.entry.session_id:
            self.entry = dataclasses.replace(self.entry, session_id=session_id[:_MAX_FIELD])
            with contextlib.suppress(OSError):
                self.write()

    def remove(self) -> None:
        """The run ends: its entry and its socket go (idempotent)."""
        self._removed = True
        for path in (self.entry.path, self.socket):
            with contextlib.suppress(OSError):
                path.unlink()


class Registry:
    """The registry of this user's live runs (see the module docstring).

    One belongs to a :class:`~teamlead.ProcessState` (made when a run first registers);
    the ``teamlead`` verbs make their own.

    Args:
        root: the directory to use; default :func:`runtime_dir` of ``env``, read at each
            use (so a test's environment decides where its runs register).
        env: the environment the directory is read from (default: this process's).
    """

    def __init__(self, root: Path | None = None, *, env: Mapping[str, str] | None = None) -> None:
        self._root = root
        self._env = env

    @property
    def directory(self) -> Path:
        """The runtime directory (made only when a run registers)."""
        return self._root if self._root is not None else runtime_dir(self._env)

    def register(self, *, mode: str, command: str) -> Registration:
        """Register a run of this process: its id drawn, its entry written.

        The run's control endpoint must listen on :attr:`Registration.socket` before its
        entry is written (:meth:`Registration.write`): a reader finds only runs it can ask.

        Raises:
            ControlError: the directory cannot be used (``code`` ``directory``).
        """
        folder = runtime_private(self.directory)
        run = secrets.token_hex(RUN_ID_CHARS // 2)
        socket = _socket_dir(folder) / f"{run}.sock"
        pid = os.getpid()
        entry = RunEntry(
            run=run,
            pid=pid,
            pid_started=started_here(),
            started=SYSTEM_CLOCK.time(),
            socket=str(socket),
            path=folder / f"{run}.json",
            uid=uid(),
            command=_described(command),
            mode=mode,
            label=run_label(),
        )
        return Registration(entry)

    def check(self) -> Path:
        """The directory, made if missing, once it is checked to be usable: this user's
        own, private, and writable (else no run can register there, and a listing of it
        would say nothing of why it is empty).

        Raises:
            ControlError: it cannot be made or used; the message says how to fix it.
        """
        folder = runtime_private(self.directory)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ControlError(
                f"cannot write the runtime directory {str(folder)!r}; set {RUNTIME_DIR_VAR} "
                "to a directory of yours",
                code="directory",
            )
        return folder

    def listing(self) -> Listing:
        """Every entry of the directory, sorted by start: live, dead (pruned as found), and
        other users'. A missing directory holds no runs; a bad entry is skipped."""
        found: dict[Liveness, list[RunEntry]] = {"live": [], "dead": [], "not_yours": []}
        for entry in sorted(self._entries(), key=lambda e: (e.started, e.run)):
            state = liveness(entry)
            found[state].append(entry)
            if state == "dead":
                _prune(entry)
        return Listing(**found)

    def find(self, ref: str) -> RunEntry:
        """The live run ``ref`` names: its run id, its session id, or a unique prefix of
        either (an exact id wins over prefixes).

        Raises:
            NoSuchRun: nothing live is named so (``why``: ``none``), or only another
                user's run is (``not_yours``).
            AmbiguousRun: ``ref`` is a prefix of several runs' ids.
        """
        wanted = ref.strip().lower()
        listing = self.listing()
        if not wanted:
            raise NoSuchRun("no run named: give a run id or session id", ref=ref)
        exact = [e for e in listing.live if wanted in (e.run, (e.session_id or "").lower())]
        found = exact or [e for e in listing.live if e.matches(wanted)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise AmbiguousRun(ref, [e.run for e in found])
        if any(e.matches(wanted) for e in listing.not_yours):
            raise NoSuchRun(f"run {ref!r} belongs to another user", ref=ref, why="not_yours")
        if any(e.matches(wanted) for e in listing.dead):
            raise NoSuchRun(f"run {ref!r} has already finished", ref=ref, why="finished")
        raise NoSuchRun(f"no such run: {ref!r} (see `teamlead ps`)", ref=ref)

    def _entries(self) -> Iterator[RunEntry]:
        folder = self.directory
        try:
            names = sorted(p for p in folder.iterdir() if p.suffix == ".json")
        except OSError:  # no directory yet: no runs
            return
        for path in names:
            raw = read_small(path, MAX_ENTRY_BYTES)
            entry = parse_entry(raw, path) if raw is not None else None
            if entry is not None:
                yield entry


def process_registry(process: ProcessState) -> Registry | None:
    """The registry ``process``'s runs enter, or ``None`` when they do not register
    (``ProcessState(registry=False)`` or ``TEAMLEAD_NO_REGISTRY``). Its directory is read at
    each registration, so the default state of a test process follows each test's
    environment."""
    env = os.environ if process.env is None else process.env
    if not process.registers or (env.get(NO_REGISTRY_VAR) or "").strip().lower() in _TRUE:
        return None
    return Registry(process.runtime_dir, env=process.env)


def runtime_private(folder: Path) -> Path:
    """``folder``, made mode 0700 when missing, else checked to be this user's own real
    directory that nobody else can write to (:func:`~teamlead._private.dir_problem`);
    teamlead never changes a directory it did not make.

    Raises:
        ControlError: ``folder`` cannot be made, or is refused (``code`` ``directory``); a
            refusal names a private alternative: this user's own runtime directory
            (``$XDG_RUNTIME_DIR/teamlead``, else ``teamlead-<uid>`` in the temp directory,
            else ``~/.cache/teamlead/runtime``), whichever is not ``folder``.
    """
    try:
        folder.mkdir(mode=0o700, parents=True)
        return folder  # made here: this user's own, mode 0700 (at most)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ControlError(
            f"cannot use the runtime directory {str(folder)!r}: {exc.strerror or exc}; set "
            f"{RUNTIME_DIR_VAR} to a directory of yours",
            code="directory",
        ) from None
    why = dir_problem(folder)
    if why is None:
        return folder
    raise ControlError(
        f"the runtime directory {str(folder)!r} is {why}, and teamlead changes nothing it did "
        f"not create: set {RUNTIME_DIR_VAR} to a private one, such as "
        f"{str(_private_alternative(folder))!r}",
        code="directory",
    )


def _private_alternative(folder: Path) -> Path:
    """This user's own runtime directory that is not ``folder``."""
    xdg = (os.environ.get("XDG_RUNTIME_DIR") or "").strip()
    candidates = [
        *([Path(xdg) / "teamlead"] if xdg and Path(xdg).is_absolute() else []),
        Path(tempfile.gettempdir()) / f"teamlead-{uid()}",
    ]
    with contextlib.suppress(RuntimeError):  # no home directory to name
        candidates.append(Path.home() / ".cache" / "teamlead" / "runtime")
    return next((c for c in candidates if c != folder), candidates[0])


def _fits(folder: Path) -> bool:
    """Whether a run's socket in ``folder`` fits ``sockaddr_un``."""
    return len(os.fsencode(folder / ("x" * RUN_ID_CHARS + ".sock"))) <= _MAX_SOCKET_PATH


def _socket_dir(folder: Path) -> Path:
    """Where the runs' sockets go: beside their entries, or when that path is too long
    for a socket, a private folder of this user's in the temp directory (each entry names
    its socket, so readers find it there).

    Raises:
        ControlError: no folder short enough can be used.
    """
    if _fits(folder):
        return folder
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        short = base / _SOCKET_DIR.format(uid())
        if _fits(short):
            return runtime_private(short)
    raise ControlError(
        f"the runtime directory {str(folder)!r} is too long a path for a Unix socket: "
        f"set {RUNTIME_DIR_VAR} to a shorter one",
        code="directory",
    )


def _prune(entry: RunEntry) -> None:
    """Remove a dead run's entry, and its socket when it sits beside the entry."""
    with contextlib.suppress(OSError):
        entry.path.unlink()
    socket = Path(entry.socket)
    folder = socket.parent
    ours = folder == entry.path.parent or folder.name == _SOCKET_DIR.format(uid())
    if ours and socket.name == f"{entry.run}.sock":  # never a path of the entry's choosing
        with contextlib.suppress(OSError):
            socket.unlink()
