"""The result cards: one table row per agent at the end of a run on a terminal.

``teamlead ask`` and ``resume`` on a terminal end with this table on stderr, made from
:attr:`Finished.tasks <teamlead.events.Finished.tasks>`. Every text in a row came from an
agent or the CLI and is hostile: it goes through :func:`~teamlead._redact.terminal_safe`
(so a row stays one inert line) and is rendered as a Rich ``Text``, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._redact import terminal_safe
from ..events import TaskDisposition

__all__ = ["COLUMNS", "cards_table", "cards_title", "print_cards", "short_path"]

#: The table's columns, in order.
COLUMNS = ("agent", "kind", "status", "tokens in", "tokens out", "tools", "duration", "result")
_MAX_NAME = 60
_NONE = "-"


def _text(value: str | None, limit: int | None = None) -> Text:
    """Hostile text as one inert line: made visible, then cut (after, so an escape is
    never cut into a fragment that means something)."""
    safe = terminal_safe(value or "")
    if limit is not None and len(safe) > limit:
        safe = safe[: limit - 1] + "…"
    return Text(safe or _NONE)


def _number(value: int | None) -> str:
    return _NONE if value is None else str(value)


def _seconds(value: float | None) -> str:
    return _NONE if value is None else f"{value:.1f} s"


def short_path(path: str | None) -> str | None:
    """``path`` as a cell shows it: ``…/`` and its last two parts (the whole temp path of
    each file would wrap a row over several lines).

    Example:
        >>> short_path("/tmp/claude-0/-tmp-project/3beab1c7/tasks/a6220ac4.output")
        '…/tasks/a6220ac4.output'
        >>> short_path("/runs/a.output")
        '/runs/a.output'
    """
    if not path:
        return path
    parts = path.split("/")
    if len([p for p in parts if p]) <= 2:
        return path
    return "…/" + "/".join(parts[-2:])


def cards_title(tasks: Sequence[TaskDisposition]) -> str:
    """``teamlead · 3 agent(s), 1 workflow(s), 1 call(s) not run``: every row of ``tasks``
    counted once, by what it is (a workflow is the row its agents hang under).

    Example:
        >>> cards_title([])
        'teamlead · 0 agent(s)'
    """
    parents = {t.parent for t in tasks if t.kind == "workflow_agent"}
    workflows = sum(1 for t in tasks if t.kind == "task" and (t.run_id or t.id in parents))
    calls = sum(1 for t in tasks if t.kind == "call")
    agents = len(tasks) - workflows - calls
    parts = [f"{agents} agent(s)"]
    if workflows:
        parts.append(f"{workflows} workflow(s)")
    if calls:
        parts.append(f"{calls} call(s) not run")
    return "teamlead · " + ", ".join(parts)


def _name(row: TaskDisposition) -> Text:
    name = _text(row.label or row.description or row.id, _MAX_NAME)
    if row.kind == "workflow_agent":
        return Text("  └ ") + name
    return name


def cards_table(tasks: Sequence[TaskDisposition], *, title: str | None = None) -> Table:
    """The result table for ``tasks`` (``Finished.tasks``), one row per entry, in order.

    The result path is the row's ``result_file`` (its whole result, when a prompt quoted
    only its head and tail), else its transcript, shown short (:func:`short_path`).
    """
    table = Table(title=Text(title) if title else None, box=box.MINIMAL, expand=False)
    for column in COLUMNS:
        numeric = column in ("tokens in", "tokens out", "tools", "duration")
        # only the name and the path may fold: a figure or a status cut in two reads wrong
        table.add_column(
            column,
            justify="right" if numeric else "left",
            overflow="fold",
            no_wrap=numeric,
        )
    for row in tasks:
        table.add_row(
            _name(row),
            _text(row.kind),
            _text(row.status),
            _number(row.tokens_in),
            _number(row.tokens_out),
            _number(row.tool_uses),
            _seconds(row.duration_s),
            _text(short_path(row.result_file or row.transcript)),
        )
    return table


def print_cards(console: Console, tasks: Sequence[TaskDisposition]) -> None:
    """Print the result table for ``tasks`` on ``console``; nothing when there are none."""
    if not tasks:
        return
    console.print(cards_table(tasks, title=cards_title(tasks)))
