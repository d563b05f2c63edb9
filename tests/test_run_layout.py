"""The run's house rules, read from the source: one small run context, and a run's events
drained at few sites (each consumer from a subscription of its own to the run's bus)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from teamlead._run.state import RunState

PACKAGE = Path(__file__).resolve().parent.parent / "teamlead"


def _drain_sites() -> list[str]:
    """Every ``x.drain()`` call outside an ``await`` (an awaited one is a socket writer's
    flush, not a run's events)."""
    sites: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        awaited = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.Await)
            for inner in ast.walk(node.value)
        }
        sites += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "drain"
            and id(node) not in awaited
        ]
    return sites


def test_the_run_context_holds_at_most_twelve_parts() -> None:
    names = [f.name for f in dataclasses.fields(RunState)]
    assert len(names) <= 12, names


def test_a_runs_events_are_drained_at_no_more_than_three_sites() -> None:
    sites = _drain_sites()
    assert len(sites) <= 3, sites
    assert any(site.startswith("teamlead/_run/bus.py") for site in sites), sites
