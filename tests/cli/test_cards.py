"""The result cards: the table at the end of a run on a terminal, one row per agent.

The table is parsed back from what reached the (emulated) terminal and compared with
``Finished.tasks``; hostile descriptions (ESC and OSC sequences, Rich markup, newlines, bidi
overrides) must reach it as inert visible text. One test runs the real CLI offline
(``-m cli``): a fan-out with Agent-tool and workflow agents, through the CLI's own
``run_session``.
"""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from rich.console import Console

import teamlead
from teamlead._cli.cards import COLUMNS, cards_table, print_cards, short_path
from teamlead._cli.running import run_session
from teamlead._redact import terminal_safe
from teamlead.coordinator import run_stream
from teamlead.events import Finished, TaskDisposition
from teamlead.policy import SpawnPolicy

from ..parsing import HandFed
from .conftest import OfflineFactory
from .scripted import Mixed

_SGR = re.compile(r"\x1b\[[0-9;]*m")  # Rich's own styling, the only escape it may write

HOSTILE = [
    "\x1b[2J\x1b[Hcleared",
    "\x1b]0;pwned title\x07",
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "[bold red]alarm[/bold red] [link=https://e.example]x[/link]",
    "two\nlines\rback",
    "bidi \u202egnp.exe",
]


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr on a terminal does."""

    def isatty(self) -> bool:
        return True


def row(description: str, **fields: Any) -> TaskDisposition:
    values: dict[str, Any] = {
        "id": f"id-{abs(hash(description))}",
        "kind": "task",
        "description": description,
        "status": "completed",
        "disposition": "included",
        "source": "lead",
    }
    values.update(fields)
    return TaskDisposition(**values)


def render(tasks: list[TaskDisposition], *, color: bool) -> str:
    out = Terminal()
    console = Console(file=out, width=400, color_system="truecolor" if color else None)
    print_cards(console, tasks)
    return out.getvalue()


def parse_cards(text: str) -> list[dict[str, str]]:
    """The rows of the last result table in ``text``, cells by column name."""
    lines = [_SGR.sub("", line) for line in text.splitlines()]
    header = max(i for i, line in enumerate(lines) if line.split("│")[0].strip() == "agent")
    names = [cell.strip() for cell in lines[header].split("│")]
    assert tuple(names) == COLUMNS, names
    rows = []
    for line in lines[header + 2 :]:
        cells = line.split("│")
        if len(cells) != len(COLUMNS):
            break
        rows.append(dict(zip(COLUMNS, (c.strip() for c in cells), strict=True)))
    return rows


def expected(task: TaskDisposition) -> dict[str, str]:
    name = terminal_safe(task.label or task.description or task.id)  # made visible
    return {
        "agent": ("└ " if task.kind == "workflow_agent" else "") + name,
        "kind": task.kind,
        "status": task.status,
        "tokens in": "-" if task.tokens_in is None else str(task.tokens_in),
        "tokens out": "-" if task.tokens_out is None else str(task.tokens_out),
        "tools": "-" if task.tool_uses is None else str(task.tool_uses),
        "duration": "-" if task.duration_s is None else f"{task.duration_s:.1f} s",
        "result": terminal_safe(short_path(task.result_file or task.transcript) or "") or "-",
    }


# -- the table ---------------------------------------------------------------------------------
def test_the_table_has_one_row_per_entry_with_every_figure() -> None:
    tasks = [
        row(
            "alpha",
            tokens_in=120,
            tokens_out=30,
            tool_uses=4,
            duration_s=12.34,
            transcript="/runs/a.output",
        ),
        row("scan", id="wf-task", result_file="/runs/result-scan.txt"),
        row("wf:w1", kind="workflow_agent", parent="wf-task", label="wf:w1", tokens_in=7),
        row("docs", kind="call", status="denied", disposition="not_run"),
    ]
    assert parse_cards(render(tasks, color=False)) == [expected(t) for t in tasks]
    assert parse_cards(render(tasks, color=True)) == [expected(t) for t in tasks]


def test_a_result_path_is_shown_short_and_a_fan_outs_rows_fit_110_columns() -> None:
    temp = "/tmp/claude-0/-tmp-state-project/3beab1c7-f7d2-4274-9a47-39c8d9d1b921/tasks"
    tasks = [
        row(
            f"agent-{n}",
            tokens_in=20,
            tokens_out=12,
            tool_uses=0,
            duration_s=0.5,
            transcript=f"{temp}/a6220ac46cd9294a{n}.output",
        )
        for n in range(1, 4)
    ]
    out = Terminal()
    print_cards(Console(file=out, width=110, color_system=None), tasks)
    cells = parse_cards(out.getvalue())
    assert [c["result"] for c in cells] == [
        f"…/tasks/a6220ac46cd9294a{n}.output" for n in (1, 2, 3)
    ]
    assert temp not in out.getvalue()
    body = [line for line in out.getvalue().splitlines() if "│" in line][1:]  # after the head
    assert len(body) == len(tasks)  # one line per agent: no path folds over several


def test_the_title_counts_every_row_it_stands_over() -> None:
    tasks = [
        row("security"),
        row("scan", id="wf-task", run_id="wf_e383"),
        row("wf:auth", kind="workflow_agent", parent="wf-task", label="wf:auth", run_id="wf_e383"),
        row("wf:billing", kind="workflow_agent", parent="wf-task", label="wf:billing"),
        row("reviewer", kind="teammate", status="reported"),
        row("docs", kind="call", status="denied", disposition="not_run"),
    ]
    title = render(tasks, color=False).splitlines()[0].strip()
    assert title == "teamlead · 4 agent(s), 1 workflow(s), 1 call(s) not run"  # 6 rows
    only_agents = render([row("a"), row("b"), row("c")], color=False).splitlines()[0].strip()
    assert only_agents == "teamlead · 3 agent(s)"


def test_no_rows_print_no_table() -> None:
    assert render([], color=True) == ""


@pytest.mark.parametrize("color", [False, True])
def test_hostile_descriptions_and_paths_stay_inert(color: bool) -> None:
    tasks = [row(text, transcript=f"/runs/{text}.output") for text in HOSTILE]
    tasks.append(row("[bold]wf[/bold]", kind="workflow_agent", label="\x1b[31mred\x1b[0m"))
    out = render(tasks, color=color)
    rest = _SGR.sub("", out)
    assert "\x1b" not in rest and "\x07" not in rest and "\r" not in rest
    assert "\u202e" not in out
    if not color:
        assert "\x1b" not in out  # no styling at all: not one escape
    plain = parse_cards(out)
    assert len(plain) == len(tasks)  # a newline in a description never breaks a row
    assert plain[0]["agent"] == "\\x1b[2J\\x1b[Hcleared"
    assert plain[1]["agent"] == "\\x1b]0;pwned title\\x07"
    assert plain[3]["agent"] == "[bold red]alarm[/bold red] [link=https://e.example]x[/link]"
    assert plain[4]["agent"] == "two\\x0alines\\x0dback"
    assert plain[5]["agent"] == "bidi \\u202egnp.exe"
    assert plain[6]["agent"] == "└ \\x1b[31mred\\x1b[0m"
    assert plain[1]["result"] == "/runs/\\x1b]0;pwned title\\x07.output"


def test_markup_in_a_row_never_styles_it() -> None:
    out = render([row("[bold red]alarm[/bold red]")], color=True)
    line = next(x for x in out.splitlines() if "alarm" in x)
    cell = line.split("│")[0]
    assert "[bold red]alarm[/bold red]" in cell and "\x1b[1" not in cell  # not made bold


def test_a_long_name_is_cut_after_it_was_made_visible() -> None:
    (cell,) = parse_cards(render([row("\x1b" * 100)], color=False))
    assert cell["agent"] == "\\x1b" * 14 + "\\x1…" and len(cell["agent"]) == 60
    assert cards_table([row("x")]).row_count == 1


# -- a whole run, through the command's run_session ------------------------------------------
def _capture(items: Callable[[], AsyncIterator[Any]], seen: list[Any]) -> Callable[[], Any]:
    async def stream() -> AsyncIterator[Any]:
        async for item in items():
            seen.append(item)
            yield item

    return stream


@pytest.mark.cli
def test_a_run_on_a_terminal_ends_with_the_cards_of_finished_tasks(
    offline: OfflineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no path folds
    script = Mixed(["alpha", "[bold]beta\x1b]0;t\x07"], ["w1", "w2"], delay=0.3)
    _, claude = offline(script)
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(max_concurrent_agents=4))

    live = run_stream("Investigate.", claude.options(), policy=policy)

    def recorded() -> AsyncIterator[Any]:  # the same run again, for the other outputs
        async def stream() -> AsyncIterator[Any]:
            for item in seen:
                yield item

        return stream()

    outputs: dict[str, tuple[str, Finished]] = {}
    seen: list[Any] = []
    for output in ("auto", "quiet", "json"):
        err, out = Terminal(), Terminal()
        if output == "auto":  # the run's own parse; a replay is parsed by hand
            code = run_session(
                _capture(lambda: live, seen), live, output=output, stderr=err, stdout=out
            )
        else:
            code = run_session(recorded, HandFed(), output=output, stderr=err, stdout=out)
        assert code == 0, err.getvalue()
        done = seen[-1]
        assert isinstance(done, Finished)
        outputs[output] = (err.getvalue(), done)
    text, done = outputs["auto"]
    cards = parse_cards(text)
    assert cards == [expected(t) for t in done.tasks]
    kinds = [c["kind"] for c in cards]
    # alpha, beta and the workflow's task; the workflow's two agents
    assert sorted(kinds) == ["task"] * 3 + ["workflow_agent"] * 2, kinds
    assert all(c["tokens in"] != "-" for c in cards if c["kind"] == "workflow_agent")
    assert "\x1b]0;t" not in text and "[bold]beta\\x1b]0;t\\x07" in text
    for quiet in ("quiet", "json"):
        assert "tokens out" not in outputs[quiet][0]  # no table
