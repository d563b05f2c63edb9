"""Token budgets: admit a request only when the upstream's rate-limit windows can cover it.

Anthropic's limits (requests, input and output tokens per minute) are token buckets,
replenished continuously up to their limit. Every answer may say how full each one is
(``anthropic-ratelimit-<window>-{limit,remaining,reset}``, read by
:mod:`.ratelimit_headers`). A concurrency limit does not describe such an upstream: twelve
agents whose requests the bucket cannot all cover at once all retry on the same
``retry-after`` second and are refused again. So the governor keeps, per bucket, a
:class:`Budget`: a model of each window (:class:`Window`), and the charge of each request
(:class:`Charge`) before it goes. It is this process's model: processes that share an
account each read the upstream's ``remaining``, which counts them all.

* **Charge.** A request draws 1 from ``requests``, its estimated input
  (:mod:`.token_estimate`, times a ratio learnt from the reported ``usage``, less a prefix
  the upstream reported caching) from ``input-tokens``, the mean output seen from
  ``output-tokens``, and both from ``tokens``.
* **Admission** (:func:`ready_at`). A request goes when every window, its pending draws
  counted as drawn, keeps ``headroom`` of its limit after its own; the governor serves its
  queue one at a time, so waiters get successive slots at the refill rate. A request larger
  than the whole limit goes alone once the window is full.
* **Anchoring** (:func:`anchor`). A header replaces the model: its level is the
  upstream's word; the refill rate is measured from the headers.
* **429s** (:meth:`Budget.refused`). A 429 a window explains is the budget's, not a
  concurrency limit's; a window no header describes may be learnt from 429s
  (:func:`learn`).

The functions are pure: each takes ``now`` (the governor clock's monotonic seconds; a
header's wall-clock ``reset`` is turned into them when read, and one further than
:data:`~teamlead._governor.retry_after.PLAUSIBLE_PAUSE_S` away is faulty, skipped).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from .ratelimit_headers import WINDOWS, RateWindow
from .retry_after import PLAUSIBLE_PAUSE_S
from .token_estimate import InputEstimate
from .usage import Usage

__all__ = [
    "CACHE_TTL_S",
    "DEFAULT_WINDOW_S",
    "GROWTH",
    "Budget",
    "Charge",
    "Draw",
    "Window",
    "anchor",
    "draw",
    "fold",
    "learn",
    "level_at",
    "ready_at",
    "refill_of",
    "refused",
    "resolve",
]

#: What a window is taken to refill over, until a header shows its rate (per minute).
DEFAULT_WINDOW_S = 60.0
#: How long a prefix the upstream reported caching counts as cached (its cache's lifetime).
CACHE_TTL_S = 300.0
#: A learnt window's refill grows by this factor for every limit's worth taken unrefused
#: (up to a limit's worth a second: light load takes it without showing the upstream has it).
GROWTH = 1.25
#: Observations of ``(deficit, seconds to full)`` the refill rate is summed over.
_SPANS = 8
#: A learnt refill is measured between two refusals at least this far apart.
_MIN_SPAN_S = 0.5
#: The weight of a new ``usage`` in the learnt ratio and output size.
_LEARN = 0.3
_RATIO_BOUNDS = (0.05, 20.0)
#: Draws kept for learning a window from scratch (and how far back).
_HISTORY = 1024
_HISTORY_S = 60.0


@dataclass(frozen=True)
class Charge:
    """What one request draws from each window.

    Example:
        >>> Charge(input_tokens=900, output_tokens=100).of("tokens")
        1000
    """

    requests: float = 1.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0

    def of(self, name: str) -> float:
        """The draw from window ``name``."""
        if name == "requests":
            return self.requests
        if name == "input-tokens":
            return self.input_tokens
        if name == "output-tokens":
            return max(1.0, self.output_tokens)
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Draw:
    """One request's draw from a window: its ticket, when it was sent, and how much.
    ``pending``: not answered yet (it may or may not have been counted)."""

    ticket: int
    at: float
    amount: float
    pending: bool = True


@dataclass(frozen=True)
class Window:
    """The model of one rate-limit window; see the module docstring.

    Attributes:
        name: ``requests``, ``tokens``, ``input-tokens`` or ``output-tokens``.
        limit: the window's size.
        refill: per second; ``None`` until seen (then ``limit / 60`` is assumed).
        level: what was left at ``at``, every draw up to ``ticket`` counted.
        at: when ``level`` was true.
        ticket: the last draw ``level`` counts.
        heard: the last request whose answer's header gave the level (the draws up to it
            are the upstream's count; later ones folded in are the model's).
        draws: the later draws, in ticket order.
        spans: the last ``(deficit, seconds to full)`` the headers showed.
        learnt: no header described the window; it was learnt from 429s.
        refused_at: when the last refusal without headers came (learnt windows).
        taken: what the upstream took since then.
        clean: what it took since the last refusal or growth.
    """

    name: str
    limit: float
    refill: float | None = None
    level: float = 0.0
    at: float = 0.0
    ticket: int = 0
    heard: int = 0
    draws: tuple[Draw, ...] = ()
    spans: tuple[tuple[float, float], ...] = ()
    learnt: bool = False
    refused_at: float | None = None
    taken: float = 0.0
    clean: float = 0.0


def refill_of(window: Window) -> float:
    """The refill rate per second: the measured one, else the limit over a minute."""
    if window.refill is not None and window.refill > 0:
        return window.refill
    return window.limit / DEFAULT_WINDOW_S


def level_at(window: Window, now: float) -> float:
    """What the window holds at ``now``: its level, each later draw taken when it was sent,
    refilled in between and never above the limit (may be negative: in debt).

    Example:
        >>> w = Window("input-tokens", limit=100, refill=10, level=100, at=0.0,
        ...            draws=(Draw(1, 0.0, 80), Draw(2, 1.0, 50)))
        >>> level_at(w, 1.0), level_at(w, 3.0), level_at(w, 60.0)
        (-20.0, 0.0, 100.0)
    """
    level, at = window.level, window.at
    rate = refill_of(window)
    for d in window.draws:
        level = min(window.limit, level + rate * max(0.0, d.at - at)) - d.amount
        at = max(at, d.at)
    return float(min(window.limit, level + rate * max(0.0, now - at)))


def ready_at(window: Window, amount: float, now: float, *, headroom: float = 0.0) -> float:
    """The earliest time from ``now`` the window covers ``amount`` and keeps ``headroom``
    (a share of its limit) after it; ``inf`` for a request larger than the limit while
    others are pending (it goes alone, once they are answered and the window is full).

    Example:
        >>> w = Window("input-tokens", limit=20000, refill=12000, level=2000, at=0.0)
        >>> ready_at(w, 1000, 0.0), ready_at(w, 8000, 0.0), ready_at(w, 30000, 0.0)
        (0.0, 0.5, 1.5)
    """
    need = amount + headroom * window.limit
    if need > window.limit:
        if amount > window.limit and any(d.pending for d in window.draws):
            return math.inf
        need = window.limit  # the whole window: it goes once full
    level = level_at(window, now)
    if level >= need:
        return now
    return now + (need - level) / refill_of(window)


def draw(window: Window, ticket: int, amount: float, now: float) -> Window:
    """``window`` with a pending draw of ``amount`` sent at ``now``."""
    return replace(window, draws=(*window.draws, Draw(ticket, now, amount)))


def resolve(window: Window, ticket: int, *, charged: bool, amount: float | None = None) -> Window:
    """``ticket``'s draw answered: counted (``charged``, as ``amount`` if given) or not (a
    refusal: the upstream took nothing)."""
    draws = []
    for d in window.draws:
        if d.ticket != ticket:
            draws.append(d)
        elif charged:
            draws.append(replace(d, pending=False, amount=d.amount if amount is None else amount))
    return replace(window, draws=tuple(draws))


def fold(window: Window) -> Window:
    """Take the answered draws at the front into the level (the model stays the same)."""
    level, at, ticket = window.level, window.at, window.ticket
    rate = refill_of(window)
    draws = list(window.draws)
    while draws and not draws[0].pending:
        d = draws.pop(0)
        level = min(window.limit, level + rate * max(0.0, d.at - at)) - d.amount
        at, ticket = max(at, d.at), d.ticket
    return replace(window, level=level, at=at, ticket=ticket, draws=tuple(draws))


def anchor(
    window: Window | None,
    header: RateWindow,
    *,
    ticket: int | None,
    sent_at: float,
    now: float,
    wall_now: float,
) -> Window | None:
    """The window as ``header`` describes it, from the answer to ``ticket`` (sent at
    ``sent_at``; ``None``: an answer the budget did not send, read as of ``now``); ``None``
    when neither the header nor the model knows the limit, or the header is faulty.

    The header's level counts every draw sent up to ``ticket``: those are dropped, later
    ones kept. Both err on the safe side of the time between the request's arrival
    upstream (unknown) and now: the level is taken as of now (what refilled meanwhile is
    not counted), the refill rate as from when the request was sent. A header older than
    the model (an earlier ticket) only updates the limit and the refill rate.

    Example:
        >>> h = RateWindow("input-tokens", remaining=8000, reset_at=1001.0, limit=20000)
        >>> w = anchor(None, h, ticket=3, sent_at=0.0, now=0.0, wall_now=1000.0)
        >>> w.level, w.refill
        (8000.0, 12000.0)
    """
    full_in = header.reset_at - wall_now
    if full_in > PLAUSIBLE_PAUSE_S:
        return window  # a faulty reset: no per-minute bucket is that far from full
    limit = header.limit if header.limit else (window.limit if window is not None else None)
    if limit is None:
        return window
    remaining = float(min(header.remaining, limit))
    full_at = now + max(0.0, full_in)
    spans = window.spans if window is not None else ()
    known = window.refill if window is not None and not window.learnt else None
    if remaining <= 0 and known:
        # ``remaining`` stops at 0, the reset does not: a window a request larger than
        # it left in debt is full only once the debt is paid too
        remaining = min(0.0, limit - known * max(0.0, full_in))
    if remaining < limit and full_at - sent_at > 0:
        spans = (*spans, (limit - remaining, full_at - sent_at))[-_SPANS:]
    refill = sum(d for d, _ in spans) / sum(s for _, s in spans) if spans else known
    if window is not None and ticket is not None and ticket < window.ticket:
        return replace(window, limit=limit, refill=refill, spans=spans, learnt=False)
    heard = ticket if ticket is not None else (window.ticket if window is not None else 0)
    fresh = Window(header.name, limit, refill, level=remaining, at=now, ticket=heard, heard=heard)
    if window is None:
        return fresh
    if ticket is None:
        # an answer the budget did not send: its level is as of now, and the pending draws
        # may be in it or not; counting them again errs on the safe side
        draws = tuple(d for d in window.draws if d.pending)
    else:
        draws = tuple(d for d in window.draws if d.ticket > ticket)
    # the model's draws and spans are kept; what was learnt from 429s gives way to the header
    return replace(fresh, draws=draws, spans=spans)


def refused(window: Window, amount: float, now: float, retry_after: float | None) -> Window:
    """A 429 without headers, for a request of ``amount`` (its draw already resolved as
    not taken): the window could not cover it, and will in ``retry_after`` seconds (the
    upstream's word, honoured for this request; the ones behind it follow at the refill
    rate). The level drops to agree, never rises; a learnt window's refill, if it promised
    more, drops too.

    Example:
        >>> w = Window("input-tokens", limit=20000, refill=12000, level=20000, at=0.0)
        >>> refused(w, 6000, 0.0, 1.0).level, refused(w, 18000, 0.0, 1.0).level
        (-6000.0, 6000.0)
    """
    rate = refill_of(window)
    modelled = level_at(window, now)
    target = 0.0 if retry_after is None else amount - rate * retry_after
    pending = sum(d.amount for d in window.draws if d.pending)
    level = min(modelled, target)
    refill = window.refill
    if window.learnt and modelled >= amount and refill is not None:
        refill = refill / GROWTH  # it promised what the upstream did not have
    return replace(
        window,
        refill=refill,
        level=level + pending,  # the pending draws are taken at once, from this level
        at=now,
        draws=tuple(replace(d, at=now) for d in window.draws if d.pending),
    )


def learn(
    window: Window | None,
    *,
    taken: Iterable[tuple[float, float]],
    amount: float,
    now: float,
    retry_after: float | None,
    since: float | None = None,
) -> Window:
    """An input-token window no header describes, learnt from 429s a concurrency limit
    cannot explain.

    ``taken``: the draws the upstream took lately, ``(sent at, amount)``; ``since``: when
    the previous such refusal came (a fresh window is learnt from the second). Both
    refusals found the window empty, so what the upstream took in between, over the time
    between them (at least :data:`_MIN_SPAN_S`), is its refill; with nothing to measure,
    ``amount / retry_after`` (an empty window covering this request by then). The limit is
    what it took since it was last idle (at least ``amount``). Each later refusal of a
    learnt window measures the refill again. The level is then set as :func:`refused` does.

    Example:
        >>> taken = [(0.0, 8000.0), (0.1, 8000.0), (0.6, 4000.0)]
        >>> first = learn(None, taken=taken, amount=8000.0, now=1.2, retry_after=1.0, since=0.2)
        >>> first.limit, first.refill, first.level
        (20000.0, 4000.0, 0.0)
        >>> later = learn(first, taken=[], amount=8000.0, now=3.2, retry_after=1.0)
        >>> later.refill  # nothing taken in between, and the model promised 8000: lowered
        3200.0
    """
    if window is None or not window.learnt:
        listed = list(taken)
        limit = max(_since_idle(listed, now), amount)
        guess = amount / retry_after if retry_after else limit / DEFAULT_WINDOW_S
        if since is not None and now - since >= _MIN_SPAN_S:
            between = sum(a for at, a in listed if since < at <= now)
            guess = between / (now - since) if between > 0 else guess
        fresh = Window("input-tokens", limit, guess, level=0.0, at=now, learnt=True)
        return replace(refused(fresh, amount, now, retry_after), refused_at=now)
    refill = window.refill
    if window.refused_at is not None and now - window.refused_at >= _MIN_SPAN_S and window.taken:
        refill = window.taken / (now - window.refused_at)
    measured = replace(window, refill=refill, limit=max(window.limit, amount))
    return replace(
        refused(measured, amount, now, retry_after), refused_at=now, taken=0.0, clean=0.0
    )


def _since_idle(taken: list[tuple[float, float]], now: float) -> float:
    """What was taken since the upstream was last idle (a gap of a minute or more)."""
    total = 0.0
    last = now
    for at, amount in sorted(taken, reverse=True):
        if last - at >= DEFAULT_WINDOW_S:
            break
        total += amount
        last = at
    return total


def _took(window: Window, amount: float) -> Window:
    """A learnt window's upstream took ``amount``: counted towards the refill measure and
    the growth (a limit's worth taken unrefused earns :data:`GROWTH`, up to the limit a
    second; a refill measured higher is kept)."""
    if not window.learnt:
        return window
    clean = window.clean + amount
    refill = window.refill
    while clean >= window.limit and refill is not None:
        refill, clean = min(refill * GROWTH, max(refill, window.limit)), clean - window.limit
    return replace(window, taken=window.taken + amount, clean=clean, refill=refill)


@dataclass
class _Ticket:
    charge: Charge
    estimate: InputEstimate | None
    sent_at: float
    seen: tuple[RateWindow, ...] | None = None  # the headers of its answer, once read
    resolved: bool = False
    corrected: bool = False  # its draw in the model was set to the usage counted


@dataclass
class Budget:
    """One bucket's token budget: the windows, the learnt ratio and output, the prefixes
    the upstream holds, and the requests sent. Synchronous; every call takes ``now``.

    The governor asks :meth:`ready_at` for the head of its queue, :meth:`grant` when it
    sends, then reports the answer: :meth:`observe` (headers), :meth:`accepted`,
    :meth:`refused` (a 429) or :meth:`dropped` (a 529), :meth:`used` (usage) and
    :meth:`release`.

    Example:
        >>> budget = Budget()
        >>> t = budget.grant(budget.charge(InputEstimate(5000), 0.0), None, 0.0)
        >>> budget.observe(t, [RateWindow("input-tokens", 0, reset_at=1.0, limit=5000)],
        ...                now=0.0, wall_now=0.0)
        ['input-tokens']
        >>> budget.ready_at(budget.charge(InputEstimate(5000), 0.0), 0.0)
        1.0
    """

    windows: dict[str, Window] = field(default_factory=dict)
    ratio: float | None = None
    output: float | None = None
    headers_seen: bool = False
    _suspect: float | None = None  # the last 429 that looked like a window's, unlearnt
    _cached: dict[int, float] = field(default_factory=dict)
    _tickets: dict[int, _Ticket] = field(default_factory=dict)
    _seq: int = 0
    _taken: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_HISTORY))

    # -- before sending -------------------------------------------------------------------
    def charge(self, estimate: InputEstimate | None, now: float) -> Charge:
        """What a request of ``estimate`` draws now (the ratio and the cache applied)."""
        output = self.output or 0.0
        if estimate is None:
            return Charge(output_tokens=output)
        cached = max(
            (p.tokens for p in estimate.prefixes if self._cached.get(p.fingerprint, -1.0) > now),
            default=0.0,
        )
        ratio = self.ratio if self.ratio is not None else 1.0
        return Charge(input_tokens=ratio * max(0.0, estimate.tokens - cached), output_tokens=output)

    def ready_at(
        self, charge: Charge, now: float, *, headroom: float = 0.0, learnt: bool = True
    ) -> float:
        """When every window covers ``charge`` (``now`` when there is no window);
        ``learnt=False`` leaves out the windows learnt without headers (guesses)."""
        return max(
            (
                ready_at(w, charge.of(name), now, headroom=headroom)
                for name, w in self.windows.items()
                if learnt or not w.learnt
            ),
            default=now,
        )

    def grant(self, charge: Charge, estimate: InputEstimate | None, now: float) -> int:
        """A request of ``charge`` is sent: its ticket, its draw pending in every window."""
        self._seq += 1
        ticket = self._seq
        self._tickets[ticket] = _Ticket(charge, estimate, now)
        for name, w in self.windows.items():
            self.windows[name] = draw(w, ticket, charge.of(name), now)
        return ticket

    # -- the answer -----------------------------------------------------------------------
    def observe(
        self, ticket: int | None, headers: Sequence[RateWindow], *, now: float, wall_now: float
    ) -> list[str]:
        """Read the windows of an answer (to ``ticket``; ``None``: a request not sent
        through the budget); the names of those the budget keeps a model of."""
        held = self._tickets.get(ticket) if ticket is not None else None
        if held is not None:
            held.seen = tuple(headers)
        sent_at = held.sent_at if held is not None else now
        kept = []
        for header in headers:
            if header.name not in WINDOWS:
                continue
            before = self.windows.get(header.name)
            after = anchor(
                before,
                header,
                ticket=ticket if held is not None else None,
                sent_at=sent_at,
                now=now,
                wall_now=wall_now,
            )
            if after is not None:
                self.windows[header.name] = after
                self.headers_seen = True
                kept.append(header.name)
        return kept

    def accepted(self, ticket: int, now: float) -> None:
        """The upstream took ``ticket``'s request (it streams): a window its answer did not
        describe counts the draw as taken."""
        held = self._settle(ticket, charged=True)
        if held is None:
            return
        self._taken.append((held.sent_at, held.charge.input_tokens))
        for name, w in self.windows.items():
            self.windows[name] = _took(w, held.charge.of(name))
        self._forget_old(now)

    def refused(
        self, ticket: int, *, now: float, retry_after: float | None, learn_window: bool
    ) -> bool:
        """A 429 for ``ticket``; whether a window explains it (then it is the budget's to
        pace, not a concurrency limit's).

        Explained: the answer's headers show a window short of the charge; or, without
        headers, a window the budget models was nearly drawn (within a quarter of its limit
        of the charge), and it is lowered to agree (:func:`refused`); or
        ``learn_window`` (the governor found no concurrency limit to blame), no header
        ever described a window, ``retry_after`` is one a per-minute bucket could ask for
        (at most a minute) and this is the second such 429 within a minute: the
        input-token window is learnt (:func:`learn`). The first is left to the
        concurrency rules, as any 429: one refusal is no pattern.
        """
        held = self._tickets.get(ticket)
        if held is None:
            return False
        seen = held.seen or ()
        held.resolved = True
        charge = held.charge
        self._resolve(ticket, charged=False)
        described = {h.name for h in seen if h.name in self.windows}
        if any(h.remaining < charge.of(h.name) for h in seen if h.name in self.windows):
            return True
        learnt = self.windows.get("input-tokens")

        def learn_input(window: Window | None, since: float | None = None) -> bool:
            self.windows["input-tokens"] = learn(
                window,
                taken=self._taken,
                amount=charge.input_tokens,
                now=now,
                retry_after=retry_after,
                since=since,
            )
            return True

        if learnt is not None and learnt.learnt and "input-tokens" not in described:
            return learn_input(learnt)
        short = [
            name
            for name, w in self.windows.items()
            if name not in described and level_at(w, now) - charge.of(name) < 0.25 * w.limit
        ]
        if short:
            for name in short:
                self.windows[name] = refused(self.windows[name], charge.of(name), now, retry_after)
            return True
        plausible = retry_after is not None and 0 < retry_after <= DEFAULT_WINDOW_S
        if learn_window and plausible and not self.headers_seen and charge.input_tokens > 0:
            suspect, self._suspect = self._suspect, now
            if suspect is None or now - suspect > DEFAULT_WINDOW_S:
                return False
            return learn_input(None, since=suspect)
        return False

    def dropped(self, ticket: int) -> None:
        """The upstream refused ``ticket``'s request without counting it (a 529)."""
        self._settle(ticket, charged=False)

    def _settle(self, ticket: int, *, charged: bool) -> _Ticket | None:
        """Resolve ``ticket``'s draw once: its ticket, or ``None`` when unknown or resolved."""
        held = self._tickets.get(ticket)
        if held is None or held.resolved:
            return None
        held.resolved = True
        self._resolve(ticket, charged=charged)
        return held

    def _resolve(self, ticket: int, *, charged: bool) -> None:
        for name, w in self.windows.items():
            self.windows[name] = fold(resolve(w, ticket, charged=charged))

    def used(self, ticket: int, usage: Usage, now: float) -> None:
        """The usage the upstream reported for ``ticket``: learn the ratio of the estimate,
        the prefixes it holds and the output size, and correct a draw no header counted."""
        held = self._tickets.get(ticket)
        if held is None:
            return
        prompt = usage.prompt_tokens
        estimate = held.estimate
        if prompt is not None and estimate is not None and estimate.tokens > 0 and prompt > 0:
            seen = prompt / estimate.tokens
            low, high = _RATIO_BOUNDS
            seen = min(high, max(low, seen))
            self.ratio = seen if self.ratio is None else self.ratio + _LEARN * (seen - self.ratio)
        if estimate is not None and (
            (usage.cache_read_input_tokens or 0) > 0 or (usage.cache_creation_input_tokens or 0) > 0
        ):
            for prefix in estimate.prefixes:
                self._cached[prefix.fingerprint] = now + CACHE_TTL_S
        if usage.output_tokens is not None and usage.output_tokens >= 0:
            out = float(usage.output_tokens)
            self.output = out if self.output is None else self.output + _LEARN * (out - self.output)
        counted = usage.counted_input
        w = self.windows.get("input-tokens")
        if counted is not None and w is not None and ticket > w.heard:
            # no header counted this request: the model's draw becomes what was counted
            if any(d.ticket == ticket for d in w.draws):
                draws = tuple(
                    replace(d, amount=float(counted)) if d.ticket == ticket else d for d in w.draws
                )
                self.windows["input-tokens"] = fold(replace(w, draws=draws))
            elif ticket <= w.ticket and held.resolved and not held.corrected:
                drawn = held.charge.of("input-tokens")
                self.windows["input-tokens"] = replace(w, level=w.level - (counted - drawn))
            held.corrected = True

    def release(self, ticket: int, now: float) -> None:
        """``ticket``'s request has ended; one never answered counts as taken (it may
        have been)."""
        held = self._tickets.pop(ticket, None)
        if held is None:
            return
        if not held.resolved:
            self._resolve(ticket, charged=True)
        self._forget_old(now)

    def _forget_old(self, now: float) -> None:
        while self._taken and now - self._taken[0][0] > _HISTORY_S:
            self._taken.popleft()
        if len(self._cached) > _HISTORY:
            self._cached = {k: v for k, v in self._cached.items() if v > now}
