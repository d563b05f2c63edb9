"""The run's house rules, read from the source: one small run context, a run's events
drained at few sites (each consumer from a subscription of its own to the run's bus), time
read through the one clock, and one owner of admission."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
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


#: A direct read of time or a sleep: what the clock (``teamlead/clock.py``) stands for.
_TIME_READ = re.compile(
    r"\b(time\.(time|monotonic|perf_counter|sleep|monotonic_ns|time_ns)|asyncio\.sleep"
    r"|anyio\.sleep|anyio\.current_time|loop\.time|datetime\.now|datetime\.utcnow)\("
)


def _time_reads() -> list[str]:
    """Every line of the core (``teamlead/`` without the experiment and the test bed) that
    reads time or sleeps other than through ``clock.py``."""
    reads: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        inner = path.relative_to(PACKAGE)
        if inner.parts[0] in ("experiment", "testing") or inner == Path("clock.py"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _TIME_READ.search(line):
                reads.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    return reads


def test_time_is_read_through_the_clock() -> None:
    reads = _time_reads()
    assert len(reads) <= 10, "\n".join(reads)


def test_the_time_check_sees_each_kind_of_read() -> None:
    lines = [
        "start = time.monotonic()",
        "await asyncio.sleep(1)",
        "await anyio.sleep(0)",
        "stamp = datetime.now(timezone.utc)",
        "x = loop.time()",
    ]
    assert all(_TIME_READ.search(line) for line in lines)
    assert not _TIME_READ.search("deadline = clock.monotonic() + 5")


#: What decides whether an agent or a request of a run may start or go on: the admission,
#: its hook, the process-wide cap and its slots, the pause, the relay's ceilings, the
#: timeout and budgets, and why a workflow agent is refused.
_ADMISSION_CLASSES = {
    "Admission",
    "SpawnGate",
    "SpawnCap",
    "FifoSlots",
    "Pause",
    "RunLimits",
    "AgentLimits",
    "WorkflowRefusal",
}


def _classes(names: set[str]) -> list[str]:
    """Where each class of ``names`` is defined in the core, as ``path:Name``, plus every
    ``Protocol`` class of the relay's ledger (``_metering``)."""
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        inner = path.relative_to(PACKAGE)
        if inner.parts[0] in ("experiment", "testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            protocol = any(ast.unparse(base).endswith("Protocol") for base in node.bases)
            if node.name in names or (protocol and inner.parts[0] == "_metering"):
                found.append(f"{inner.as_posix()}:{node.name}")
    return found


def test_admission_has_one_owning_package() -> None:
    found = _classes(_ADMISSION_CLASSES)
    assert sorted(f.rpartition(":")[2] for f in found) == sorted(_ADMISSION_CLASSES), found
    assert all(f.startswith("_gate/") for f in found), found  # no ledger protocol either


def test_the_admission_and_the_ledger_are_wired_with_no_callback_but_the_bus() -> None:
    from teamlead._gate import Admission
    from teamlead._metering import AgentBook
    from teamlead._run.agents import RunAgents

    for made in (Admission, AgentBook, RunAgents):
        params = inspect.signature(made.__init__).parameters.values()
        callbacks = [p.name for p in params if "Callable" in str(p.annotation)]
        assert callbacks in ([], ["publish"]), (made.__name__, callbacks)
