"""``teamlead show`` and the finished runs of ``teamlead ps --all``: the run history
(:mod:`teamlead._history`) read back, for ``ps``, ``show`` and ``teamlead view``.

Every text in a record is the user's or the agents' words: printed with its control
characters escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, get_args

import click

from .._redact import json_line_safe, terminal_safe
from ..clock import SYSTEM_CLOCK
from ..errors import NoSuchRun, UsageError
from ..events import CUT_ENDS, Status
from .exitcodes import handle_errors
from .options import option
from .output import moment

if TYPE_CHECKING:  # pydantic's models: `teamlead ps` without --all starts without them
    from .._history import History, RunRecord

__all__ = [
    "PS_VERSION",
    "ago",
    "json_text",
    "past_detail",
    "past_rows",
    "ps_row",
    "run_filter",
    "show",
    "shown",
]

#: ``teamlead ps --json``'s objects carry this version.
PS_VERSION = 1
#: A ``teamlead ps --json`` object with every key and nothing known (a live run that has
#: not finished).
_BLANK_ROW: dict[str, Any] = {
    "version": PS_VERSION,
    **dict.fromkeys(("run", "session_id", "pid", "status", "mode", "command", "label")),
    **dict.fromkeys(("started", "agents", "tokens", "requests", "cap", "held")),
    **dict.fromkeys(("subagent_model", "deadline_in_s", "socket")),
    "finished": False,
    **dict.fromkeys(("ended", "reason", "cost_usd", "answer")),
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
#: What stands for a run's prompt when its record has none, by the run's mode.
_NO_PROMPT = {
    "resume": "(none: a resume of its session, with what its agents had left)",
    "client": "(not known: the client sent it)",
}
#: The longest ago :func:`ago` says (a year): no run or limit of this machine is older.
_LONGEST_AGO_S = 365 * 86400.0
_FILTER_HELP = "give status=STATUS or since=AGE|DATE (e.g. status=completed, since=2h)"
#: What ``ps`` says of a run: a finished run's status, a live run's, or ``dead``.
_STATUSES = (*get_args(Status), "running", "paused", "wrapping_up", "stopping", "dead")


def json_text(value: Any) -> str:
    """``value`` as the one line of JSON ``ps --json`` and ``show --json`` print: a lone
    surrogate (half a pair, as a cut made in JavaScript leaves it; JSON writes it as an
    escape, Python reads it back as a code point) as its ``\\uXXXX`` escape, for no UTF-8
    stream can write it, and the characters terminals act on escaped
    (:func:`~teamlead._redact.json_line_safe`): the same JSON value.

    Example:
        >>> json_text({"a": "x\\ud800"}) == '{"a": "x\\\\ud800"}'
        True
    """
    return json_line_safe(json.dumps(value, ensure_ascii=False))


def past_rows(
    history: History, *, skip: Iterable[str] = (), limit: int | None = None
) -> list[dict[str, Any]]:
    """Every finished run the history keeps (the newest ``limit``) as a ``ps --json``
    object, newest first (the runs in ``skip``, still listed as live, left out)."""
    live = set(skip)
    return [_row(record) for record in history.records(limit) if record.run not in live]


def ps_row(**fields: Any) -> dict[str, Any]:
    """A ``teamlead ps --json`` object: ``fields``, every other key ``None`` (not finished).

    Raises:
        TypeError: a field the ``ps --json`` schema does not have.
    """
    unknown = fields.keys() - _BLANK_ROW.keys()
    if unknown:
        raise TypeError(f"ps rows have no field {', '.join(sorted(unknown))}")
    return _BLANK_ROW | fields


def _row(record: RunRecord) -> dict[str, Any]:
    # an Agent call the gate or the CLI refused never became an agent
    ran = [
        _state(a.status, a.ended) for a in record.agents if a.status not in ("denied", "rejected")
    ]
    done = sum(status in ("completed", "cached", "reported") for status in ran)
    tokens = [(a.tokens_in or 0) + (a.tokens_out or 0) for a in record.agents]
    requests = [a.requests for a in record.agents if a.requests is not None]
    return ps_row(
        run=record.run,
        session_id=record.session_id,
        status=record.status,
        mode=record.mode,
        command=record.command,
        label=record.label,
        started=record.started,
        agents={"running": 0, "queued": 0, "done": done, "failed": len(ran) - done},
        tokens=sum(tokens) if any(tokens) else None,
        requests=sum(requests) if requests else None,
        finished=True,
        ended=record.ended,
        reason=record.reason,
        cost_usd=record.cost_usd,
        answer=record.result,
    )


def run_filter(filters: Iterable[str]) -> Callable[[Mapping[str, Any]], bool]:
    """``ps --filter``: whether a row passes every ``KEY=VALUE`` given (``status=`` its
    status, one of those given; ``since=`` started at most that long ago, or on or after
    that date).

    Raises:
        UsageError: a filter that is not one of those (the message says what to give).
    """
    statuses: set[str] = set()
    since: float | None = None
    now = SYSTEM_CLOCK.time()
    for text in filters:
        key, sep, value = text.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise UsageError(f"--filter {text!r} is not KEY=VALUE: {_FILTER_HELP}")
        if key == "status":
            if value.lower() not in _STATUSES:
                known = ", ".join(_STATUSES)
                raise UsageError(f"--filter status={value!r} is no status: give one of {known}")
            statuses.add(value.lower())
        elif key == "since":
            start = _since(value, now)
            since = start if since is None else max(since, start)
        else:
            raise UsageError(f"--filter {key!r} is not a filter: {_FILTER_HELP}")

    def keep(row: Mapping[str, Any]) -> bool:
        if statuses and str(row.get("status")) not in statuses:
            return False
        started = row.get("started")
        return since is None or (isinstance(started, (int, float)) and started >= since)

    return keep


def _since(value: str, now: float) -> float:
    """The moment ``since=VALUE`` names: an age (``90s``, ``30m``, ``2h``, ``1d``, ``1w``)
    before ``now``, or a date or time (ISO 8601, UTC unless it says otherwise)."""
    match = _DURATION.fullmatch(value.lower())
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"--filter since={value!r} is neither an age nor a date: give since=2h, "
            "since=3d or since=2026-12-01T09:00"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.timestamp()


def ago(seconds: float) -> str:
    """``seconds`` (since a run started, a limit was learnt) as ``ps`` says it; ``-`` for a
    time nothing of this machine can have (an entry is anyone's file: ``started: -1e308``
    is not a 300-digit number of hours)."""
    if not -60 < seconds < _LONGEST_AGO_S:  # also nan (a minute ahead is clock skew)
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.0f}d ago"


def shown(record: RunRecord, history: History) -> dict[str, Any]:
    """``record`` as ``show --json`` prints it: the record, each agent's whole result in
    it (a long one read back from its file)."""
    data = record.model_dump(mode="json")
    for agent, out in zip(record.agents, data["agents"], strict=True):
        out["result"] = history.result_of(agent)
    data["duration_s"] = round(record.duration_s, 3)
    return data


def past_detail(record: RunRecord, history: History) -> dict[str, Any]:
    """A finished run as ``teamlead view`` draws it: the shape of a live run's detail
    (its agent tree: each agent under the one that started it, else under the lead) with
    the run's prompt, answer and reasons, and each agent's prompt and whole result."""
    data = shown(record, history)
    from .._control import tree_parents

    lead = _node(id="lead", kind="lead", label="lead", state=record.status)
    nodes: dict[str, dict[str, Any]] = {}
    parents: dict[str, str | None] = {}
    for agent in data["agents"]:
        tokens = (agent.get("tokens_in") or 0) + (agent.get("tokens_out") or 0)
        node_id, number = agent["id"], len(nodes)
        while node_id in nodes:  # a repeated id: the next free one, as a live run's tree
            node_id, number = f"{agent['id']}#{number}", number + 1
        parents[node_id] = agent.get("parent")
        nodes[node_id] = _node(
            id=node_id,
            kind=agent.get("kind") or "task",
            label=_name(agent),
            state=_state(agent["status"], agent.get("ended")),
            tokens=tokens or None,
            requests=agent.get("requests"),
            duration_s=agent.get("duration_s"),
            prompt=agent.get("prompt"),
            result=agent.get("result"),
            reason=agent.get("reason"),
        )
    for node_id, up in tree_parents(parents).items():
        (lead if up is None else nodes[up])["children"].append(nodes[node_id])
    return {
        "version": 1,
        "run": record.run,
        "source": "history",
        "status": record.status,
        "reason": record.reason,
        "reasons": data["reasons"],
        "session_id": record.session_id,
        "command": record.command,
        "prompt": record.prompt or _NO_PROMPT.get(record.mode, "(not known)"),
        "answer": record.result,
        "started": record.started,
        "ended": record.ended,
        "tree": lead,
        "omitted": 0,
        "queue": [],
        "approvals": [],
        "limits": [],
    }


def _node(**fields: Any) -> dict[str, Any]:
    """One agent of a finished run's tree, in the shape of a live run's (what the history
    does not keep is ``None``)."""
    blank = dict.fromkeys(("tokens", "requests", "last_tool", "duration_s", "model"))
    return {**blank, **fields, "children": []}


def _state(status: Any, ended: Any) -> str:
    """How an agent ended, as the run judged it: an agent the CLI called completed that was
    cut (at its turn limit, its output limit, with no final message) says so."""
    return str(ended if ended in CUT_ENDS else status)


def _name(agent: Mapping[str, Any]) -> str:
    return str(agent.get("label") or agent.get("description") or agent.get("id"))


@click.command()
@click.argument("run")
@option("--json", "json_", is_flag=True, help="The run's record as one JSON object.")
@handle_errors
def show(run: str, json_: bool) -> None:
    """Show a finished run: its prompt, answer and agents.

    RUN is the run id `teamlead ps --all` shows, the session id, or a unique prefix of
    either. Each agent comes with its prompt and its whole result.
    """
    from .._history import History

    history = History()
    try:
        record = history.find(run)
    except NoSuchRun as kept:
        raise _running(run) or kept from None
    data = shown(record, history)
    if json_:
        click.echo(json_text(data))
        return
    click.echo(_text(data))


def _running(ref: str) -> NoSuchRun | None:
    """What to say when ``ref`` names a run that is still running (``None`` if none)."""
    from .._control import Registry

    try:
        entry = Registry().find(ref)
    except (NoSuchRun, UsageError):
        return None
    return NoSuchRun(
        f"run {entry.run} is still running: `teamlead watch {entry.run}` follows it, and "
        "`teamlead show` prints it once it has finished",
        ref=ref,
        why="running",
    )


def _text(data: Mapping[str, Any]) -> str:
    """A shown record as text for people, every text of it escaped."""
    reason = f" ({data['reason']})" if data.get("reason") else ""
    lines = [
        f"run {data['run']}: {data['status']}{reason}",
        f"session: {data.get('session_id') or '-'}",
    ]
    if data.get("label"):
        lines.append(f"label: {data['label']}")
    lines += [
        f"command: {data.get('command') or '-'}",
        f"started: {_when(data.get('started'))}, took {data['duration_s']:.1f} s, "
        f"{data.get('resumes') or 0} resume(s), cost as the CLI reported it "
        f"${data.get('cost_usd') or 0:.4f}",
        "",
        "prompt:",
        _indent(data.get("prompt") or _NO_PROMPT.get(str(data.get("mode")), "(not known)")),
        "",
        "answer:",
        _indent(data.get("result") or "(no answer)"),
    ]
    if data.get("reasons"):
        lines += ["", "reasons:", *(f"  - {line}" for line in data["reasons"])]
    agents = data.get("agents") or []
    lines += ["", f"agents ({len(agents)}):"]
    for agent in agents:
        name = _name(agent)
        used = f", {agent['disposition']}" if agent.get("disposition") else ""
        state = _state(agent.get("status"), agent.get("ended"))
        lines.append(f"  [{state}] {name} ({agent.get('kind')}{used})")
        if agent.get("reason"):
            lines.append(f"    reason: {agent['reason']}")
        if agent.get("prompt"):
            lines += ["    prompt:", _indent(agent["prompt"], 6)]
        if agent.get("result"):
            lines += ["    result:", _indent(agent["result"], 6)]
    return "\n".join(terminal_safe(line, keep_newlines=True) for line in lines)


def _indent(text: str, by: int = 2) -> str:
    return "\n".join(" " * by + line for line in str(text).splitlines() or [""])


def _when(seconds: object) -> str:
    return (moment(seconds) if isinstance(seconds, (int, float)) and seconds else None) or "-"
