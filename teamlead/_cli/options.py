"""The one way a ``teamlead`` command declares an option, plus the shared output switch.

:func:`option` is ``click.option`` that also reads ``TEAMLEAD_<NAME>``, the long flag
upper-cased with dashes as underscores (``--max-resumes`` reads ``TEAMLEAD_MAX_RESUMES``,
``--no-plots`` reads ``TEAMLEAD_NO_PLOTS``). Every command builds its options with it, so
no option can forget its variable; a test walks the command tree to keep it so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from ..errors import UsageError

if TYPE_CHECKING:  # the policy loads pydantic: the commands that need it import it when run
    from ..policy import LimitsPolicy

__all__ = [
    "FiniteFloatRange",
    "Output",
    "limits_from_options",
    "limits_options",
    "no_relay_option",
    "option",
    "port_option",
    "stacked",
    "session_store_option",
    "output_mode",
]

#: Where a run's progress goes: a live view, plain lines, NDJSON, or only the answer.
Output = Literal["auto", "live", "plain", "json", "quiet"]

_F = TypeVar("_F", bound=Callable[..., Any])


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``inf``, ``nan`` and values over ``limit``.

    The limit is checked here rather than as click's ``max`` so ``--help`` stays short;
    either way the value is a usage error (exit 2) at parse time.
    """

    def __init__(self, *args: Any, limit: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit = limit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        if self.limit is not None and rv > self.limit:
            self.fail(f"{value!r} is over the limit of {self.limit:g}.", param, ctx)
        return rv


def option(*param_decls: str, **attrs: Any) -> Callable[[_F], _F]:
    """``click.option`` whose value may also come from ``TEAMLEAD_<NAME>``.

    ``<NAME>`` is the first long flag in ``param_decls``; passing ``envvar`` is an error
    (a second value for it), so the naming cannot drift.
    """
    long_flags = [d for d in param_decls if d.startswith("--")]
    if not long_flags:
        raise TypeError(f"option {param_decls!r} needs a --long flag to name its variable")
    envvar = "TEAMLEAD_" + long_flags[0].lstrip("-").upper().replace("-", "_")
    return click.option(*param_decls, envvar=envvar, **attrs)


def output_mode(json_: bool, quiet: bool) -> Output:
    """The output for ``--json`` / ``--quiet`` (default: live on a terminal, else plain).

    Raises:
        UsageError: both were given.
    """
    if json_ and quiet:
        raise UsageError("--json and --quiet cannot be combined")
    return "json" if json_ else ("quiet" if quiet else "auto")


#: ``--no-relay`` (``TEAMLEAD_NO_RELAY``): send API requests direct, not through the relay.
no_relay_option = option(
    "--no-relay",
    is_flag=True,
    help="Send API requests direct instead of through the pacing request relay.",
)


def session_store_option(
    help: str = "Keep the session's transcripts (and workflow journals) in this store too, so "
    "another machine can resume it: redis://HOST:PORT/DB, rediss://… or sqlite:///PATH "
    "[default: the local files only].",
) -> Callable[[_F], _F]:
    """``--session-store`` (``TEAMLEAD_SESSION_STORE``): where the session's transcripts are
    kept off the machine (see the README's "Durable runs across machines"); ``help`` says
    what the command does with it."""
    return option("--session-store", metavar="URL", help=help)


def _named_limits(values: tuple[str, ...], flag: str) -> dict[str, int]:
    """``("claude-opus-5-5=3", ...)`` -> ``{"claude-opus-5-5": 3}``; bad entries: UsageError."""
    table: dict[str, int] = {}
    for value in values:
        for item in value.replace(",", " ").split():
            name, sep, number = item.partition("=")
            if not sep or not name.strip() or not number.strip().isdigit():
                raise UsageError(f"{flag} takes NAME=N (e.g. claude-opus-5-5=3), got {item!r}")
            count = int(number)
            if not 1 <= count <= 10_000:
                raise UsageError(f"{flag} {name}: the limit must be 1..10000, got {count}")
            table[name.strip()] = count
    return table


def limits_options(func: _F) -> _F:
    """The relay's static ceilings and where its learnt limits are shared (``--limits``),
    arriving as keyword arguments.

    Unset ceilings mean no static limit: the relay learns the account's limit by itself.
    """
    return stacked(
        option(
            "--limits",
            "limits_shared",
            default="machine",
            show_default=True,
            help="Where the relay's learnt limits and requests in flight are shared: machine "
            "(every teamlead process of yours here), process, or redis://host:port/db.",
        ),
        option(
            "--model-limit",
            multiple=True,
            metavar="MODEL=N",
            help="Most requests in flight for a model (name or glob); repeatable "
            "[default: no limit].",
        ),
        option(
            "--provider-limit",
            multiple=True,
            metavar="PROVIDER=N",
            help="Most requests in flight for all of a provider's models; repeatable "
            "[default: no limit].",
        ),
        option(
            "--default-limit",
            type=click.IntRange(1, 10_000),
            help="Most requests in flight per model without a limit of its own "
            "[default: no limit].",
        ),
        option(
            "--total-limit",
            type=click.IntRange(1, 100_000),
            help="Most requests in flight in all [default: no limit].",
        ),
    )(func)


def stacked(*decorators: Callable[[_F], _F]) -> Callable[[_F], _F]:
    """One decorator that applies ``decorators`` as if written one above the other (the
    options then list in this order)."""

    def decorate(func: _F) -> _F:
        for one in reversed(decorators):
            func = one(func)
        return func

    return decorate


def port_option(help: str) -> Callable[[_F], _F]:
    """``--port`` (``TEAMLEAD_PORT``): the loopback port to listen on, 0 for any free one."""
    return option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help=help)


def limits_from_options(
    limits_shared: str = "machine",
    model_limit: tuple[str, ...] = (),
    provider_limit: tuple[str, ...] = (),
    default_limit: int | None = None,
    total_limit: int | None = None,
) -> LimitsPolicy:
    """The :class:`~teamlead.policy.LimitsPolicy` for the parsed :func:`limits_options`.

    Raises:
        UsageError: a malformed ``NAME=N`` or an unknown ``--limits`` value.
    """
    from .._governor import check_limits_spec
    from ..policy import LimitsPolicy

    return LimitsPolicy(
        models=_named_limits(model_limit, "--model-limit"),
        providers=_named_limits(provider_limit, "--provider-limit"),
        default=default_limit,
        total=total_limit,
        shared=check_limits_spec(limits_shared),
    )
