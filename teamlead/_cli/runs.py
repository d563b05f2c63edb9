"""``teamlead ps``, ``stop``, ``pause``, ``unpause``, ``amend`` and ``watch``: the verbs on
the user's running runs, docker-style.

RUN names one run: its run id, its session id, or a unique prefix of either. Each verb
finds the run in the registry (:mod:`teamlead._control`), asks its control endpoint and
says in one line what it did or why not, with the exit codes 0 done, 1 refused or no
answer, 2 a usage error, 4 no such run of yours. What a run says is printed escaped.
Nothing here loads the SDK (a test keeps it so).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from .._control import Registry, RunEntry, call, follow, liveness
from .._private import json_object
from .._redact import terminal_safe
from ..clock import SYSTEM_CLOCK
from ..errors import ControlError, NoSuchRun, UsageError
from .exitcodes import EXIT_CODES, EXIT_FAILED, handle_errors, tell
from .history import ago, json_text, past_rows, ps_row, run_filter
from .options import option, output_mode
from .output import stdout_lost

if TYPE_CHECKING:  # loads the SDK's types: only `watch` in text, once its feed is open
    from .records import RecordLines

__all__ = ["act", "amend", "pause", "ps", "ps_rows", "run_detail", "stop", "unpause", "watch"]

#: A run's status answer may take this long (it answers from its own event loop); the runs
#: are asked at once, so ``ps`` waits this long at most for all of them.
_STATUS_TIMEOUT_S = 1.5
_ASKED_AT_ONCE = 32
_ACT_TIMEOUT_S = 5.0
_COLUMNS = ("RUN", "SESSION", "PID", "STATUS", "AGENTS", "TOKENS", "REQS", "CAP", "HELD")
_TAIL = ("STARTED", "COMMAND")
#: The most characters a ``--cap`` value may have.
_CAP_DIGITS = 12


# -- ps ------------------------------------------------------------------------------------
@click.command()
@option(
    "--json",
    "json_",
    is_flag=True,
    help="One JSON array of objects (run, session_id, pid, status, agents, tokens, ...; a "
    "finished run's answer too).",
)
@option(
    "--all",
    "-a",
    "all_",
    is_flag=True,
    help="Also list the finished runs the run history keeps, and the runs whose process died "
    "(shown once as `dead`, then pruned); newest first.",
)
@option("--quiet", "-q", is_flag=True, help="Only the run ids, one a line.")
@option(
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only the runs with this status (status=completed) or started since (since=2h, "
    "since=2026-12-01); repeat to narrow.",
)
@handle_errors
def ps(json_: bool, all_: bool, quiet: bool, filters: tuple[str, ...]) -> None:
    """List your runs (with --all, the finished ones too).

    AGENTS is running/queued/done/failed; HELD the requests a paused run holds.
    """
    output_mode(json_, quiet)  # both: one line, exit 2
    keep = run_filter(filters)
    registry = Registry()
    registry.check()  # a directory no run can register in is said, not listed as empty
    rows = ps_rows(registry, dead=all_)
    if all_:
        from .._history import History  # its records' models load pydantic: only here

        rows += past_rows(History(), skip=[row["run"] for row in rows])
        rows.sort(key=lambda row: row["started"], reverse=True)
    rows = [row for row in rows if keep(row)]
    if json_:
        click.echo(json_text(rows))
    elif quiet:
        for row in rows:
            click.echo(row["run"])
    else:
        click.echo(_table(rows, SYSTEM_CLOCK.time()))


def ps_rows(registry: Registry, *, dead: bool = False) -> list[dict[str, Any]]:
    """Every live run's ``ps --json`` object, oldest first, each asked for its status
    (all at once, each answer bounded); with ``dead``, the entries of dead runs too (pruned
    as they are listed)."""
    listing = registry.listing()
    with ThreadPoolExecutor(max_workers=min(_ASKED_AT_ONCE, len(listing.live) or 1)) as pool:
        rows = list(pool.map(_live_row, listing.live))
    if dead:
        rows += [_row(entry, {"status": "dead"}) for entry in listing.dead]
    return rows


def _live_row(entry: RunEntry) -> dict[str, Any]:
    try:
        answer = call(entry.socket, {"op": "status"}, ref=entry.run, timeout=_STATUS_TIMEOUT_S)
    except NoSuchRun:
        return _row(entry, {"status": "finished"})
    except ControlError:
        return _row(entry, {"status": "unreachable"})
    return _row(entry, answer)


def _row(entry: RunEntry, answer: Mapping[str, Any]) -> dict[str, Any]:
    """One run's ``ps`` object: the entry's facts, the run's own answer (type-checked)."""
    said = answer.get("agents")
    agents: Mapping[str, Any] = said if isinstance(said, Mapping) else {}
    return ps_row(
        run=entry.run,
        session_id=_text(answer.get("session_id")) or entry.session_id,
        pid=entry.pid,
        status=_text(answer.get("status")) or "unknown",
        mode=entry.mode,
        command=entry.command,
        label=entry.label,
        started=entry.started,
        agents={key: _count(agents.get(key)) for key in ("running", "queued", "done", "failed")},
        tokens=_count(answer.get("tokens")),
        requests=_count(answer.get("requests")),
        cap=_count(answer.get("cap")),
        held=_count(answer.get("held")),
        subagent_model=_text(answer.get("subagent_model")),
        deadline_in_s=_number(answer.get("deadline_in_s")),
        socket=entry.socket,
    )


def _text(value: object) -> str | None:
    return value[:300] if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None  # type: ignore[arg-type]


def _table(rows: list[dict[str, Any]], now: float) -> str:
    """The rows as aligned text, every cell escaped (a command can hold anything typed)."""
    lines = [[*_COLUMNS, *_TAIL]]
    for row in rows:
        agents = row["agents"]
        counts = "/".join(_cell(agents[k]) for k in ("running", "queued", "done", "failed"))
        lines.append(
            [
                row["run"],
                (row["session_id"] or "-")[:8],
                str(row["pid"] or "-"),
                row["status"],
                counts,
                _tokens(row["tokens"]),
                _cell(row["requests"]),
                _cell(row["cap"]),
                _cell(row["held"]),
                ago(now - row["started"]),
                row["label"] or row["command"],
            ]
        )
    cells = [[terminal_safe(str(c)) for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS) + 1)]
    out = []
    for line in cells:
        head = "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False))
        out.append(f"{head}  {line[-1]}".rstrip())
    return "\n".join(out)


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def _tokens(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}k" if value >= 10_000 else str(value)


def _live(registry: Registry, ref: str) -> RunEntry:
    """The live run ``ref`` names (see :meth:`Registry.find`); one that has finished and
    left the registry is said so, with how to see it, when the run history keeps it.

    Raises:
        NoSuchRun: no live run of yours is named so.
        AmbiguousRun: ``ref`` names several.
    """
    try:
        return registry.find(ref)
    except NoSuchRun as exc:
        if exc.why != "none":
            raise
        from .._history import History  # its records' models load pydantic: only here

        try:
            record = History().find(ref)
        except (NoSuchRun, UsageError):
            raise exc from None
        raise NoSuchRun(
            f"run {record.run} has already finished: `teamlead show {record.run}` prints it",
            ref=ref,
            why="finished",
        ) from None


def _finished(entry: RunEntry, ref: str) -> NoSuchRun | None:
    """The error of a run that no longer answers because it ended (its process is gone,
    or it removed its entry: a library's process goes on after its runs), else ``None``."""
    if entry.path.exists() and liveness(entry) != "dead":
        return None
    return NoSuchRun(f"run {entry.run} has already finished", ref=ref, why="finished")


# -- the verbs that act ----------------------------------------------------------------------
def act(ref: str, request: Mapping[str, Any], *, registry: Registry | None = None) -> str:
    """Find the run ``ref`` names, send it ``request``; what it says it did (escaped).

    Raises:
        NoSuchRun: no live run of yours is named so, or it finished meanwhile.
        UsageError: the run refused a value (an amend out of range or changing nothing), or
            the request is not one a run takes (a value too long to send).
        ControlError: the run refused for its state, or does not answer.
    """
    message = _ask(ref, request, registry).get("message")
    return terminal_safe(message if isinstance(message, str) else "done")


def run_detail(ref: str, *, registry: Registry | None = None) -> dict[str, Any]:
    """The detail of the run ``ref`` names (its endpoint's ``detail`` answer): its agent
    tree, queue, waiting approvals and limits over time.

    Raises:
        NoSuchRun: no live run of yours is named so, or it finished meanwhile.
        ControlError: the run does not answer, or answered no detail.
    """
    detail = _ask(ref, {"op": "detail"}, registry).get("detail")
    if not isinstance(detail, dict):
        raise ControlError(f"run {ref} answered no detail", code="bad_request")
    return detail


def _ask(ref: str, request: Mapping[str, Any], registry: Registry | None) -> dict[str, Any]:
    """The answer of the live run ``ref`` names to ``request`` (errors as :func:`act`'s)."""
    entry = _live(registry or Registry(), ref)
    try:
        return call(entry.socket, request, ref=entry.run, timeout=_ACT_TIMEOUT_S)
    except ControlError as exc:
        if exc.code in ("refused", "bad_request"):  # the values asked for, not the run
            raise UsageError(str(exc)) from None
        if exc.code == "unreachable" and (ended := _finished(entry, ref)):
            raise ended from None
        raise ControlError(f"run {entry.run}: {exc}", code=exc.code) from None


@click.command()
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@option(
    "--now",
    is_flag=True,
    help="Skip the wrap-up: stop its agents and end at once (reason interrupted, the "
    "lead writes no last answer).",
)
@option("--all", "-a", "all_", is_flag=True, help="Stop every run of yours that is running.")
@handle_errors
def stop(runs: tuple[str, ...], now: bool, all_: bool) -> None:
    """Stop runs: each wraps up from the work finished so far.

    Its agents are stopped, the lead answers once more without tools from what finished,
    and the run ends with its `finished` line (status partial, reason interrupted). A run
    without the spawn gate has no wrap-up and stops at once. Returns once each run took
    the request; `teamlead watch RUN` follows one to its end. With several runs, one line
    each; the exit code is the first refusal's (0 when every run took it).
    """
    if all_ == bool(runs):
        raise UsageError("name the runs to stop, or give --all (not both)")
    registry = Registry()
    refs = [entry.run for entry in registry.listing().live] if all_ else list(runs)
    if all_ and not refs:
        click.echo("no run is running")
        return
    code = 0
    for ref in refs:
        try:
            said = act(ref, {"op": "stop", "now": now}, registry=registry)
        except NoSuchRun as exc:
            if not all_:  # a run named that is gone; with --all, one that ended is stopped
                code = code or tell(exc)
                continue
            said = f"run {ref} has already finished"
        except (UsageError, ControlError) as exc:
            told = tell(exc)  # one line; the next run is still stopped
            code = code or told
            continue
        click.echo(f"{terminal_safe(ref)}: {said}" if len(refs) > 1 else said)
    sys.exit(code)


@click.command()
@click.argument("run")
@handle_errors
def pause(run: str) -> None:
    """Pause a run: no new agent starts, no new request goes out.

    The spawn gate admits no new agent and the relay holds every new request of the run,
    its lead's included; requests already streaming finish, and nothing is lost. The
    run's deadline keeps running while it is paused.
    """
    click.echo(act(run, {"op": "pause"}))


@click.command()
@click.argument("run")
@handle_errors
def unpause(run: str) -> None:
    """Let a paused run go on.

    What the pause held goes on in the order it came.
    """
    click.echo(act(run, {"op": "unpause"}))


@click.command()
@click.argument("run")
@option(
    "--cap",
    metavar="N|default",
    help="Agents running at once, from 1 up to the CLI's own cap; `default`: the cap the "
    "run started with.",
)
@option(
    "--subagent-model",
    metavar="MODEL|default",
    help="The model of the agents that start from now on (a model id or a CLI alias); "
    "`default`: the run's starting model.",
)
@click.pass_context
@handle_errors
def amend(ctx: click.Context, run: str, cap: str | None, subagent_model: str | None) -> None:
    """Change a running run's agent cap or subagent model.

    What `RunControl.amend` does from code: a field left out changes nothing, `default`
    restores the run's starting value, an amend that changes nothing is refused. Values
    given on the command line win: with any of them, the TEAMLEAD_CAP and
    TEAMLEAD_SUBAGENT_MODEL variables are not read.
    """
    given = {"cap": cap, "subagent_model": subagent_model}
    typed = {
        name: value
        for name, value in given.items()
        if value is not None and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }
    if not typed:  # nothing typed: the environment's values are the amend
        typed = {name: value for name, value in given.items() if value is not None}
    if not typed:
        raise UsageError("give --cap or --subagent-model (or both)")
    request: dict[str, Any] = {"op": "amend"}
    if "cap" in typed:
        request["cap"] = _cap(typed["cap"])
    if "subagent_model" in typed:
        model = typed["subagent_model"].strip()
        request["subagent_model"] = None if model == "default" else model
    click.echo(act(run, request))


def _cap(text: str) -> int | None:
    value = text.strip()
    if value == "default":
        return None
    try:
        if len(value) > _CAP_DIGITS:  # no run's cap is that large (and int() would be slow)
            raise ValueError
        return int(value)
    except ValueError:
        shown = value if len(value) <= 40 else f"{value[:20]}... ({len(value)} characters)"
        raise UsageError(f"--cap must be a whole number or `default`, not {shown!r}") from None


# -- watch -----------------------------------------------------------------------------------
@click.command()
@click.argument("run")
@option(
    "--json",
    "json_",
    is_flag=True,
    help="Write the NDJSON lines as they come (the schema of `ask --json`).",
)
@handle_errors
def watch(run: str, json_: bool) -> None:
    """Follow a run's events live, one line each (or --json).

    The recent events come first, then each as it happens, until the run ends with its
    `finished` line. Exits with the run's own exit code (0 completed, 1 failed, 3
    partial), 1 with one line if the watch ended without a finished line.
    """
    entry = _live(Registry(), run)
    code: int | None = None
    said: RecordLines | None = None
    try:
        for line in follow(entry.socket, ref=entry.run, timeout=_ACT_TIMEOUT_S):
            record = json_object(line) or {}
            if json_:
                click.echo(line)
            else:
                if said is None:  # it loads the SDK's types (seconds): once the feed is open
                    from .records import RecordLines

                    said = RecordLines()
                if (text := said.line(record)) is not None:
                    click.echo(terminal_safe(text))
            if record.get("type") == "finished":
                code = EXIT_CODES.get(str(record.get("status")), EXIT_FAILED)
            if stdout_lost():
                return  # nothing more can be shown: the entry point says so (exit 74)
    except ControlError as exc:
        if exc.code == "unreachable" and (ended := _finished(entry, run)):
            raise ended from None
        raise
    if code is None:
        raise ControlError(
            f"run {entry.run} ended this watch without its finished line: its process was "
            "killed, or this watch fell too far behind",
            code="unreachable",
        )
    sys.exit(code)
