"""Emulated rate limits as the Messages API enforces them: token buckets.

Anthropic's requests, input-token and output-token limits are buckets that refill
continuously up to their capacity (and may be enforced over intervals shorter than a
minute). :class:`TokenBucket` describes one for the scripted server; the server keeps its
level (:class:`RateBuckets`, thread-safe: the server answers on many threads) on its own
monotonic clock, and for each ``/v1/messages`` request:

* **draws** 1 from a ``requests`` bucket, and the request's input from an
  ``input-tokens`` bucket: :func:`input_tokens_of` (the body's characters / 4, rounded
  up; no prompt cache is emulated, so every input token counts); the answer's ``usage``
  reports exactly that many ``input_tokens``;
* **refuses** a request some bucket cannot cover with 429 ``rate_limit_error`` and
  ``retry-after``: the seconds until the bucket will cover it, rounded up (drawing
  nothing). A request larger than a bucket's whole capacity is taken once the bucket is
  full, and leaves it in debt;
* **describes** every bucket on every answer, the 429s included (unless
  ``headers=False``): ``anthropic-ratelimit-<kind>-limit`` (the capacity),
  ``-remaining`` (what is left after this request, rounded down) and ``-reset`` (the
  RFC 3339 time, with milliseconds, at which the bucket will be full again).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from ..errors import SetupError

__all__ = ["BucketKind", "Draw", "RateBuckets", "TokenBucket", "input_tokens_of"]

BucketKind = Literal["requests", "input-tokens"]

#: Characters of request body per input token, as the emulated upstream counts.
CHARS_PER_TOKEN = 4


def input_tokens_of(body_chars: int) -> int:
    """The input tokens a request body of ``body_chars`` characters draws (and reports).

    Example:
        >>> input_tokens_of(28784), input_tokens_of(1)
        (7196, 1)
    """
    return max(1, math.ceil(body_chars / CHARS_PER_TOKEN))


@dataclass(frozen=True)
class TokenBucket:
    """One emulated rate limit of the scripted server: a bucket of ``capacity`` refilled
    at ``refill_per_s``, drawn by requests (``kind="requests"``) or their input tokens.

    Args:
        capacity: the bucket's size (``anthropic-ratelimit-<kind>-limit``).
        refill_per_s: what it regains per second, continuously.
        kind: what a request draws: 1 (``requests``), or its input tokens.
        headers: send ``anthropic-ratelimit-<kind>-*`` on every answer; ``False``
            emulates a gateway that strips them (only 429 and ``retry-after`` remain).

    Raises:
        SetupError: a capacity or refill rate that is not positive, or an unknown kind.

    Example:
        >>> TokenBucket(capacity=20000, refill_per_s=12000, kind="input-tokens").kind
        'input-tokens'
    """

    capacity: float
    refill_per_s: float
    kind: BucketKind = "input-tokens"
    headers: bool = True

    def __post_init__(self) -> None:
        if not (self.capacity > 0 and self.refill_per_s > 0):
            raise SetupError(
                f"a token bucket needs a positive capacity and refill rate, got "
                f"{self.capacity} and {self.refill_per_s}"
            )
        if self.kind not in ("requests", "input-tokens"):
            raise SetupError(f"a token bucket is 'requests' or 'input-tokens', not {self.kind!r}")

    def minimum_s(self, drawn: float) -> float:
        """The least time in which this bucket lets ``drawn`` through, from full."""
        return max(0.0, drawn - self.capacity) / self.refill_per_s


@dataclass(frozen=True)
class Draw:
    """What the buckets said to one request: taken or refused (``retry_after``), what it
    drew from each kind, and the headers of its answer."""

    taken: bool
    drawn: dict[str, float]
    retry_after: float | None
    headers: tuple[tuple[str, str], ...]


def _rfc3339(wall: float) -> str:
    when = datetime.fromtimestamp(wall, tz=timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RateBuckets:
    """The levels of a server's buckets; :meth:`draw` is one request's turn (thread-safe)."""

    def __init__(self, buckets: Sequence[TokenBucket], now: float) -> None:
        self.buckets = tuple(buckets)
        self._levels = [b.capacity for b in self.buckets]
        self._at = now
        self._lock = threading.Lock()

    def draw(self, input_tokens: int, *, now: float, wall: float) -> Draw:
        """Take a request of ``input_tokens`` at ``now`` (monotonic) if every bucket covers
        it; ``wall`` is the wall-clock time of ``now``, for the resets."""
        with self._lock:
            elapsed = max(0.0, now - self._at)
            self._at = max(self._at, now)
            levels = [
                min(b.capacity, level + b.refill_per_s * elapsed)
                for b, level in zip(self.buckets, self._levels, strict=True)
            ]
            amounts = [1.0 if b.kind == "requests" else float(input_tokens) for b in self.buckets]
            waits = []
            for b, level, amount in zip(self.buckets, levels, amounts, strict=True):
                need = min(amount, b.capacity)  # a request above capacity: once full
                if level < need:
                    waits.append((need - level) / b.refill_per_s)
            taken = not waits
            if taken:
                levels = [level - amount for level, amount in zip(levels, amounts, strict=True)]
            self._levels = levels
            headers: list[tuple[str, str]] = []
            for b, level in zip(self.buckets, levels, strict=True):
                if not b.headers:
                    continue
                prefix = f"anthropic-ratelimit-{b.kind}"
                full_in = (b.capacity - level) / b.refill_per_s
                headers += [
                    (f"{prefix}-limit", f"{b.capacity:g}"),
                    (f"{prefix}-remaining", str(max(0, math.floor(level)))),
                    (f"{prefix}-reset", _rfc3339(wall + full_in)),
                ]
        drawn: dict[str, float] = {}
        if taken:
            drawn = {b.kind: a for b, a in zip(self.buckets, amounts, strict=True)}
        retry = None if taken else float(max(1, math.ceil(max(waits) - 1e-9)))
        return Draw(taken, drawn, retry, tuple(headers))
