"""The team-lead inbox: read it, wait on it, consume it, as Claude Code does.

Teammates report to the lead by appending to ``<config>/teams/<team>/inboxes/team-lead.json``
(a JSON array). An interactive lead polls that file; a lead driven through the SDK never
does, so results pile up unseen. This module is the missing reader:

- :func:`read_inbox` parses the file tolerantly (bad entries are skipped with a warning,
  unknown fields kept) and decodes each entry into a :class:`TeammateMessage`.
- :func:`wait_for_inbox` waits, event-driven through ``watchfiles`` with a polling
  fallback, until a condition on the inbox holds or the wait runs out.
- :func:`consume_inbox` removes delivered entries under the writers' lock, the way Claude
  Code's own reader does, so the inbox does not grow without bound.

Inboxes larger than :data:`DEFAULT_MAX_INBOX_BYTES` (8 MiB) are not parsed: the read
reports a warning and the file is left alone. A healthy inbox holds a handful of entries,
each capped by Claude Code at a few KiB; 8 MiB is thousands of reports.

Example:
    >>> team = find_team(session_id)                                  # doctest: +SKIP
    >>> done = await wait_for_inbox(                                  # doctest: +SKIP
    ...     team.lead_inbox, until=lambda r: any(m.is_report for m in r.messages))
    >>> keys = [m.key for m in done.read.messages]                    # doctest: +SKIP
    >>> await consume_inbox(team.lead_inbox, keys)                    # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError
from watchfiles import awatch

from ._lock import LockPolicy, pid_alive, with_lock
from ._redact import redact, redact_opt
from .clock import SYSTEM_CLOCK, Clock
from .errors import InboxError
from .team import load_team, within

__all__ = [
    "DEFAULT_MAX_INBOX_BYTES",
    "ConsumeResult",
    "InboxEntry",
    "InboxRead",
    "InboxWait",
    "InboxWaitPolicy",
    "LockPolicy",
    "MessageKind",
    "TeammateMessage",
    "consume_inbox",
    "decode_entry",
    "entry_key",
    "read_inbox",
    "wait_for_inbox",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_INBOX_BYTES = 8 * 1024 * 1024
"""Inboxes larger than this are left alone with a warning instead of being parsed."""

MessageKind = Literal[
    "idle",
    "message",
    "permission",
    "plan",
    "shutdown",
    "task_assignment",
    "task_completed",
    "terminated",
    "unknown_frame",
]

_FRAME_KINDS: dict[str, MessageKind] = {
    "idle_notification": "idle",
    "permission_request": "permission",
    "permission_response": "permission",
    "task_assignment": "task_assignment",
    "task_completed": "task_completed",
    "teammate_terminated": "terminated",
}
_FRAME_PREFIXES: dict[str, MessageKind] = {"plan_approval_": "plan", "shutdown_": "shutdown"}
_TERMINATING_FRAMES = frozenset({"teammate_terminated", "shutdown_approved"})


# ---------------------------------------------------------------------------- parsing


def entry_key(sender: str, timestamp: str, text: str) -> str:
    """The key of an entry without ``msg_id``: a digest of ``from|timestamp|text``."""
    digest = hashlib.sha256(f"{sender}|{timestamp}|{text}".encode()).hexdigest()
    return f"sha256:{digest}"


class InboxEntry(BaseModel):
    """One inbox entry as Claude Code writes it; unknown fields are kept.

    ``from``, ``text`` and ``timestamp`` must be strings; an entry that fails this schema
    is skipped, as Claude Code's reader does.
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    sender: StrictStr = Field(alias="from")
    text: StrictStr
    timestamp: StrictStr
    read: StrictBool | None = None
    type: str | None = None
    color: str | None = None
    summary: str | None = None
    from_plugin: Any = None
    msgV: int | None = None
    msg_id: str | None = None
    lead_sig: str | None = None

    @property
    def key(self) -> str:
        """The dedupe key: ``msg_id`` when present, else ``from|timestamp|text``.

        The fallback is stored as a SHA-256 digest of that string: the same identity,
        without carrying message content (or a secret in it) into logs and records.
        """
        return self.msg_id or entry_key(self.sender, self.timestamp, self.text)


class TeammateMessage(BaseModel):
    """A decoded inbox entry: a plain message or one teammate protocol frame.

    String fields are stripped of secret env var values. ``key`` identifies the raw entry
    for :func:`consume_inbox`.
    """

    model_config = ConfigDict(frozen=True)

    kind: MessageKind
    sender: str
    text: str
    key: str
    timestamp: str
    msg_id: str | None = None
    read: bool = False
    frame_type: str | None = None
    result: str | None = None
    summary: str | None = None
    completed_status: str | None = None
    failure_reason: str | None = None
    idle_reason: str | None = None
    completed_task_id: str | None = None

    @property
    def is_result(self) -> bool:
        """Carries a result: an idle notification with a result or summary, or plain text."""
        if self.kind == "idle":
            return bool(self.result or self.summary)
        return self.kind == "message" and bool(self.text.strip())

    @property
    def is_report(self) -> bool:
        """The sender has reported: it went idle, was terminated or approved its shutdown."""
        return self.kind == "idle" or self.frame_type in _TERMINATING_FRAMES


def _opt_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _frame(text: str) -> dict[str, Any] | None:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return value
    return None


def _frame_kind(frame_type: str) -> MessageKind:
    if frame_type in _FRAME_KINDS:
        return _FRAME_KINDS[frame_type]
    for prefix, kind in _FRAME_PREFIXES.items():
        if frame_type.startswith(prefix):
            return kind
    return "unknown_frame"


def decode_entry(entry: InboxEntry) -> TeammateMessage:
    """Turn an entry into a :class:`TeammateMessage`, decoding a protocol frame in ``text``.

    Example:
        >>> entry = InboxEntry.model_validate({"from": "alpha", "timestamp": "t",
        ...     "text": '{"type":"idle_notification","result":"42","completedStatus":"resolved"}'})
        >>> msg = decode_entry(entry)
        >>> msg.kind, msg.result, msg.is_result
        ('idle', '42', True)
    """
    base: dict[str, Any] = {
        "sender": redact(entry.sender),
        "text": redact(entry.text),
        "key": entry.key,
        "timestamp": entry.timestamp,
        "msg_id": entry.msg_id,
        "read": bool(entry.read),
    }
    frame = _frame(entry.text)
    if frame is None:
        return TeammateMessage(kind="message", summary=redact_opt(entry.summary), **base)
    frame_type: str = frame["type"]
    kind = _frame_kind(frame_type)
    fields: dict[str, Any] = {}
    if kind == "idle":
        fields = {
            "result": frame.get("result"),
            "summary": frame.get("summary"),
            "completed_status": frame.get("completedStatus"),
            "failure_reason": frame.get("failureReason"),
            "idle_reason": frame.get("idleReason"),
            "completed_task_id": frame.get("completedTaskId"),
        }
    fields = {name: redact_opt(_opt_str(value)) for name, value in fields.items()}
    return TeammateMessage(kind=kind, frame_type=frame_type, **fields, **base)


InboxStatus = Literal["ok", "missing", "too_large", "invalid", "refused"]


@dataclass(frozen=True)
class InboxRead:
    """One read of an inbox.

    Attributes:
        path: the inbox file.
        status: ``ok``; ``missing`` (no file yet); ``too_large`` (over the cap, left
            alone); ``invalid`` (not a JSON array); ``refused`` (it leaves the config dir).
        messages: the valid entries, decoded, in file order, duplicates (same key) dropped.
        skipped: how many entries failed the schema.
        warnings: one line per problem, free of secrets and of message content.
    """

    path: Path
    status: InboxStatus
    messages: tuple[TeammateMessage, ...] = ()
    skipped: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def keys(self) -> frozenset[str]:
        """The keys of every message read."""
        return frozenset(m.key for m in self.messages)


def _confine_root(path: Path, config_dir: Path | None) -> Path:
    """The directory an inbox must stay in: the config dir, inferred from the layout."""
    if config_dir is not None:
        return config_dir
    parents = path.parents
    if path.parent.name == "inboxes" and len(parents) > 3 and parents[2].name == "teams":
        return parents[3]
    return path.parent


def _load_array(path: Path, max_bytes: int) -> tuple[InboxStatus, list[Any] | None, str | None]:
    """Read the raw JSON array; never raises for bad content."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "missing", None, None
    except OSError as exc:
        return "invalid", None, f"inbox {path} cannot be read: {exc.strerror}"
    if not path.is_file():
        return "invalid", None, f"inbox {path} is not a regular file; left alone"
    if info.st_size > max_bytes:
        why = f"is {info.st_size} bytes, over the {max_bytes}-byte cap"
        return "too_large", None, f"inbox {path} {why}; left alone (not parsed, not consumed)"
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return "missing", None, None
    except OSError as exc:
        return "invalid", None, f"inbox {path} cannot be read: {exc.strerror}"
    if len(data) > max_bytes:
        return "too_large", None, f"inbox {path} grew over the {max_bytes}-byte cap; left alone"
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "invalid", None, f"inbox {path} is not UTF-8 text; left alone"
    except ValueError as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        return "invalid", None, f"inbox {path} is not valid JSON{where} (truncated?); left alone"
    if not isinstance(raw, list):
        kind = type(raw).__name__
        return "invalid", None, f"inbox {path} holds a JSON {kind}, not an array; left alone"
    return "ok", raw, None


def _parse_entry(raw: Any) -> InboxEntry | str:
    """The entry, or a one-line reason it fails the schema."""
    try:
        return InboxEntry.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "entry"
        return f"{where}: {err.get('msg', 'invalid')}"


def _read(path: Path, config_dir: Path | None, max_bytes: int) -> InboxRead:
    root = _confine_root(path, config_dir)
    if not within(path, root):
        warning = f"inbox {path} resolves outside {root} (a symlink out?); refused"
        return InboxRead(path=path, status="refused", warnings=(redact(warning),))
    status, raw, problem = _load_array(path, max_bytes)
    if raw is None:
        warnings = () if problem is None else (redact(problem),)
        return InboxRead(path=path, status=status, warnings=warnings)
    messages: list[TeammateMessage] = []
    seen: set[str] = set()
    warnings_list: list[str] = []
    for index, item in enumerate(raw):
        entry = _parse_entry(item)
        if isinstance(entry, str):
            warnings_list.append(redact(f"inbox {path}: skipped entry {index}: {entry}"))
            continue
        if entry.key in seen:
            continue
        seen.add(entry.key)
        messages.append(decode_entry(entry))
    return InboxRead(
        path=path,
        status="ok",
        messages=tuple(messages),
        skipped=len(warnings_list),
        warnings=tuple(warnings_list),
    )


def read_inbox(
    path: Path,
    *,
    config_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
) -> InboxRead:
    """Read and decode an inbox without locking or changing it.

    Never raises for bad content: a missing file, a truncated or non-array file, an
    oversized file or a symlink leaving the config dir each give a status and a warning
    (also logged), and invalid entries are skipped without losing the valid ones.

    Args:
        path: the inbox file.
        config_dir: the Claude Code config dir the inbox must stay in; by default inferred
            from ``<config>/teams/<team>/inboxes/<agent>.json``.
        max_bytes: files larger than this are left alone.

    Example:
        >>> read = read_inbox(team.lead_inbox)                    # doctest: +SKIP
        >>> [m.result for m in read.messages if m.is_result]      # doctest: +SKIP
    """
    read = _read(Path(path), config_dir, max_bytes)
    for warning in read.warnings:
        logger.warning("%s", warning)
    return read


# ---------------------------------------------------------------------------- waiting


class InboxWaitPolicy(BaseModel):
    """How :func:`wait_for_inbox` retries when no change event arrives.

    The inbox is read at once, then on every change event, and otherwise after delays
    growing from ``first_delay_s`` by ``backoff`` up to ``max_delay_s``. The wait gives up
    once it has read the inbox ``tries`` more times *and* ``span_s`` has passed (or at the
    caller's deadline, whichever is first). The defaults read it at 0.5, 1.5, 3.5, 7.5 and
    11.5 s: at least 5 tries over at least 10 s.

    ``step_ms`` and ``debounce_ms`` tune the watcher: a change is reported ``step_ms`` to
    ``2 * step_ms`` after it settles. ``use_events=False`` forces plain polling.
    """

    model_config = ConfigDict(frozen=True)

    tries: int = Field(default=5, ge=1)
    span_s: float = Field(default=10.0, ge=0)
    first_delay_s: float = Field(default=0.5, gt=0)
    backoff: float = Field(default=2.0, ge=1)
    max_delay_s: float = Field(default=4.0, gt=0)
    use_events: bool = True
    step_ms: int = Field(default=10, ge=1)
    debounce_ms: int = Field(default=200, ge=1)
    watcher_timeout_ms: int = Field(default=2000, ge=1)


@dataclass(frozen=True)
class InboxWait:
    """What :func:`wait_for_inbox` saw last.

    Attributes:
        read: the last read of the inbox.
        satisfied: ``until(read)`` held.
        reads: how many times the inbox was read.
        events: how many change events woke the wait.
    """

    read: InboxRead
    satisfied: bool
    reads: int
    events: int


class _Wake:
    """A resettable flag the watcher sets and the waiter consumes."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.count = 0

    def set(self) -> None:
        self.count += 1
        self._event.set()

    async def wait(self, seconds: float, clock: Clock) -> bool:
        """Wait for a change or ``seconds`` on ``clock``; True on a change."""
        if not self._event.is_set():
            async with anyio.create_task_group() as tg:

                async def _timer() -> None:
                    await clock.sleep(seconds)
                    tg.cancel_scope.cancel()

                tg.start_soon(_timer)
                await self._event.wait()
                tg.cancel_scope.cancel()
        fired = self._event.is_set()
        if fired:
            self._event = anyio.Event()
        return fired


def _nearest_existing(directory: Path, root: Path) -> Path | None:
    """``directory`` or its closest existing ancestor inside ``root``."""
    for candidate in (directory, *directory.parents):
        if not within(candidate, root):
            return None
        if candidate.is_dir():
            return candidate
        if candidate == root:
            return None
    return None


async def _watch(
    path: Path, root: Path, policy: InboxWaitPolicy, stop: anyio.Event, wake: _Wake
) -> None:
    """Set ``wake`` on every change to the inbox; watch the nearest ancestor while it is missing.

    ``awatch`` builds its watcher before its first suspension, so a wake set just before
    iterating is seen only once the new watcher is in place: nothing falls between two.
    """
    retarget = False
    while not stop.is_set():
        target = _nearest_existing(path.parent, root)
        if target is None:
            return  # nothing to watch inside the config dir: polling only
        if retarget:
            wake.set()
        retarget = True
        changes_iter = awatch(
            target,
            watch_filter=None,
            debounce=policy.debounce_ms,
            step=policy.step_ms,
            stop_event=stop,
            rust_timeout=policy.watcher_timeout_ms,
            recursive=False,
            ignore_permission_denied=True,
        )
        try:
            async for changes in changes_iter:
                if target != path.parent:
                    wake.set()
                    if _nearest_existing(path.parent, root) != target:
                        break
                    continue
                if any(Path(changed).name == path.name for _, changed in changes):
                    wake.set()
                if not target.is_dir():
                    break
        except (OSError, RuntimeError) as exc:
            logger.warning("watching %s failed (%s); polling instead", target, type(exc).__name__)
            return
        finally:
            await changes_iter.aclose()


async def wait_for_inbox(
    path: Path,
    *,
    until: Callable[[InboxRead], bool],
    policy: InboxWaitPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    deadline: float | None = None,
    config_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
) -> InboxWait:
    """Wait until ``until(read)`` holds for a read of the inbox, or the wait runs out.

    Wakes at once when the file changes (``watchfiles`` on the inbox's directory, or on
    its nearest existing ancestor inside the config dir while it does not exist) and
    polls with backoff as a fallback. The wait is bounded by the policy and by
    ``deadline``. It is cancel-safe: the watcher is stopped through its stop event, so no
    thread is left waiting on the file system.

    Args:
        path: the inbox file; it need not exist yet.
        until: called with each read; the wait ends when it returns True.
        policy: retries and backoff (default :class:`InboxWaitPolicy()`).
        clock: time source for delays and the deadline.
        deadline: absolute time on ``clock.monotonic()`` after which the wait gives up.
        config_dir: the config dir the inbox must stay in (inferred by default).
        max_bytes: inbox size cap, as in :func:`read_inbox`.

    Returns:
        The last read and whether ``until`` held.

    Example:
        >>> done = await wait_for_inbox(                              # doctest: +SKIP
        ...     team.lead_inbox,
        ...     until=lambda r: {"alpha", "beta"} <= {m.sender for m in r.messages if m.is_report},
        ...     deadline=clock.monotonic() + 300)
        >>> done.satisfied                                            # doctest: +SKIP
        True
    """
    path = Path(path)
    policy = InboxWaitPolicy() if policy is None else policy
    root = _confine_root(path, config_dir)
    start = clock.monotonic()
    logged: set[str] = set()
    reads = 0

    def read_once() -> InboxRead:
        nonlocal reads
        reads += 1
        read = _read(path, config_dir, max_bytes)
        for warning in read.warnings:
            if warning not in logged:
                logged.add(warning)
                logger.warning("%s", warning)
        return read

    wake = _Wake()
    stop = anyio.Event()

    async def wait_loop() -> InboxWait:
        read = read_once()
        satisfied = until(read)
        delay = policy.first_delay_s
        while not satisfied:
            now = clock.monotonic()
            if deadline is not None and now >= deadline:
                break
            if reads > policy.tries and now - start >= policy.span_s:
                break
            pause = delay
            if reads > policy.tries:
                pause = min(pause, start + policy.span_s - now)
            if deadline is not None:
                pause = min(pause, deadline - now)
            changed = await wake.wait(pause, clock)
            read = read_once()
            satisfied = until(read)
            if not changed:
                delay = min(delay * policy.backoff, policy.max_delay_s)
        return InboxWait(read=read, satisfied=satisfied, reads=reads, events=wake.count)

    outcome: InboxWait | None = None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        if policy.use_events:
            tg.start_soon(_watch, path, root, policy, stop, wake)
            await anyio.lowlevel.checkpoint()  # let the watcher register first
        try:
            outcome = await wait_loop()
        except Exception as exc:  # from `until`: re-raised below as itself, not in a group
            failure = exc
        finally:
            stop.set()  # the watcher thread sees it within one step and returns
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    assert outcome is not None
    return outcome


# ---------------------------------------------------------------------------- consuming


@dataclass(frozen=True)
class ConsumeResult:
    """What :func:`consume_inbox` did.

    Attributes:
        removed: entries removed (delivered ones plus those marked ``read: true``).
        remaining: entries left in the file, including ones that fail the schema.
        refused: why nothing was touched (the lead reads its own inbox, the file is
            invalid or too large, it leaves the config dir), or ``None``.
    """

    removed: int = 0
    remaining: int = 0
    refused: str | None = None


def _lead_refusal(path: Path, root: Path, own_pids: Collection[int]) -> str | None:
    """Why not to consume: the lead recorded in config.json is alive and is not us."""
    team_dir = path.parent.parent
    if not (team_dir / "config.json").exists():
        return None
    team = load_team(team_dir, root)
    pid = None if team is None else team.config.lead_pid
    if pid is None or pid == os.getpid() or pid in own_pids or not pid_alive(pid):
        return None
    return f"lead process {pid} is alive and reads its own inbox; not consuming"


def _rewrite(path: Path, keys: frozenset[str], max_bytes: int) -> ConsumeResult:
    """Under the lock: re-read, drop delivered and read entries, replace atomically."""
    status, raw, problem = _load_array(path, max_bytes)
    if raw is None:
        return ConsumeResult(refused=redact(problem or f"inbox is {status}"))
    kept: list[Any] = []
    for item in raw:
        entry = _parse_entry(item)
        if isinstance(entry, InboxEntry) and (entry.key in keys or entry.read is True):
            continue
        kept.append(item)
    removed = len(raw) - len(kept)
    if removed == 0:
        return ConsumeResult(removed=0, remaining=len(kept))
    mode = path.stat().st_mode & 0o777
    tmp = path.with_name(f"{path.name}.tmp.{secrets.token_hex(8)}")
    data = json.dumps(kept, ensure_ascii=False, indent=2).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ConsumeResult(removed=removed, remaining=len(kept))


async def consume_inbox(
    path: Path,
    keys: Collection[str],
    *,
    config_dir: Path | None = None,
    own_pids: Collection[int] = (),
    lock_policy: LockPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
) -> ConsumeResult:
    """Remove delivered entries (by key) and entries marked ``read: true`` from an inbox.

    Follows Claude Code's lock protocol: make ``<inbox>.lock``, re-read under it, write
    ``<inbox>.tmp.<hex>`` in the same directory, fsync, replace, remove the lock in
    ``finally``. Entries that arrived since the caller's read stay. The inbox is never
    created and ``config.json`` is never touched. While the lead process recorded in the
    team config is alive (and is neither us nor in ``own_pids``) nothing is removed.

    Args:
        path: the inbox file.
        keys: :attr:`TeammateMessage.key` of every delivered message.
        config_dir: the config dir the inbox must stay in (inferred by default).
        own_pids: processes we started, e.g. the CLI we drive, that do not count as a
            live interactive lead.
        lock_policy: lock retries, budget and stale age.
        clock: time source for backoff and lock ages.
        max_bytes: an inbox larger than this is left alone.

    Returns:
        What was removed; ``refused`` says why nothing was.

    Raises:
        InboxError: the lock stayed busy past its budget, or the file could not be written.

    Example:
        >>> read = read_inbox(team.lead_inbox)                           # doctest: +SKIP
        >>> await consume_inbox(team.lead_inbox, [m.key for m in read.messages])  # doctest: +SKIP
        ConsumeResult(removed=3, remaining=0, refused=None)
    """
    path = Path(path)
    root = _confine_root(path, config_dir)
    if not within(path, root):
        reason = redact(f"inbox {path} resolves outside {root} (a symlink out?); refused")
        logger.warning("%s", reason)
        return ConsumeResult(refused=reason)
    refusal = _lead_refusal(path, root, own_pids)
    if refusal is not None:
        return ConsumeResult(refused=refusal)
    if not path.is_file():
        return ConsumeResult()
    wanted = frozenset(keys)
    try:
        result = await with_lock(
            path, lambda: _rewrite(path, wanted, max_bytes), policy=lock_policy, clock=clock
        )
    except OSError as exc:
        raise InboxError(f"cannot rewrite inbox: {exc.strerror}", path=str(path)) from None
    if result.refused is not None:
        logger.warning("%s", result.refused)
    return result
