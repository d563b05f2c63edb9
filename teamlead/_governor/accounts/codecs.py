"""What a shared account stores, and reading it back as untrusted input.

The machine's SQLite file and a Redis database are written by every teamlead process of
the account, by older and newer teamleads, and by anything else that can open them: a
row may hold text where a time belongs, a number far out of range, or JSON of another
shape. So what a shared account reads back is checked like a header: the learnt limits
(:func:`read_clamped`: every field of its type and range, its times clamped so no row
can pause a bucket longer than any upstream could ask), a lease's expiry (at most
:data:`MAX_LEASE_S` away, plus :data:`MAX_AHEAD_S` for the clocks of a shared home's
hosts), any other time (:func:`read_time`) and every count (:func:`read_count`). An
account drops a bad entry where it finds it and tells it once per process per kind
(:class:`WarnOnce`), never raising it into a request.

Times in ``Limits`` are the reading process's monotonic clock; a shared account stores
wall-clock times and translates (:func:`dump_limits`, :func:`from_wall`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass, fields, replace
from typing import Any

from ..._private import json_object
from ...clock import Clock
from ..aimd import Limits
from ..retry_after import PLAUSIBLE_PAUSE_S

__all__ = [
    "StoredLimits",
    "MAX_AHEAD_S",
    "MAX_LEASE_S",
    "MAX_SEQ",
    "WarnOnce",
    "clamped_note",
    "dump_limits",
    "from_wall",
    "not_learnt",
    "read_clamped",
    "read_count",
    "read_time",
    "stored_limits",
    "field_of",
]

log = logging.getLogger("teamlead.governor")

#: The longest a lease lives without renewal; a stored expiry further ahead is void.
MAX_LEASE_S = 600.0
#: How far ahead of the reader's clock a time another process stored may be: the clocks of
#: the hosts on a shared home disagree a little. A time further ahead was not written by
#: any clock of the account, so it cannot be believed.
MAX_AHEAD_S = 600.0
#: The largest sequence number, epoch or count read back (exact in a double, as in JSON
#: and Lua); a larger one was not written by teamlead.
MAX_SEQ = 2**53
#: The most slots one bucket is learnt to hold.
_MAX_CAP = 2**31
#: The longest stored limits (ours are about 250 characters); a longer text is not read.
_MAX_TEXT = 4096

_FIELDS = tuple(f.name for f in fields(Limits))
#: The integer fields of ``Limits``: the least and most each may be, and whether ``None``
#: (JSON ``null``) is allowed.
_COUNTS: dict[str, tuple[int, int, bool]] = {
    "cap": (1, _MAX_CAP, False),
    "epoch": (0, MAX_SEQ, False),
    "last_good": (1, _MAX_CAP, True),
    "successes": (0, MAX_SEQ, False),
    "bad_level": (1, _MAX_CAP, True),
    "cut_epoch": (-1, MAX_SEQ, False),
}


class WarnOnce:
    """Warnings told at most once per kind.

    What a shared store drops is told once, not per request: a bad row is dropped where it
    is found, but a writer that keeps writing them would else flood the run's output. A
    process's accounts share the one of its :class:`~teamlead.ProcessState` (its relay
    pool's); an account made alone has its own; tests pass theirs.

    Example:
        >>> warn = WarnOnce()
        >>> warn("machine:lease", "shared limits: dropped an unreadable lease")
        True
        >>> warn("machine:lease", "shared limits: dropped an unreadable lease")
        False
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._told: set[str] = set()
        self._lock = threading.Lock()
        self._log = logger or log

    def __call__(self, kind: str, message: str) -> bool:
        """Log ``message`` as a warning unless ``kind`` was told already; whether it was."""
        with self._lock:
            if kind in self._told:
                return False
            self._told.add(kind)
        self._log.warning("%s", message)
        return True


def _moved(limits: Limits, offset: float) -> Limits:
    """``limits`` with its times moved by ``offset``."""
    return replace(
        limits,
        bad_at=limits.bad_at + offset,
        cooldown_until=limits.cooldown_until + offset,
    )


def _wall_offset(clock: Clock) -> float:
    return clock.time() - clock.monotonic()


@dataclass(frozen=True)
class StoredLimits:
    """One bucket's learnt limits as a shared store holds them, for people
    (``teamlead limits``); no secret is in any of it.

    Attributes:
        key: the stored key: the account (``host:port#hash``, see
            :func:`~teamlead._relay.shared.account_of`), then the bucket ``provider/model``.
        limits: what was learnt (wall-clock times).
        updated: when it was last written (wall-clock seconds).
        host: the machine that wrote it last (``None`` from a teamlead that did not say).
    """

    key: str
    limits: Limits
    updated: float
    host: str | None = None

    @property
    def account(self) -> str:
        """The account part of :attr:`key` (empty for a key of no account)."""
        head, _, rest = self.key.partition("/")
        return head if "#" in head and rest else ""

    @property
    def bucket(self) -> str:
        """The bucket part of :attr:`key`, ``provider/model``."""
        return self.key.partition("/")[2] if self.account else self.key


def stored_limits(key: object, text: object, updated: object, *, now: float) -> StoredLimits | None:
    """A :class:`StoredLimits` from one stored row, or ``None`` when any of it cannot be
    read (the same checks as a request's read)."""
    if not isinstance(key, str) or not key or len(key) > _MAX_TEXT:
        return None
    written = read_time(updated, latest=now + MAX_AHEAD_S)
    found = read_clamped(text, now=now, written=written)
    if written is None or found is None:
        return None
    host = field_of(text, "host", None)
    return StoredLimits(key, found[0], written, host[:255] if isinstance(host, str) else None)


def from_wall(limits: Limits, clock: Clock) -> Limits:
    """Stored ``limits`` (wall-clock times) on ``clock``'s monotonic time."""
    return _moved(limits, -_wall_offset(clock))


def dump_limits(limits: Limits, clock: Clock, host: str, updated: float | None = None) -> str:
    """``limits`` as a shared store keeps them: JSON with wall-clock times (``-inf`` as
    ``null``), the writing ``host`` and the time it was ``updated`` when given (readers
    ignore what they do not know)."""
    wall = _moved(limits, _wall_offset(clock))
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(wall, name)
        out[name] = None if isinstance(value, float) and not math.isfinite(value) else value
    out["host"] = host
    if updated is not None:
        out["updated"] = updated
    return json.dumps(out)


def clamped_note(key: str, where: str, limits: Limits, now: float) -> str:
    """The warning for ``key``'s pause read clamped (see :func:`read_clamped`); ``now`` is
    wall-clock seconds, as the stored ``limits``' times are."""
    return (
        f"the pause of {key!r} in {where} ends further ahead than any upstream asks: held "
        f"{max(0.0, limits.cooldown_until - now):.0f} s at most, and not kept"
    )


def field_of(text: object, name: str, default: object) -> object:
    """Field ``name`` of a stored JSON object text (unchecked: its reader checks it), else
    ``default``; :func:`read_time` reads ``updated``, the time it was written.

    Example:
        >>> field_of('{"cap": 3, "updated": 12.5}', "updated", 0.0), field_of("x", "host", None)
        (12.5, None)
    """
    data = _object(text)
    return default if data is None else data.get(name, default)


def _object(text: object) -> dict[str, Any] | None:
    """The JSON object in a stored text (at most ``_MAX_TEXT`` long), else ``None``."""
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        return None
    return json_object(text)


def _time(value: object) -> float | None:
    """A stored time as seconds (``None``, JSON ``null``, is never: ``-inf``); ``None``
    when it is not a number (``nan`` included)."""
    if value is None:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    return None if math.isnan(seconds) else seconds


def read_count(value: object, *, low: int = 0, high: int = MAX_SEQ) -> int | None:
    """A stored integer between ``low`` and ``high``; ``None`` for anything else (text, a
    float, a bool).

    Example:
        >>> read_count(7), read_count("7"), read_count(-1)
        (7, None, None)
    """
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def read_time(value: object, *, latest: float) -> float | None:
    """A stored wall-clock time: a finite number of seconds not after ``latest``; ``None``
    for anything else (text, ``inf``, a time no process of the account could have written).

    Example:
        >>> read_time(12.5, latest=100.0), read_time("abc", latest=100.0)
        (12.5, None)
    """
    seconds = _time(value)
    return seconds if seconds is not None and math.isfinite(seconds) and seconds <= latest else None


def read_clamped(
    text: object, *, now: float, written: float | None = None
) -> tuple[Limits, bool] | None:
    """The learnt limits in a stored JSON text, in wall-clock time, and whether their pause
    had to be clamped; ``None`` when any part of it cannot be read (the caller drops it,
    and the bucket starts afresh).

    A time is clamped where it is read: a pause to at most
    :data:`~teamlead._governor.retry_after.PLAUSIBLE_PAUSE_S` after the row was written
    (``written``, or ``now`` when it is unknown or ahead of it), as a live header's is, so
    however often it is read it ends by then; ``bad_at`` to at most ``now``. A clamped pause
    was asked by no upstream: it is held until the bound and never written back as learnt
    (see :func:`not_learnt`).

    Args:
        text: the stored value (anything: it is checked to be a short JSON object).
        now: wall-clock seconds.
        written: when the row was last written (wall-clock seconds), if known.

    Example:
        >>> planted = '{"cap": 3, "cooldown_until": 1e18}'
        >>> read_clamped(planted, now=100.0)
        (Limits(cap=3, ... cooldown_until=280.0, measured=False), True)
        >>> read_clamped(planted, now=100.0, written=40.0)[0].cooldown_until
        220.0
        >>> read_clamped('{"cap": 3, "cooldown_until": 150}', now=100.0)[1]
        False
        >>> read_clamped('{"cap": 3, "successes": "x"}', now=100.0) is None
        True
    """
    data = _object(text)
    if data is None:
        return None
    values: dict[str, Any] = {}
    for name, (low, high, optional) in _COUNTS.items():
        if name not in data:
            if name == "cap":
                return None
            continue
        value = data[name]
        if not (value is None and optional) and read_count(value, low=low, high=high) is None:
            return None
        values[name] = value
    measured = data.get("measured", False)
    if not isinstance(measured, bool):
        return None
    bad_at, cooldown_until = _time(data.get("bad_at")), _time(data.get("cooldown_until"))
    if bad_at is None or cooldown_until is None:
        return None
    anchor = now if written is None or not math.isfinite(written) else min(written, now)
    latest = anchor + PLAUSIBLE_PAUSE_S
    limits = Limits(
        **values,
        measured=measured,
        bad_at=min(bad_at, now),
        cooldown_until=min(cooldown_until, latest),
    )
    return limits, cooldown_until > latest


def not_learnt(result: Limits, read: Limits | None, clamped: bool) -> Limits:
    """What to write of a rule's ``result``, given what it ``read``: a pause clamped on
    reading (``clamped``: see :func:`read_clamped`) that the rule left as it was is not
    written back, so no run stores a pause no upstream asked for as its own.

    Example:
        >>> planted = Limits(cap=3, cooldown_until=280.0)
        >>> not_learnt(planted, planted, True).cooldown_until
        -inf
        >>> not_learnt(planted, planted, False).cooldown_until
        280.0
    """
    if clamped and read is not None and result.cooldown_until == read.cooldown_until:
        return replace(result, cooldown_until=-math.inf)
    return result
