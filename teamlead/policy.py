"""How long and how hard teamlead tries: pydantic objects with documented defaults.

:class:`Policy` bounds a coordinated query, with :class:`RetryPolicy` and
:class:`InboxWaitPolicy` as parts; :class:`LockPolicy` tunes the inbox lock. They are plain
configuration, so this module imports none of the code that reads them.

Example:
    >>> policy = Policy(max_resumes=2, deadline_s=600, max_cost_usd=1.50)
    >>> policy.resume_retry.delay(attempt=2)
    4.0
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The longest deadline or wait anything accepts (30 days); beyond it, clocks and timers
#: overflow, so a bigger value is a usage error, not an infinite run.
MAX_SECONDS = 30 * 24 * 3600.0
MAX_RESUMES = 1000

__all__ = [
    "TRANSIENT_STATUSES",
    "InboxWaitPolicy",
    "LimitsPolicy",
    "LockPolicy",
    "Policy",
    "RetryPolicy",
    "SpawnPolicy",
    "WRAP_UP_TURN_S",
    "is_model_alias",
]

#: API statuses worth retrying: rate limited, overloaded, and server-side failures.
TRANSIENT_STATUSES: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class RetryPolicy(BaseModel):
    """Bounded exponential backoff: ``base_s * factor**(attempt-1)``, capped at ``max_s``.

    A ``Retry-After`` from the API is honoured when it is longer than the computed delay
    (and still capped at ``max_s``).
    """

    model_config = ConfigDict(frozen=True)

    attempts: int = Field(default=3, ge=1, description="tries in all, the first included")
    base_s: float = Field(default=2.0, ge=0)
    factor: float = Field(default=2.0, ge=1)
    max_s: float = Field(default=30.0, ge=0)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before try number ``attempt + 1`` (``attempt`` is 1-based)."""
        computed = self.base_s * self.factor ** max(0, attempt - 1)
        if retry_after is not None:
            computed = max(computed, retry_after)
        return float(min(self.max_s, computed))


class InboxWaitPolicy(BaseModel):
    """How the inbox wait retries when no change event arrives.

    The inbox is read at once, then on every change event, and otherwise after delays
    growing from ``first_delay_s`` by ``backoff`` up to ``max_delay_s``. The wait gives up
    once it has read the inbox ``tries`` more times *and* ``span_s`` has passed (or at the
    caller's deadline, whichever is first). The defaults read it at 0.5, 1.5, 3.5, 7.5 and
    11.5 s: at least 5 tries over at least 10 s.

    On Linux the change events come straight from inotify. Elsewhere ``watchfiles``
    watches from a thread, and ``step_ms`` and ``debounce_ms`` tune it: a change is
    reported ``step_ms`` to ``2 * step_ms`` after it settles. ``use_events=False`` forces
    plain polling.
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


class LockPolicy(BaseModel):
    """How long and how often to try for an inbox lock.

    The defaults retry from 2 ms up to 25 ms apart for at most 2 s, and treat a lock older
    than 10 s as stale, as proper-lockfile does. Retrying faster than the writers (5 to
    100 ms) keeps the inbox drained, which keeps every holder's work, and so the lock, short.
    """

    model_config = ConfigDict(frozen=True)

    first_delay_s: float = Field(default=0.002, gt=0)
    backoff: float = Field(default=2.0, ge=1)
    max_delay_s: float = Field(default=0.025, gt=0)
    budget_s: float = Field(default=2.0, ge=0)
    stale_after_s: float = Field(default=10.0, gt=0)


class Policy(BaseModel):
    """Limits and waits for :func:`teamlead.run` and the client helper.

    Attributes:
        max_resumes: re-queries with ``resume=session_id`` at most (default 3).
        max_continuations: how often one agent that the CLI stopped at its turn limit
            (``maxTurns``) before it finished, or that was lost with its CLI process (still
            running when the process ended), is continued at most, by the lead or on
            teamlead's ask in a resume prompt (a ``SendMessage`` to its task id), default 3;
            still unfinished after that, its row is missing and the run ``partial``. The
            resumes, budgets and deadline still rule.
        deadline_s: the whole run, every round and wait included (default 1800 s). The CLI's
            background-wait ceiling (``CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS``) is set to
            this, so the CLI does not silently stop agents before our deadline.
        wait_s: how long to wait for teammates that have not reported and for the inbox
            after the stream ends (default 60 s).
        max_cost_usd: stop resuming once the runs' ``total_cost_usd`` reach this (default:
            no limit).
        inbox: retries and backoff of the inbox wait: at least 5 reads over at least 10 s,
            waking at once on a change.
        resume_retry: backoff for a resume that fails with a transient API error.
        max_result_chars: each quoted result is cut to this many characters (default
            60000: a result goes into the resume prompt whole while the prompt fits).
        max_prompt_chars: the whole resume prompt is cut to this many characters (default
            60000). A result cut to fit keeps its head and tail, and the prompt names the
            file that holds all of it; it counts as used only if the lead then reads that
            file.
        consume_inbox: remove delivered entries from the team-lead inbox once a lead turn
            used them (default True), so nothing is delivered twice.
        idle_timeout_s: for the client helper: the longest silence while tasks still run
            before the stream is considered stalled (default 600 s).
        spawn: the spawn gate's limits (:class:`SpawnPolicy`; on by default): how many
            agents run at once, in all, per message, how deep, and the wrap-up reserve
            before the deadline.
        relay: send the run's API requests through the process's request relay, which
            paces them and absorbs 429s (default True; ``TEAMLEAD_NO_RELAY=1`` also turns
            it off). See the docs' "Rate limits" (docs/rate-limits.md).
        limits: the relay's static ceilings (per model, per provider, a default and a
            global cap; unset: no limit) and where its learnt limits are shared
            (:class:`LimitsPolicy`: this machine by default).
        token_budget: input plus output tokens for the whole run, counted at the relay from
            the upstream's own usage (default: no limit). Each request is checked before it
            is forwarded, with room kept for the wrap-up's own request; once reached, no new
            agent starts and the run wraps up with what finished (``partial``,
            ``token_budget``). Needs the relay.
        request_budget: API requests for the whole run, counted the same way (one is kept
            for the wrap-up).
        overload_hold_s: the longest the relay holds one of the run's requests through an
            overload burst (529s, 503s, a dropped connection), retrying it with jittered
            backoff while the CLI waits (a streaming request is kept alive with ``ping``
            events); within the run's deadline. Past it the overload goes on to the CLI.
            0 passes overloads on at once. Default 300 s: bursts of minutes are reported.
        relay_port: the loopback port the relay listens on when this run starts it (0, the
            default: any free port). A run that joins a relay already serving its upstream
            in the process uses that relay's port. A port that cannot be bound turns the
            relay off for the run, with one warning line.
    """

    model_config = ConfigDict(frozen=True)

    max_resumes: int = Field(default=3, ge=0, le=MAX_RESUMES)
    max_continuations: int = Field(default=3, ge=0, le=MAX_RESUMES)
    deadline_s: float = Field(default=1800.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    wait_s: float = Field(default=60.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    inbox: InboxWaitPolicy = Field(default_factory=InboxWaitPolicy)
    resume_retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_result_chars: int = Field(default=60000, ge=200, le=1_000_000)
    max_prompt_chars: int = Field(default=60000, ge=1000, le=10_000_000)
    consume_inbox: bool = True
    idle_timeout_s: float = Field(default=600.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    spawn: SpawnPolicy = Field(default_factory=lambda: SpawnPolicy())
    relay: bool = True
    limits: LimitsPolicy = Field(default_factory=lambda: LimitsPolicy())
    token_budget: int | None = Field(default=None, ge=1, le=10**12)
    request_budget: int | None = Field(default=None, ge=2, le=10**9)
    relay_port: int = Field(default=0, ge=0, le=65535)
    overload_hold_s: float = Field(default=300.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)

    @model_validator(mode="after")
    def _reserve_within_deadline(self) -> Policy:
        reserve = self.spawn.wrap_up_reserve_s
        if reserve is not None and reserve >= self.deadline_s:
            raise ValueError(
                f"spawn.wrap_up_reserve_s ({reserve:g} s) is not shorter than deadline_s "
                f"({self.deadline_s:g} s), so the run would wrap up as it starts: make it "
                "shorter, or leave it None for the default (20 % of the deadline, at most 30 s)"
            )
        return self

    @property
    def bg_wait_ceiling_ms(self) -> int:
        """The value for ``CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS``."""
        return int(self.deadline_s * 1000)


#: The wrap-up reserve's floor: one turn, the CLI resuming the session and the model
#: answering with no tools (a few seconds against the API).
WRAP_UP_TURN_S = 10.0


def is_model_alias(name: str) -> bool:
    """Whether ``name`` is a bare alias that only the CLI resolves (``haiku``, ``sonnet``),
    not a model id the API takes as it is (``claude-haiku-5-5``, a provider's id).

    Example:
        >>> is_model_alias("haiku"), is_model_alias("claude-haiku-5-5")
        (True, False)
    """
    return not any(c in name for c in "-./:@")


class SpawnPolicy(BaseModel):
    """Limits of the spawn gate: how many agents run at once, in all, per message, how deep.

    Attributes:
        enabled: install the gate at all (default True).
        max_concurrent_agents: agents running at once in this run, every kind counted
            (Agent-tool, nested and workflow agents); calls over it wait in FIFO order in
            the hook, a workflow agent's first request waits at the relay. ``None``: the
            CLI's own cap (``CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS``, else 20). Never more
            than that cap, which rejects instead of queueing.
        max_agents_per_turn: Agent calls admitted from one model message (default: no limit).
        spawn_budget: agents admitted in the whole run (default: no limit).
        stagger_s: the k-th admitted spawn of a burst starts no earlier than
            ``k * stagger_s`` after the first (default 0: no stagger); a workflow agent's
            first request waits its turn in the same schedule at the relay.
        max_depth: 1 lets only the lead spawn; 2 lets its subagents spawn once more. A
            ``Workflow`` call's agents count one level deeper than its caller.
        wrap_up_reserve_s: no spawn is admitted once less than this is left before the
            deadline. ``None``: 20 % of the deadline, at least one turn's
            :data:`WRAP_UP_TURN_S` (at most half the deadline), at most 30 s. A
            :class:`Policy` refuses one that is not shorter than its ``deadline_s``.
        agent_timeout_s: an agent (Agent-tool, nested or workflow) running longer than this
            is stopped: its status is ``timeout``, the lead is told to go on, the run ends
            ``partial`` (default: no limit). Under ``query()`` the relay ends it.
        subagent_model: the model every subagent runs on, whatever the lead or a workflow
            script asked (default: theirs): every subagent gets it through the CLI's
            ``CLAUDE_CODE_SUBAGENT_MODEL``, and an alias also reaches each Agent call
            through the gate's ``updatedInput.model``. A model id (``claude-haiku-5-5``) or
            a CLI alias (``haiku``). :class:`teamlead.RunControl` can change it mid-run.

    Example:
        >>> SpawnPolicy(max_concurrent_agents=3, spawn_budget=5).reserve_for(60)
        12.0
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    max_concurrent_agents: int | None = Field(default=None, ge=1, le=1000)
    max_agents_per_turn: int | None = Field(default=None, ge=1, le=1000)
    spawn_budget: int | None = Field(default=None, ge=0, le=100_000)
    stagger_s: float = Field(default=0.0, ge=0, le=600, allow_inf_nan=False)
    max_depth: int = Field(default=1, ge=1, le=10)
    wrap_up_reserve_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    agent_timeout_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    subagent_model: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=r"^[^\s\x00-\x1f\x7f]+$"
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpawnPolicy:
        if (
            self.spawn_budget is not None
            and self.max_agents_per_turn is not None
            and self.max_agents_per_turn > max(self.spawn_budget, 1)
        ):
            raise ValueError(
                f"max_agents_per_turn ({self.max_agents_per_turn}) is larger than "
                f"spawn_budget ({self.spawn_budget}); lower it or raise the budget"
            )
        return self

    def reserve_for(self, deadline_s: float) -> float:
        """Seconds kept free for the wrap-up before a deadline ``deadline_s`` away.

        20 % of it, but room for one turn (:data:`WRAP_UP_TURN_S`, or half a shorter
        deadline), and at most 30 s: a 1.8 s deadline keeps 0.9 s, not 0.36 s, which
        the CLI needs just to resume the session.
        """
        if self.wrap_up_reserve_s is not None:
            return self.wrap_up_reserve_s
        deadline_s = max(0.0, deadline_s)
        return min(30.0, max(0.2 * deadline_s, min(WRAP_UP_TURN_S, 0.5 * deadline_s)))


#: What ``LimitsPolicy.shared`` accepts besides a ``redis://`` URL.
SHARED_LIMITS = ("process", "machine")


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a ``redis://`` URL for the shared limits (``None``: nothing).

    The database must be a number: redis-py reads any other as database 0, so a typo would
    share the limits with whatever else uses that one, and nothing would say so.

    Example:
        >>> redis_url_problem("redis://127.0.0.1:6379/abc")
        "the Redis database must be a number, as in redis://HOST:PORT/0; got 'abc'"
        >>> redis_url_problem("redis://127.0.0.1:6379/2") is None
        True
    """
    parts = urlsplit(url.strip())
    try:
        parts.port  # noqa: B018 - it raises for a port that is no number from 0 to 65535
    except ValueError:
        return "the Redis port must be a number from 1 to 65535"
    databases = [] if parts.path in ("", "/") else [parts.path[1:]]
    databases += parse_qs(parts.query).get("db", [])
    for db in databases:
        if not (db.isascii() and db.isdigit()):
            return f"the Redis database must be a number, as in redis://HOST:PORT/0; got {db!r}"
    return None


#: A model's or provider's name (not blank) and its ceiling, in requests.
_Name = Annotated[str, Field(pattern=r"\S")]
_Ceiling = Annotated[int, Field(ge=1, le=10_000)]


class LimitsPolicy(BaseModel):
    """Static ceilings on the relay's requests in flight, and who shares the learnt limits.

    Every ceiling is optional; unset means no static limit (the relay then starts each
    model at 32 requests, above what the CLI opens, and learns the real limit from the
    upstream's 429s). The learnt limit never rises above a ceiling that is set.

    Attributes:
        models: most requests in flight per model name (``claude-opus-5-5``) or glob
            pattern (``claude-haiku-*``); a model without one uses ``default``.
        providers: most requests in flight of all models of a provider together
            (``anthropic``).
        default: most requests in flight per model without a ceiling of its own.
        total: most requests in flight in all.
        shared: where the learnt limits and the in-flight counts live, so several
            processes stay under one account's limit together: ``"machine"`` (default:
            every teamlead process of the user on this machine, through a file in the
            user's cache directory), ``"process"`` (this process alone), or
            ``"redis://host:port/db"`` (every machine using that Redis).

    Example:
        >>> LimitsPolicy(models={"claude-opus-5-5": 3}, total=8).shared
        'machine'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[_Name, _Ceiling] = Field(default_factory=dict)
    providers: dict[_Name, _Ceiling] = Field(default_factory=dict)
    default: int | None = Field(default=None, ge=1, le=10_000)
    total: int | None = Field(default=None, ge=1, le=100_000)
    shared: str = "machine"

    @model_validator(mode="after")
    def _check(self) -> LimitsPolicy:
        try:
            check_shared(self.shared)
        except ValueError as exc:
            raise ValueError(f"limits: {exc}") from None
        return self


def check_shared(spec: str) -> str:
    """``spec`` stripped if it is one of :data:`SHARED_LIMITS` or a Redis URL whose port and
    database are numbers (see :func:`redis_url_problem`); else a ``ValueError`` saying what
    is accepted, without the URL (it may hold a password).

    Example:
        >>> check_shared(" machine ")
        'machine'
    """
    text = spec.strip()
    if text in SHARED_LIMITS:
        return text
    if not text.startswith(("redis://", "rediss://")):
        raise ValueError(f"must be 'machine', 'process' or redis://host:port/db, got {spec!r}")
    problem = redis_url_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


Policy.model_rebuild()
