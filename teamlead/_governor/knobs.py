"""The governor's knobs (:class:`GovernorPolicy`), its bucket snapshot and key helper.

Re-exported by :mod:`teamlead.governor`; kept apart so the governor module holds only the
machinery that hands out slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from ..errors import UsageError

__all__ = ["BucketState", "GovernorPolicy", "bucket_key", "check_seconds"]


class GovernorPolicy(BaseModel):
    """The governor's knobs, with the defaults the experiment runner uses.

    Attributes:
        ceiling: the run's ``concurrency``: where a bucket starts, and the most it grows to
            (the default of every model without a ceiling of its own).
        model_ceilings: a static ceiling per model name (the part of the key after
            ``provider/``) or glob pattern: that bucket starts there and never grows above.
        provider_ceilings: a static ceiling per provider: the most slots of all of that
            provider's buckets together.
        floor: the least a bucket is cut to.
        decrease: factor of the multiplicative cut on a rate limit.
        successes_to_grow: consecutive successes that earn ``cap + 1``.
        idle_reset_s: idle seconds after which a bucket returns to the ceiling.
        max_total: cap on slots across all buckets; ``None`` for no global cap.
        reprobe_after_s: seconds a level that drew a rate limit is not probed again.
        pace_below: the share of each rate-limit window's limit (as the
            ``anthropic-ratelimit-*`` headers report it) a grant must leave in it: the
            margin for estimates of a request's tokens (0: draw windows to empty). A window
            without a limit pauses new grants only when empty.

    Raises:
        UsageError: a value is out of range.

    Example:
        >>> GovernorPolicy(ceiling=8, max_total=12).floor
        1
    """

    model_config = ConfigDict(frozen=True)

    ceiling: int = Field(default=8, ge=1)
    model_ceilings: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    provider_ceilings: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    floor: int = Field(default=1, ge=1)
    decrease: float = Field(default=0.75, gt=0, lt=1)
    successes_to_grow: int = Field(default=4, ge=1)
    idle_reset_s: float = Field(default=300.0, gt=0)
    max_total: int | None = Field(default=None, ge=1)
    reprobe_after_s: float = Field(default=60.0, ge=0)
    pace_below: float = Field(default=0.05, ge=0, lt=1)

    @model_validator(mode="wrap")
    @classmethod
    def _usage_error(
        cls, data: Any, handler: ModelWrapValidatorHandler[GovernorPolicy]
    ) -> GovernorPolicy:
        """A bad value is the user's to fix: one :class:`UsageError` line, naming it."""
        try:
            policy = handler(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise UsageError(f"governor {where}: {error['msg']}") from None
        if policy.floor > policy.ceiling:
            raise UsageError(
                f"governor floor ({policy.floor}) is above the ceiling ({policy.ceiling})"
            )
        if "" in policy.model_ceilings or "" in policy.provider_ceilings:
            raise UsageError("a governor ceiling needs a model or provider name")
        return policy

    def ceiling_for(self, key: str) -> int:
        """The most ``key``'s bucket may grow to: its model's ceiling (by name, else the
        lowest of the glob patterns it matches), else ``ceiling``.

        Example:
            >>> GovernorPolicy(ceiling=8, model_ceilings={"opus": 2}).ceiling_for("anthropic/opus")
            2
        """
        model = key.split("/", 1)[-1]
        if model in self.model_ceilings:
            return self.model_ceilings[model]
        matching = [v for pattern, v in self.model_ceilings.items() if fnmatchcase(model, pattern)]
        return min(matching) if matching else self.ceiling

    def provider_ceiling(self, key: str) -> int | None:
        """The ceiling over all buckets of ``key``'s provider, if one is set."""
        return self.provider_ceilings.get(key.split("/", 1)[0])


@dataclass(frozen=True)
class BucketState:
    """A snapshot of one bucket, for views and tests.

    ``cooldown_s`` is how long the current pause still lasts (0 when none); ``streaming``
    counts held slots whose upstream accepted the request (:meth:`Slot.streaming`);
    ``account_in_flight`` counts the slots of this key held anywhere on the account (every
    process sharing the governor's state; equal to ``in_flight`` for one process alone).
    """

    key: str
    cap: int
    effective: int
    in_flight: int
    waiting: int
    epoch: int
    last_good: int | None
    cooldown_s: float
    streaming: int = 0
    account_in_flight: int = 0


def bucket_key(provider: str, model: str) -> str:
    """The bucket key for a provider and model: ``"provider/model"``.

    Example:
        >>> bucket_key("anthropic", "claude-sonnet-5-5")
        'anthropic/claude-sonnet-5-5'
    """
    if not provider or not model:
        raise UsageError("a governor bucket needs both a provider and a model name")
    return f"{provider}/{model}"


def check_seconds(name: str, value: float | None) -> None:
    """Raise a UsageError unless ``value`` is ``None`` or finite seconds >= 0."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{name} must be a non-negative number of seconds, got {value}")
