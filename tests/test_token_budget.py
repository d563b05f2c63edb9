"""Pacing by tokens: the token budget's rules as tables, then the governor that applies them.

The rules (``teamlead._governor.token_budget``) are pure: a window's model, the time a
request of some size goes, what a header, a 429 or a ``usage`` teaches. The governor tests
run on a FakeClock: a waiter's slot at the refill rate is virtual time, never a sleep.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import replace
from datetime import datetime, timezone

import anthropic
import anyio
import pytest

from teamlead._governor import token_budget as tb
from teamlead._governor.ratelimit_headers import RateWindow
from teamlead._governor.token_estimate import (
    CHARS_PER_TOKEN,
    InputEstimate,
    estimate_input,
)
from teamlead._relay import start_relay
from teamlead.governor import Governor, GovernorPolicy, Slot
from teamlead.testing import FakeClock, Reply, ScriptedServer, TokenBucket

W = tb.Window
A = "anthropic/claude-opus-5-5"
#: the field report's bucket: 20,000 input tokens, refilled at 12,000 per second
FIELD = W("input-tokens", limit=20_000, refill=12_000, level=20_000, at=0.0)
EMPTY = replace(FIELD, level=0.0)


# -- the estimate ------------------------------------------------------------------------------


def _cli_like_body() -> dict[str, object]:
    """The shape the CLI sends: tools, system blocks and messages, cache marks on the last
    system block and the last content block."""
    mark = {"type": "ephemeral"}
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 32000,
        "tools": [
            {
                "name": f"Tool{n}",
                "description": "does a thing " * 40,
                "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
            }
            for n in range(6)
        ],
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2"},
            {"type": "text", "text": "You are Claude Code. " * 80, "cache_control": mark},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Investigate. " * 30}]},
            {"role": "assistant", "content": [{"type": "text", "text": "On it. " * 20}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Go on. " * 10, "cache_control": mark}],
            },
        ],
        "metadata": {"user_id": "{}"},
        "stream": True,
    }


def test_the_estimate_is_the_prompt_s_compact_json_over_four_with_each_cache_mark() -> None:
    body = _cli_like_body()
    prompt = {k: body[k] for k in ("tools", "system", "messages")}
    compact = len(json.dumps(prompt, separators=(",", ":")))
    estimate = estimate_input(body)
    # within a few percent of the prompt's characters / 4, the wrapper left out
    assert estimate.tokens == pytest.approx(compact / CHARS_PER_TOKEN, rel=0.03)
    # one prefix per mark: tools and system first (the API's order), then all messages
    prefix = len(json.dumps([body["tools"], body["system"]], separators=(",", ":")))
    assert [round(p.tokens / (prefix / 4), 2) for p in estimate.prefixes[:1]] == [1.0]
    assert len(estimate.prefixes) == 2
    assert estimate.prefixes[1].tokens == pytest.approx(estimate.tokens, rel=0.01)
    # the same prompt up to a mark has the same fingerprint, another prompt another one
    again = estimate_input({**body, "messages": [{"role": "user", "content": "other"}]})
    assert again.prefixes[0] == estimate.prefixes[0]
    other_system = [{"type": "text", "text": "x", "cache_control": {}}]
    changed = estimate_input({**body, "system": other_system})
    assert changed.prefixes[0].fingerprint != estimate.prefixes[0].fingerprint


@pytest.mark.parametrize(
    ("body", "size", "tokens"),
    [
        ({"messages": "not a list", "system": 5, "tools": {"a": 1}}, None, 0.0),
        ({}, None, 0.0),
        ({"messages": [{"content": "x" * 400}]}, 10**9, 10**9 / 4),  # too big to walk: size
    ],
    ids=["odd-shapes-count-nothing", "empty", "huge-body-by-its-size"],
)
def test_an_odd_body_is_estimated_without_raising(
    body: dict[str, object], size: int | None, tokens: float
) -> None:
    assert estimate_input(body, size=size).tokens == tokens


def test_a_deeply_nested_body_is_walked_within_bounds() -> None:
    deep: object = "leaf"
    for _ in range(10_000):
        deep = [deep]
    estimate = estimate_input({"messages": [{"role": "user", "content": deep}]})
    assert 0 < estimate.tokens < 10_000


# -- admission against the window --------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "amount", "headroom", "ready"),
    [
        (FIELD, 7_000, 0.0, 0.0),  # plenty: at once
        (replace(FIELD, level=1_000), 7_000, 0.0, 0.5),  # 6,000 short at 12,000/s
        (replace(FIELD, level=1_000), 7_000, 0.05, 0.5 + 1_000 / 12_000),  # and keep 5%
        (EMPTY, 20_000, 0.0, 20_000 / 12_000),  # the whole window: when full
        (EMPTY, 20_000, 0.05, 20_000 / 12_000),  # headroom never asks for more than full
        # no refill seen yet: the limit over a minute
        (W("requests", limit=50, level=0.0, at=0.0), 1, 0.0, 60 / 50),
        # in debt after an oversized request: the debt refills first
        (replace(FIELD, level=-4_000), 2_000, 0.0, 0.5),
    ],
)
def test_a_request_goes_when_the_window_covers_it(
    window: tb.Window, amount: float, headroom: float, ready: float
) -> None:
    assert tb.ready_at(window, amount, 0.0, headroom=headroom) == pytest.approx(ready)


def test_pending_draws_count_as_drawn_and_the_level_never_refills_past_the_limit() -> None:
    w = tb.draw(tb.draw(FIELD, 1, 8_000, 0.0), 2, 8_000, 0.0)
    assert tb.level_at(w, 0.0) == 4_000  # both sent, neither answered: both count
    assert tb.ready_at(w, 8_000, 0.0) == pytest.approx(4_000 / 12_000)
    assert tb.level_at(w, 100.0) == 20_000
    refused = tb.fold(tb.resolve(w, 2, charged=False))  # the second was a 429: not drawn
    assert tb.level_at(refused, 0.0) == 12_000 and refused.draws == (tb.Draw(1, 0.0, 8_000),)


@pytest.mark.parametrize(
    ("window", "amounts", "times"),
    [
        # the field report: 12 agents' 7,000-token requests into an empty window: one
        # every 7,000 / 12,000 s, not all on the same retry-after second
        (EMPTY, [7_000] * 4, [7 / 12, 14 / 12, 21 / 12, 28 / 12]),
        # a full window lets the first two through at once, then spreads the rest
        (FIELD, [8_000] * 4, [0.0, 0.0, 4_000 / 12_000, 12_000 / 12_000]),
        # mixed sizes: each waits for its own draw
        (EMPTY, [1_200, 12_000, 600], [0.1, 1.1, 1.15]),
    ],
    ids=["empty", "full-then-spread", "mixed-sizes"],
)
def test_waiters_get_successive_slots_at_the_refill_rate(
    window: tb.Window, amounts: list[float], times: list[float]
) -> None:
    # the governor's queue: each waiter sent at its time, drawn before the next one's
    now, got = 0.0, []
    for n, amount in enumerate(amounts, start=1):
        now = tb.ready_at(window, amount, now)
        got.append(now)
        window = tb.fold(tb.resolve(tb.draw(window, -n, amount, now), -n, charged=True))
    assert got == pytest.approx(times)


def test_a_request_larger_than_the_window_goes_alone_once_the_window_is_full() -> None:
    busy = tb.draw(replace(FIELD, level=10_000), 1, 5_000, 0.0)
    assert tb.ready_at(busy, 50_000, 0.0) == math.inf  # another is pending: not with it
    answered = tb.fold(tb.resolve(busy, 1, charged=True))
    assert tb.ready_at(answered, 50_000, 0.0) == pytest.approx(15_000 / 12_000)  # when full
    debt = tb.fold(tb.resolve(tb.draw(FIELD, 2, 50_000, 0.0), 2, charged=True))
    assert tb.level_at(debt, 0.0) == -30_000  # it went, and the next ones pay for it
    assert tb.ready_at(debt, 1_000, 0.0) == pytest.approx(31_000 / 12_000)


# -- what headers teach ------------------------------------------------------------------------


def _header(remaining: float, full_in: float, limit: float | None = 20_000) -> RateWindow:
    return RateWindow("input-tokens", remaining, reset_at=1_000.0 + full_in, limit=limit)


def test_a_header_is_the_upstream_s_word_for_every_draw_sent_before_its_request() -> None:
    w = FIELD
    for ticket in (1, 2, 3):
        w = tb.draw(w, ticket, 6_000, 0.0)
    header = _header(5_000, 15_000 / 12_000)
    seen = tb.anchor(w, header, ticket=2, sent_at=0.0, now=0.1, wall_now=1_000.0)
    assert seen is not None
    assert (seen.level, seen.ticket, [d.ticket for d in seen.draws]) == (5_000.0, 2, [3])
    assert seen.refill == pytest.approx(12_000 / (1 + 0.1 / 1.25), rel=0.01)
    # an answer to an earlier request, read later, says nothing newer about the level
    older = tb.anchor(seen, _header(14_000, 0.5), ticket=1, sent_at=0.0, now=0.2, wall_now=1e3)
    assert older is not None and (older.level, older.ticket) == (5_000.0, 2)


def test_an_empty_window_whose_reset_shows_a_debt_is_modelled_in_debt() -> None:
    """A request larger than the window went: the upstream says ``remaining: 0`` (it stops
    there) but full only in 26,000 / 12,000 s, so the window is 6,000 in debt, and the
    next 7,000-token request waits for the debt too (else a 429 at 7,000 / 12,000 s)."""
    header = _header(0, 26_000 / 12_000)
    seen = tb.anchor(FIELD, header, ticket=1, sent_at=0.0, now=0.0, wall_now=1_000.0)
    assert seen is not None and seen.level == pytest.approx(-6_000)
    assert tb.ready_at(seen, 7_000, 0.0) == pytest.approx(13_000 / 12_000)
    # with no refill rate known yet, the level is what the header says
    fresh = tb.anchor(None, header, ticket=1, sent_at=0.0, now=0.0, wall_now=1_000.0)
    assert fresh is not None and fresh.level == 0


@pytest.mark.parametrize(
    ("header", "known", "kept"),
    [
        (_header(0, 10**6), FIELD, FIELD),  # a reset beyond any minute: faulty, skipped
        (_header(0, 1.0, limit=None), None, None),  # no limit given, none known: not modelled
    ],
    ids=["faulty-reset", "no-limit"],
)
def test_a_header_the_budget_cannot_use_changes_nothing(
    header: RateWindow, known: tb.Window | None, kept: tb.Window | None
) -> None:
    assert tb.anchor(known, header, ticket=1, sent_at=0.0, now=0.0, wall_now=1_000.0) == kept


def test_the_refill_rate_averages_out_a_reset_rounded_to_the_second() -> None:
    w: tb.Window | None = None
    # the true rate is 12,000/s; each reset was rounded up to the next whole second
    for n, deficit in enumerate([6_000, 18_000, 9_000, 15_000]):
        true_full_in = deficit / 12_000
        header = _header(20_000 - deficit, math.ceil(true_full_in))
        w = tb.anchor(w, header, ticket=n + 1, sent_at=0.0, now=0.0, wall_now=1_000.0)
    assert w is not None and w.refill is not None
    assert 8_000 < w.refill < 12_000  # one rounded 0.5 s -> 1 s alone would say 6,000


# -- what a 429 teaches ------------------------------------------------------------------------


def _budget_with_window(level: float) -> tuple[tb.Budget, int]:
    budget = tb.Budget()
    budget.windows["input-tokens"] = replace(FIELD, level=level)
    return budget, budget.grant(tb.Charge(input_tokens=7_000), InputEstimate(7_000), 0.0)


@pytest.mark.parametrize(
    ("remaining", "explained"),
    [(3_000, True), (15_000, False)],
    ids=["window-short-of-the-charge", "window-has-room-so-a-concurrency-limit"],
)
def test_a_429_is_the_window_s_when_its_headers_show_it_short(
    remaining: float, explained: bool
) -> None:
    budget, ticket = _budget_with_window(20_000)
    budget.observe(ticket, [_header(remaining, 1.0)], now=0.0, wall_now=1_000.0)
    assert budget.refused(ticket, now=0.0, retry_after=1.0, learn_window=False) is explained


@pytest.mark.parametrize(
    ("level", "retry_after", "after", "explained"),
    [
        # the model had the window nearly drawn: the 429 is its, and the level drops so
        # the request is covered once the retry-after has passed, not before
        (8_000, 1.0, 7_000 - 12_000, True),
        (8_000, None, 0.0, True),
        # plenty left in the model: a limit of another kind (concurrency), nothing learnt
        (20_000, 1.0, 20_000, False),
    ],
)
def test_a_429_without_headers_on_a_known_window_lowers_it_to_agree(
    level: float, retry_after: float | None, after: float, explained: bool
) -> None:
    budget, ticket = _budget_with_window(level)
    assert budget.refused(ticket, now=0.0, retry_after=retry_after, learn_window=False) is explained
    assert tb.level_at(budget.windows["input-tokens"], 0.0) == pytest.approx(after)


def test_learning_a_window_without_headers_from_refusals_and_what_was_taken() -> None:
    budget = tb.Budget()

    def taken(at: float) -> None:
        ticket = budget.grant(budget.charge(InputEstimate(6_000), at), None, at)
        budget.accepted(ticket, at)

    def refused(at: float, retry_after: float = 1.0) -> bool:
        ticket = budget.grant(budget.charge(InputEstimate(6_000), at), None, at)
        return budget.refused(ticket, now=at, retry_after=retry_after, learn_window=True)

    # a burst: the upstream takes three 6,000-token requests, then refuses the fourth;
    # one refusal is no pattern (the concurrency rules have it, as any 429)
    for _ in range(3):
        taken(0.0)
    assert not refused(0.1) and budget.windows == {}
    # it takes 12,000 more in the next second and refuses again: both refusals at an
    # empty window, so what it took in between is the refill
    taken(0.5)
    taken(1.0)
    assert refused(1.1)
    w = budget.windows["input-tokens"]
    assert (w.learnt, w.limit, w.refill) == (True, 30_000, pytest.approx(12_000))
    assert tb.ready_at(w, 6_000, 1.1) == pytest.approx(2.1)  # the retry-after is honoured
    # every later refusal measures it again: 18,000 taken in 1.5 s
    for at in (2.1, 2.4, 2.6):
        taken(at)
    assert refused(2.6)
    assert budget.windows["input-tokens"].refill == pytest.approx(12_000)


@pytest.mark.parametrize(
    ("retry_after", "apart"),
    [(120.0, 1.0), (1.0, 61.0)],
    ids=["a-pause-no-minute-bucket-asks-for", "refusals-a-minute-apart"],
)
def test_no_window_is_learnt_from_a_429_unlike_a_per_minute_bucket_s(
    retry_after: float, apart: float
) -> None:
    budget = tb.Budget()
    for at in (0.0, apart):
        ticket = budget.grant(budget.charge(InputEstimate(6_000), at), None, at)
        assert not budget.refused(ticket, now=at, retry_after=retry_after, learn_window=True)
    assert budget.windows == {}


def test_a_learnt_window_grows_for_every_limit_s_worth_taken_unrefused() -> None:
    w = W("input-tokens", limit=10_000, refill=5_000, level=0.0, at=0.0, learnt=True)
    budget = tb.Budget(windows={"input-tokens": w})
    for n in range(5):
        ticket = budget.grant(tb.Charge(input_tokens=4_000), None, float(n))
        budget.accepted(ticket, float(n))
    # 20,000 taken unrefused: two limits' worth, two steps of GROWTH
    assert budget.windows["input-tokens"].refill == pytest.approx(5_000 * tb.GROWTH**2)


def test_a_learnt_window_grows_no_faster_than_refilling_its_whole_limit_a_second() -> None:
    """An hour of light load takes a limit's worth unrefused again and again, with the
    window never short: the refill stops growing at a limit's worth a second, so a burst
    after it is still paced."""
    w = W("input-tokens", limit=10_000, refill=5_000, level=10_000, at=0.0, learnt=True)
    budget = tb.Budget(windows={"input-tokens": w})
    for n in range(360):  # one small request each 10 s
        ticket = budget.grant(tb.Charge(input_tokens=1_000), None, 10.0 * n)
        budget.accepted(ticket, 10.0 * n)
    assert budget.windows["input-tokens"].refill == pytest.approx(10_000)
    for _ in range(3):  # the burst: three limits' worth at once
        budget.grant(tb.Charge(input_tokens=10_000), None, 3600.0)
    assert budget.ready_at(tb.Charge(input_tokens=10_000), 3600.0) == pytest.approx(3603.0)


def test_a_window_is_never_learnt_while_a_concurrency_limit_can_explain_the_429() -> None:
    budget = tb.Budget()
    ticket = budget.grant(budget.charge(InputEstimate(6_000), 0.0), None, 0.0)
    assert not budget.refused(ticket, now=0.1, retry_after=1.0, learn_window=False)
    assert budget.windows == {}


# -- what usage teaches ------------------------------------------------------------------------


def test_usage_teaches_the_ratio_the_output_and_which_prefixes_are_cached() -> None:
    estimate = estimate_input(_cli_like_body())
    budget = tb.Budget()
    ticket = budget.grant(budget.charge(estimate, 0.0), estimate, 0.0)
    prompt = estimate.tokens * 1.2  # the upstream's tokenizer counts 20% more
    budget.used(ticket, tb.Usage(input_tokens=round(prompt)), 0.0)
    assert budget.ratio == pytest.approx(1.2, rel=0.01)
    assert budget.charge(estimate, 1.0).input_tokens == pytest.approx(prompt, rel=0.01)
    # an upstream that reports cache reads holds the marked prefixes: a read is not counted
    cached = round(estimate.prefixes[0].tokens * 1.2)
    budget.used(
        ticket,
        tb.Usage(input_tokens=round(prompt) - cached, cache_read_input_tokens=cached),
        1.0,
    )
    budget.used(ticket, tb.Usage(output_tokens=300), 1.0)
    charge = budget.charge(estimate, 2.0)
    longest = estimate.prefixes[-1].tokens  # the whole prompt up to its last mark
    assert budget.ratio is not None
    assert charge.input_tokens == pytest.approx(budget.ratio * (estimate.tokens - longest))
    assert (charge.output_tokens, charge.of("tokens")) == (300.0, charge.input_tokens + 300.0)
    # ... for the cache's lifetime only
    assert budget.charge(estimate, 2.0 + tb.CACHE_TTL_S).input_tokens == pytest.approx(
        1.2 * estimate.tokens, rel=0.01
    )


def test_usage_corrects_a_draw_no_header_counted() -> None:
    budget, ticket = _budget_with_window(20_000)
    budget.accepted(ticket, 0.0)  # no headers: the estimate (7,000) counts
    assert tb.level_at(budget.windows["input-tokens"], 0.0) == 13_000
    budget.used(ticket, tb.Usage(input_tokens=9_000), 0.0)
    assert tb.level_at(budget.windows["input-tokens"], 0.0) == 11_000


# -- the governor ------------------------------------------------------------------------------


def _wall(clock: FakeClock, seconds: float) -> str:
    return datetime.fromtimestamp(clock.time() + seconds, tz=timezone.utc).isoformat()


def _window_headers(clock: FakeClock, remaining: float, full_in: float) -> dict[str, str]:
    return {
        "anthropic-ratelimit-input-tokens-limit": "20000",
        "anthropic-ratelimit-input-tokens-remaining": f"{remaining:g}",
        "anthropic-ratelimit-input-tokens-reset": _wall(clock, full_in),
    }


async def _emptied(gov: Governor, clock: FakeClock) -> None:
    """One request whose answer says the window is empty (full again in 20,000 / 12,000 s)."""
    async with gov.slot(A, estimate=InputEstimate(20_000)) as slot:
        slot.streaming()
        gov.pace(A, _window_headers(clock, 0, 20_000 / 12_000), slot)


NO_HEADROOM = GovernorPolicy(ceiling=8, pace_below=0.0)


@pytest.mark.anyio
async def test_queued_requests_go_one_by_one_at_the_refill_rate() -> None:
    clock = FakeClock()
    gov = Governor(NO_HEADROOM, clock=clock)
    await _emptied(gov, clock)
    granted: list[float] = []
    held: list[Slot] = []

    async def request() -> None:  # no timeout: a FakeClock would sleep it out at once
        slot = await gov.acquire(A, estimate=InputEstimate(6_000))
        granted.append(clock.monotonic())
        held.append(slot)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(request)
    assert granted == pytest.approx([0.5, 1.0, 1.5, 2.0])  # each its own slot
    assert gov.state(A).cap == 8 and not gov.journal  # no concurrency cut, no pause
    for slot in held:
        slot.release()


@pytest.mark.anyio
async def test_a_429_a_window_explains_is_paced_by_the_budget_not_by_a_cut() -> None:
    clock = FakeClock()
    gov = Governor(NO_HEADROOM, clock=clock)
    slot = await gov.acquire(A, estimate=InputEstimate(9_000))
    gov.pace(A, _window_headers(clock, 3_000, 17_000 / 12_000), slot)
    slot.rate_limited(1.0, measured=True)  # the upstream rounded 0.5 s up
    slot.release()
    state = gov.state(A)
    assert (state.cap, state.cooldown_s, list(gov.journal)) == (8, 0.0, [])
    async with gov.slot(A, timeout=5, estimate=InputEstimate(9_000)):
        # its own slot: when the window covers it, before the retry-after second is over
        assert clock.monotonic() == pytest.approx(0.5)


@pytest.mark.anyio
async def test_a_governor_that_never_sees_a_window_keeps_nothing_per_request() -> None:
    gov = Governor(GovernorPolicy(ceiling=4), clock=FakeClock())
    for _ in range(50):
        async with gov.slot(A, estimate=InputEstimate(1_000)) as slot:
            slot.streaming()
            slot.success()
    budget = gov.token_budget(A)
    assert (budget.windows, budget._tickets) == ({}, {})


@pytest.mark.anyio
async def test_a_wait_for_the_window_is_bounded_by_the_slot_timeout() -> None:
    clock = FakeClock()
    gov = Governor(NO_HEADROOM, clock=clock)
    await _emptied(gov, clock)
    with pytest.raises(TimeoutError):
        await gov.acquire(A, timeout=0.25, estimate=InputEstimate(12_000))  # needs 1 s
    assert clock.monotonic() == pytest.approx(0.25)
    assert gov.state(A).waiting == 0


@pytest.mark.anyio
async def test_an_oversized_request_goes_alone_once_the_window_is_full() -> None:
    clock = FakeClock()
    gov = Governor(NO_HEADROOM, clock=clock)
    await _emptied(gov, clock)
    small = await gov.acquire(A, estimate=InputEstimate(100))
    order: list[tuple[str, float]] = []

    async def big() -> None:
        async with gov.slot(A, estimate=InputEstimate(50_000)):
            order.append(("big", clock.monotonic()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(big)
        await anyio.wait_all_tasks_blocked()
        assert order == []  # the small one is still pending: the big one waits for it
        small.release()
    # then it waits for the window to be full again, and goes (never forever)
    assert order == [("big", pytest.approx(20_000 / 12_000 + 100 / 12_000))]


@pytest.mark.anyio
async def test_the_lead_s_request_is_served_first_in_the_window_s_queue() -> None:
    clock = FakeClock()
    gov = Governor(GovernorPolicy(ceiling=1, pace_below=0.0), clock=clock)
    await _emptied(gov, clock)
    running = await gov.acquire(A, estimate=InputEstimate(100))  # all queue behind it
    order: list[tuple[str, float]] = []

    async def request(name: str, priority: int) -> None:
        async with gov.slot(A, priority=priority, estimate=InputEstimate(6_000)):
            order.append((name, clock.monotonic()))

    async with anyio.create_task_group() as tg:
        for name, priority in [("sub-1", 0), ("sub-2", 0), ("lead", 2)]:
            tg.start_soon(request, name, priority)
            await anyio.wait_all_tasks_blocked()
        running.release()
    assert [name for name, _ in order] == ["lead", "sub-1", "sub-2"]
    # and each at its own time: 6,000 tokens a half second apart (after the 100 drawn)
    times = [at for _, at in order]
    assert [times[1] - times[0], times[2] - times[1]] == pytest.approx([0.5, 0.5])


@pytest.mark.anyio
async def test_headerless_429s_at_the_concurrency_limit_learn_no_window() -> None:
    gov = Governor(GovernorPolicy(ceiling=8), clock=FakeClock())
    slots = [await gov.acquire(A, estimate=InputEstimate(1_000)) for _ in range(4)]
    for slot in slots[:3]:
        slot.streaming()
    slots[3].rate_limited(1.0, measured=True)  # three ran, the fourth was refused
    assert gov.state(A).cap == 3 and gov.token_budget(A).windows == {}
    for slot in slots:
        slot.release()


@pytest.mark.anyio
async def test_headerless_429s_below_the_concurrency_seen_learn_a_token_window() -> None:
    clock = FakeClock()
    gov = Governor(GovernorPolicy(ceiling=8), clock=clock)
    burst = [await gov.acquire(A, estimate=InputEstimate(6_000)) for _ in range(3)]
    for slot in burst:
        slot.streaming()  # the upstream ran three at once
    for slot in burst:
        slot.release()
    for _ in range(2):  # refused twice while running nothing else
        clock.advance(0.6)
        alone = await gov.acquire(A, estimate=InputEstimate(6_000))
        alone.rate_limited(1.0, measured=True)
        alone.release()
    window = gov.token_budget(A).windows["input-tokens"]
    assert window.learnt and window.limit == pytest.approx(18_000)
    # the first was the concurrency rules' (one cut, as for any 429); the second, the
    # window's: no further cut
    assert [e.reason for e in gov.journal if e.reason == "rate_limited"] == ["rate_limited"]
    assert [e.reason for e in gov.journal].count("settled") == 0


@pytest.mark.anyio
@pytest.mark.parametrize(("learnt", "held"), [(True, 0.0), (False, 0.5)])
async def test_the_lead_s_lane_goes_through_a_learnt_window_but_not_a_described_one(
    learnt: bool, held: float
) -> None:
    clock = FakeClock()
    gov = Governor(NO_HEADROOM, clock=clock)
    gov.token_budget(A).windows["input-tokens"] = replace(EMPTY, learnt=learnt)
    async with gov.slot(A, estimate=InputEstimate(6_000)):  # a subagent's: held either way
        assert clock.monotonic() == pytest.approx(0.5)
    start = clock.monotonic()
    gov.token_budget(A).windows["input-tokens"] = replace(EMPTY, learnt=learnt, at=start)
    slot = await gov.acquire(A, through_pause=True, estimate=InputEstimate(6_000))
    assert clock.monotonic() - start == pytest.approx(held)
    slot.release()


# -- through the relay -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_relay_spreads_requests_over_the_window_and_learns_from_their_usage() -> None:
    # 600-token requests into a 1,000-token bucket refilled at 2,000 per second; the
    # server counts the whole body, the estimate only the prompt: the ratio corrects it
    bucket = TokenBucket(capacity=1_000, refill_per_s=2_000)
    text = "x" * 2_300
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=bucket) as server:
        governor = Governor(GovernorPolicy(ceiling=8))
        async with (
            start_relay(server.base_url, governor) as relay,
            anthropic.AsyncAnthropic(base_url=relay.base_url, api_key="k", max_retries=0) as c,
        ):

            async def ask() -> None:  # streamed, as the CLI asks: usage in message_start
                async with c.messages.stream(
                    model="claude-opus-5-5",
                    max_tokens=5,
                    messages=[{"role": "user", "content": text}],
                ) as stream:
                    await stream.get_final_message()

            await ask()  # its answer describes the window
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(ask)
        statuses = [r.status for r in server.recorded()]
        drawn = [r.drawn["input-tokens"] for r in server.recorded() if r.drawn]
    budget = governor.token_budget("anthropic/claude-opus-5-5")
    window = budget.windows["input-tokens"]
    assert (window.limit, window.refill) == (1_000, pytest.approx(2_000, rel=0.1))
    estimate = estimate_input({"messages": [{"role": "user", "content": text}]})
    assert budget.ratio == pytest.approx(drawn[0] / estimate.tokens, rel=0.02)
    assert statuses == [200] * 7  # six at once, spread: not one 429


@pytest.mark.anyio
async def test_the_relay_learns_the_output_of_each_reply_from_its_final_count() -> None:
    # message_start carries "output_tokens": 1 before any is written (as the API's does);
    # the mean output the budget charges is the replies' own, not pulled towards 1
    reply = dataclasses.replace(Reply.text("ok"), output_tokens=500)
    with ScriptedServer(lambda req: reply) as server:
        governor = Governor(GovernorPolicy(ceiling=8))
        async with (
            start_relay(server.base_url, governor) as relay,
            anthropic.AsyncAnthropic(base_url=relay.base_url, api_key="k", max_retries=0) as c,
        ):
            for _ in range(4):
                async with c.messages.stream(
                    model="claude-opus-5-5",
                    max_tokens=600,
                    messages=[{"role": "user", "content": "hi"}],
                ) as stream:
                    answer = await stream.get_final_message()
                assert answer.usage.output_tokens == 500
    assert governor.token_budget("anthropic/claude-opus-5-5").output == 500
