"""The result cards: one table row per agent at the end of a run on a terminal.

``teamlead ask`` (and ``resume``) on a terminal end with this table on stderr, made from
:attr:`Finished.tasks <teamlead.events.Finished.tasks>`: every agent, task, workflow agent
(under its workflow), teammate and Agent call that never ran, with its status, tokens in
and out, tool uses, duration and result path. ``-q`` leaves it out and ``--json`` never
prints it (the same data is in the ``finished`` line).

Every text in a row came from an agent or the CLI and is hostile: it goes through
:func:`~teamlead._redact.terminal_safe` (secrets redacted, every control character, ESC,
CSI, OSC and bidi override made visible as ``\\x1b``-style text, newlines too, so a row
stays one line) and is rendered as a Rich ``Text``, which Rich never reads as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._redact import terminal_safe
from ..events import TaskDisposition

__all__ = ["COLUMNS", "cards_table", "print_cards"]

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


def _name(row: TaskDisposition) -> Text:
    name = _text(row.label or row.description or row.id, _MAX_NAME)
    if row.kind == "workflow_agent":
        return Text("  └ ") + name
    return name


def cards_table(tasks: Sequence[TaskDisposition], *, title: str | None = None) -> Table:
    """The result table for ``tasks`` (``Finished.tasks``), one row per entry, in order.

    The result path is the row's ``result_file`` (its whole result, when a prompt quoted
    only its head and tail), else its transcript.
    """
    table = Table(title=Text(title) if title else None, box=box.MINIMAL, expand=False)
    for column in COLUMNS:
        numeric = column in ("tokens in", "tokens out", "tools", "duration")
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in tasks:
        table.add_row(
            _name(row),
            _text(row.kind),
            _text(row.status),
            _number(row.tokens_in),
            _number(row.tokens_out),
            _number(row.tool_uses),
            _seconds(row.duration_s),
            _text(row.result_file or row.transcript),
        )
    return table


def print_cards(console: Console, tasks: Sequence[TaskDisposition]) -> None:
    """Print the result table for ``tasks`` on ``console``; nothing when there are none."""
    if not tasks:
        return
    agents = sum(1 for t in tasks if t.kind in ("task", "workflow_agent"))
    console.print(cards_table(tasks, title=f"teamlead · {agents} agent(s)"))
