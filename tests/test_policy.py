"""Policy and RetryPolicy: the numbers the coordinator's limits and backoff come from."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from teamlead.policy import TRANSIENT_STATUSES, Policy, RetryPolicy, SpawnPolicy


def test_backoff_grows_by_factor_and_is_capped() -> None:
    retry = RetryPolicy(base_s=1.5, factor=3.0, max_s=10.0)
    assert [retry.delay(n) for n in (1, 2, 3, 4)] == [1.5, 4.5, 10.0, 10.0]


def test_a_longer_retry_after_wins_but_stays_under_the_cap() -> None:
    retry = RetryPolicy(base_s=2.0, factor=2.0, max_s=30.0)
    assert retry.delay(1, retry_after=7.0) == 7.0
    assert retry.delay(3, retry_after=1.0) == 8.0  # shorter than the computed delay: ignored
    assert retry.delay(1, retry_after=120.0) == 30.0


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"base_s": -1}, {"factor": 0.5}],
    ids=["no-attempts", "negative-base", "shrinking"],
)
def test_nonsense_retry_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_resumes": -1}, {"deadline_s": 0}, {"max_cost_usd": 0}, {"max_prompt_chars": 999}],
    ids=["negative-resumes", "no-deadline", "zero-budget", "tiny-prompt"],
)
def test_nonsense_limits_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Policy(**kwargs)


@pytest.mark.parametrize("reserve", [60.0, 99999.0], ids=["equal", "longer"])
def test_a_wrap_up_reserve_not_shorter_than_the_deadline_is_refused(reserve: float) -> None:
    # the run would wrap up as it starts and fail at once, "deadline reached"
    with pytest.raises(ValidationError, match="wrap_up_reserve_s .* deadline_s"):
        Policy(deadline_s=60, spawn=SpawnPolicy(wrap_up_reserve_s=reserve))
    assert Policy(deadline_s=60, spawn=SpawnPolicy(wrap_up_reserve_s=59)).deadline_s == 60


def test_the_cli_ceiling_follows_the_deadline() -> None:
    assert Policy(deadline_s=90.5).bg_wait_ceiling_ms == 90500
    assert Policy().bg_wait_ceiling_ms == 1_800_000


def test_policies_are_frozen() -> None:
    policy = Policy()
    with pytest.raises(ValidationError):
        policy.max_resumes = 10


def test_only_rate_limits_overload_and_server_errors_are_transient() -> None:
    assert {429, 529, 503} <= TRANSIENT_STATUSES
    assert not {400, 401, 403, 404, 413} & TRANSIENT_STATUSES
