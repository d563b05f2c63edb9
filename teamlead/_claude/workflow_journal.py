"""A workflow run's journal and output file: the results of the agents that finished, and
the run's own result, read back.

Claude Code journals each ``Workflow`` run at
``<config>/projects/<cwd>/<session>/subagents/workflows/<wf_id>/journal.jsonl``: a
``launched`` line, a ``started`` line per agent (``key``, ``agentId``, ``label``,
``phase``) and a ``result`` line per agent that finished (``key``, ``agentId``,
``result``). A resume (``resumeFromRunId``) replays those results instead of sending the
agents' requests again; when a run is cut (the deadline stopped it, its CLI died), they
are what the lead can still be given. The file is found from the session and run ids
(checked plain ids, never a path the stream named), read up to a byte cap, and every line
that is not a JSON object is skipped.

The run's task has an output file too (the ``output_file`` of its ``task_notification``):
JSON ``{summary, agentCount, logs, result, …}``, where ``result`` is the script's return
value. :func:`workflow_result` reads it as the CLI quotes it to the lead (a string as it is,
anything else as compact JSON), so what the lead was shown can be told from the rest.

Example:
    >>> journal_results(config_dir, "4bf9…", "wf_fbff60e6-003")  # doctest: +SKIP
    {'ab300132484ab98eb': JournalResult(label='wf:a', text='FINDING[a]: …')}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .files import FileProblem, is_plain_id, loads, read_regular

__all__ = ["JournalResult", "find_journal", "journal_results", "workflow_result"]

_MAX_BYTES = 32 * 1024 * 1024
_MAX_TEXT = 100_000  # of one agent's result
_MAX_OUTPUT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class JournalResult:
    """One finished agent's result as its run journaled it."""

    label: str | None
    text: str


def find_journal(config_dir: Path, session_id: str, run_id: str) -> Path | None:
    """The journal of run ``run_id`` in ``session_id``, or ``None`` (not there, or an id
    that is not a plain id and so would steer the path)."""
    if not (is_plain_id(session_id) and is_plain_id(run_id)):
        return None
    tail = f"{session_id}/subagents/workflows/{run_id}/journal.jsonl"
    matches = sorted((Path(config_dir) / "projects").glob(f"*/{tail}"))
    return matches[0] if matches else None


def journal_results(config_dir: Path, session_id: str, run_id: str) -> dict[str, JournalResult]:
    """The results a run journaled, by agent id; ``{}`` when there is no readable journal.

    A line that is not JSON, or not an object, is skipped; the file is read up to 32 MB.
    """
    path = find_journal(config_dir, session_id, run_id)
    if path is None:
        return {}
    try:
        data = read_regular(path, _MAX_BYTES)
    except FileProblem:
        return {}
    labels: dict[str, str] = {}
    results: dict[str, str] = {}
    for line in data.splitlines():
        try:
            record = loads(line)
        except ValueError:
            continue
        if not isinstance(record, Mapping):
            continue
        agent_id = record.get("agentId")
        if not isinstance(agent_id, str):
            continue
        label = record.get("label")
        if record.get("type") == "started" and isinstance(label, str):
            labels[agent_id] = label
        elif record.get("type") == "result":
            result = record.get("result")
            text = result if isinstance(result, str) or result is None else _json_text(result)
            if text:
                results[agent_id] = text[:_MAX_TEXT]
    return {a: JournalResult(labels.get(a), text) for a, text in results.items()}


def _json_text(value: object, separators: tuple[str, str] | None = None) -> str | None:
    """``value`` as JSON text (``json.dumps``'s ``separators``); ``None`` when it has none."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=separators)
    except (TypeError, ValueError, RecursionError):
        return None


def workflow_result(output_file: Path) -> str | None:
    """A workflow's result from its task's output file, as the CLI quotes it in the lead's
    notification: a string as it is, any other value as compact JSON (``JSON.stringify``).

    ``None`` when the file is missing, empty (the script threw), over 64 MB, not JSON, or
    holds no result.
    """
    try:
        data = read_regular(Path(output_file), _MAX_OUTPUT_BYTES)
        record = loads(data) if data.strip() else None
    except (FileProblem, ValueError):
        return None
    if not isinstance(record, Mapping) or record.get("result") is None:
        return None
    result = record["result"]
    return result if isinstance(result, str) else _json_text(result, (",", ":"))
