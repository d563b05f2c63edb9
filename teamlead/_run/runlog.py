"""A finished run read back from its NDJSON log (``teamlead ask --json``'s output), as a
:class:`~.detail.RunDetail`: what ``teamlead view run.ndjson`` shows.

The log is the user's file, but its lines are the agents' words: it is read with limits
(at most :data:`MAX_LOG_BYTES`, each line at most :data:`MAX_LINE_BYTES`), every line a JSON
object or skipped, and each record the page needs parsed into its event type at this edge
(``finished``, ``agent_usage``, ``concurrency_changed``, ``session``); unknown types and
malformed records are skipped, and older versions read as their fields allow. The tree is
the ``finished`` line's rows: each task under its parent (the lead when none), a workflow's
agents under its phases, denied and rejected calls and teammates under the lead; the last
``agent_usage`` of each agent gives its last tool (and the lead's tokens and requests).

Example:
    >>> detail = read_log(Path("run.ndjson"))  # doctest: +SKIP
    >>> [child.label for child in detail.lead.children]  # doctest: +SKIP
    ['security', 'tests']
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from ..errors import UsageError
from ..events import AgentUsage, ConcurrencyChanged, Finished, TaskDisposition
from .detail import (
    MAX_NODES,
    AgentNode,
    LimitHistory,
    NodeKind,
    RunDetail,
    attach,
    phase_nodes,
    plain,
    total,
)

__all__ = ["MAX_LINE_BYTES", "MAX_LOG_BYTES", "detail_of_log", "read_log"]

#: The largest log read (bytes).
MAX_LOG_BYTES = 512 * 1024 * 1024
#: The longest line read (a ``finished`` line with every agent's result can be large).
MAX_LINE_BYTES = 64 * 1024 * 1024
_DONE = frozenset({"completed", "included"})
_KINDS: dict[str, NodeKind] = {
    "workflow_agent": "workflow_agent",
    "teammate": "teammate",
    "call": "call",
}


def read_log(path: Path) -> RunDetail:
    """The finished run in the NDJSON log at ``path``.

    Raises:
        UsageError: the file cannot be read, is too large, or holds no ``finished`` line.
    """
    try:
        size = path.stat().st_size
        if size > MAX_LOG_BYTES:
            raise UsageError(f"{path} is larger than a run's log can be ({size} bytes)")
        with path.open("rb") as log:
            lines = iter(lambda: log.readline(MAX_LINE_BYTES + 1), b"")
            return detail_of_log(lines, name=path.stem)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def detail_of_log(lines: Iterable[bytes | str], *, name: str = "log") -> RunDetail:
    """The finished run in ``lines`` (a run's NDJSON log).

    Raises:
        UsageError: no ``finished`` line.
    """
    finished: Finished | None = None
    usage: dict[str, AgentUsage] = {}
    limits = LimitHistory()
    session: str | None = None
    first_at: float | None = None
    for raw in lines:
        if len(raw) > MAX_LINE_BYTES:
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        try:
            if kind == "finished":
                finished = Finished.model_validate(record)
            elif kind == "agent_usage":
                seen = AgentUsage.model_validate(record)
                usage[seen.agent_id] = seen
            elif kind == "concurrency_changed":
                change = ConcurrencyChanged.model_validate(record)
                limits.record(change)
                first_at = change.at if first_at is None else min(first_at, change.at)
            elif kind == "session" and isinstance(record.get("session_id"), str):
                session = session or record["session_id"]
        except ValidationError:
            continue
    if finished is None:
        raise UsageError(
            "the file holds no `finished` line: it is not the NDJSON log of a finished "
            "run (`teamlead ask --json` writes one; `teamlead view` shows a live run)"
        )
    rows = finished.tasks
    lead_usage = usage.get("")
    lead = AgentNode(
        id="lead",
        kind="lead",
        label="lead",
        state=finished.status,
        tokens=_tokens(lead_usage.input_tokens, lead_usage.output_tokens) if lead_usage else None,
        requests=lead_usage.requests if lead_usage else None,
    )
    started = [r.started_at for r in rows if r.started_at is not None]
    ended = [r.ended_at for r in rows if r.ended_at is not None]
    if first_at is not None:
        started.append(first_at)
    if started and ended:
        lead.duration_s = max(ended) - min(started)
    nodes: dict[str, AgentNode] = {}
    parents: dict[str, str | None] = {}
    workflow_agents: dict[str, list[TaskDisposition]] = {}
    omitted = 0
    for row in rows:
        if len(nodes) + sum(len(v) for v in workflow_agents.values()) >= MAX_NODES - 1:
            omitted += 1
            continue
        if row.kind == "workflow_agent" and row.parent is not None:
            workflow_agents.setdefault(row.parent, []).append(row)
            continue
        node_id = row.id if row.id not in nodes else f"{row.id}#{len(nodes)}"
        nodes[node_id] = _node(row, usage, node_id)
        parents[node_id] = row.parent
    for parent, agents in workflow_agents.items():
        holder = nodes.get(parent)
        if holder is None:  # its workflow's row is missing: a workflow of its own
            holder = nodes[parent] = AgentNode(id=parent, kind="workflow", label=parent, state="?")
            parents[parent] = None
        holder.kind = "workflow"
        members = [(row.phase, _node(row, usage, row.id)) for row in agents]
        holder.children.extend(phase_nodes(parent, members, _phase_order(agents)))
        if holder.tokens is None:
            holder.tokens = total(node.tokens for _, node in members)
    attach(nodes, parents, lead)
    return RunDetail(
        run=plain(finished.session_id or session or name, 80) or name,
        source="log",
        status=finished.status,
        reason=finished.reason,
        lead=lead,
        limits=limits,
        omitted=omitted,
        now=max(ended) if ended else None,
        started=min(started) if started else None,
    )


def _node(row: TaskDisposition, usage: dict[str, AgentUsage], node_id: str) -> AgentNode:
    seen = usage.get(row.id)
    kind: NodeKind = _KINDS.get(row.kind, "agent")
    return AgentNode(
        id=node_id,
        kind=kind,
        label=plain(row.label or row.description or row.id) or row.id,
        state="done" if row.status in _DONE else row.status,
        tokens=_tokens(row.tokens_in, row.tokens_out),
        requests=row.requests,
        last_tool=plain(seen.last_tool, 80) if seen is not None else None,
        duration_s=row.duration_s,
    )


def _phase_order(rows: list[TaskDisposition]) -> list[str]:
    """The phases in the order their agents came."""
    return list(dict.fromkeys(row.phase for row in rows if row.phase))


def _tokens(tokens_in: int | None, tokens_out: int | None) -> int | None:
    return (
        None if tokens_in is None and tokens_out is None else (tokens_in or 0) + (tokens_out or 0)
    )
