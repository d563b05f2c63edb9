"""The `--json` schema page (docs/json-schema.md) matches what `teamlead demo --json` and
`ask --json` write.

Every example line the section shows is compared with real lines of its type: the same
keys, nested objects included, and the same kind of value where both are set. A type no
offline run produces is compared with its event model instead. Every type the runs write
is named on the page.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import teamlead.events
from teamlead.events import EVENT_VERSION
from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut, WorkflowFanOut

from ..docs_pages import DOCS
from .conftest import TEAMLEAD

SCHEMA_PAGE = DOCS / "json-schema.md"


def json_section() -> str:
    return SCHEMA_PAGE.read_text()


def documented() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    for block in re.findall(r"```json\n(.*?)```", json_section(), flags=re.S):
        at = 0
        while block[at:].strip():
            at += len(block[at:]) - len(block[at:].lstrip())
            record, at = decoder.raw_decode(block, at)
            records.append(record)
    return records


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def same_shape(doc: Any, real: Any, path: str) -> list[str]:
    """Where ``doc`` and ``real`` differ in keys or kinds of value (``None`` matches any)."""
    if doc is None or real is None:
        return []
    if _kind(doc) != _kind(real):
        return [f"{path}: documented {_kind(doc)}, real {_kind(real)}"]
    if isinstance(doc, dict):
        if set(doc) != set(real):
            return [f"{path}: documented keys {sorted(doc)}, real {sorted(real)}"]
        return [p for key in doc for p in same_shape(doc[key], real[key], f"{path}.{key}")]
    if isinstance(doc, list) and doc and real:
        return same_shape(doc[0], real[0], f"{path}[0]")
    return []


def event_models() -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for name in teamlead.events.__all__:
        cls = getattr(teamlead.events, name)
        if isinstance(cls, type) and issubclass(cls, BaseModel) and "type" in cls.model_fields:
            models[str(cls.model_fields["type"].default)] = cls
    return models


def _start(args: list[str], claude: OfflineClaude | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TEAMLEAD, *args],
        env=None if claude is None else {**os.environ, **claude.env},
        cwd=None if claude is None else claude.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _real_lines(tmp_path: Path) -> list[dict[str, Any]]:
    """The lines of three runs, side by side (they share nothing): the demo, an `ask` whose
    cap and budget queue and deny a spawn, and a workflow that loses an agent and is resumed."""
    flow_script = WorkflowFanOut(["a", "b"], faults={"b": Reply.error(529)})
    with (
        ScriptedServer(FanOut.of(3, delays=0.3)) as server,
        ScriptedServer(flow_script) as flow_server,
    ):
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        flow_claude = OfflineClaude(flow_server.base_url, state_dir=tmp_path / "w")
        procs = [
            _start(["demo", "--json"]),
            _start(
                ["ask", "Investigate.", "--json"]
                + ["--max-concurrent-agents", "1", "--spawn-budget", "2"],
                claude,
            ),
            _start(
                ["ask", "Investigate.", "--json", "--permission-mode", "bypassPermissions"],
                flow_claude,
            ),
        ]
        try:
            demo, ask, flow = [(*p.communicate(timeout=200), p.returncode) for p in procs]
        finally:
            for proc in procs:  # on a timeout: stop and reap every run
                proc.kill()
                proc.wait(10)
    assert demo[2] == 0, demo[1]
    assert ask[0].strip(), ask[1]
    assert flow[0].strip(), flow[1]
    return [json.loads(line) for out in (demo, ask, flow) for line in out[0].splitlines()]


def test_every_documented_example_is_well_formed() -> None:
    records = documented()
    assert len(records) >= 10
    assert all(r["version"] == EVENT_VERSION for r in records)
    assert records[-1]["type"] == "finished"
    assert f"`version` (currently {EVENT_VERSION}," in " ".join(json_section().split())


@pytest.mark.cli
@pytest.mark.slow  # the demo and two `ask` runs, each on the real CLI
@pytest.mark.timeout(300)
def test_the_documented_examples_match_real_output(tmp_path: Path) -> None:
    real = _real_lines(tmp_path)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in real:
        by_type.setdefault(record["type"], []).append(record)
    models = event_models()
    problems: list[str] = []
    for doc in documented():
        kind = doc["type"]
        if kind in by_type:
            for record in by_type[kind]:
                problems += same_shape(doc, record, kind)
        else:  # no offline run writes it: its model's fields are the truth
            fields = set(models[kind].model_fields)
            if set(doc) != fields:
                problems.append(f"{kind}: documented {sorted(doc)}, model {sorted(fields)}")
    assert not problems, "\n".join(dict.fromkeys(problems))
    assert "rate_limited" in by_type
    outcomes = {r["outcome"] for r in by_type["spawn_decided"]}
    assert {"queued", "denied", "admitted"} <= outcomes
    section = json_section()
    unnamed = sorted(t for t in by_type if f"`{t}`" not in section)
    assert not unnamed, f"types written but not named in docs/json-schema.md: {unnamed}"
