"""Trial records: one versioned JSON line per finished trial, in an append-only file.

A crash can leave at most a torn last line; the reader reports it (with its line
number) and keeps every other record, and the writer starts the next record on a fresh
line. Readers accept every version up to :data:`RECORD_VERSION`.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "trials.jsonl"
    >>> record = TrialRecord(variant="a", task="t1", trial=0, status="completed", wall_s=3.0)
    >>> with TrialWriter(path) as writer:
    ...     writer.append(record)
    >>> read_records(path).records == [record]
    True
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...errors import UsageError

__all__ = [
    "RECORD_VERSION",
    "CommandRun",
    "ReadResult",
    "RecordWarning",
    "TrialKey",
    "TrialRecord",
    "TrialStatus",
    "TrialWriter",
    "append_record",
    "finished_among",
    "finished_keys",
    "isolation_notes",
    "latest_records",
    "read_records",
]

RECORD_VERSION = 2
"""The version this teamlead writes. Bump it, and add a migration, when a field changes
meaning or is renamed; adding an optional field needs no bump. 2: a lead that ran a
``Workflow`` delegated, and one whose workflow ran two agents at once ran in parallel
(``workflow_agents``, ``workflow_agents_at_once``, ``workflow_agents_lost``,
``workflow_agents_cached`` and ``agents_at_once`` added; a version 1 record reads with
them 0, which is what it measured)."""

TrialStatus = Literal["completed", "partial", "failed"]


class CommandRun(BaseModel):
    """What one command did. ``exit_code`` is None when it timed out or could not start."""

    model_config = ConfigDict(frozen=True)

    argv: list[str]
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    error: str | None = None
    output_file: str | None = None
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.exit_code == 0

    def describe(self) -> str:
        """One line for a failure: exit status, timeout or start error."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s"
        return f"exit status {self.exit_code}"


class TrialKey(NamedTuple):
    """Identifies one trial: a variant run on a task, the ``trial``-th time (0-based)."""

    variant: str
    task: str
    trial: int


class TrialRecord(BaseModel):
    """What one trial did, and where it came from.

    Delegation fields come from the lead's Agent tool calls and its workflows:
    ``delegated`` means at least one Agent call or one workflow agent, ``parallel`` means
    at least two Agent calls in one API message (grouped by message id) or two workflow
    agents running at once, and both must agree with the counts.

    Agent fields come from ``Finished.tasks`` and the relay's timings: ``workflow_agents``
    is the workflow agents the lead's workflows started (those replayed from the journal
    included), ``workflow_agents_at_once`` the most of them with a request in flight or
    between requests at one time, ``workflow_agents_lost`` those that ended in error or
    never finished, ``workflow_agents_cached`` those replayed from the run's journal
    (no request sent), ``agents_at_once`` the most agents of every kind (Agent-tool and
    workflow) at one time. Without the relay the timings are unknown and the at-once
    counts are 0. ``error_class`` says why a trial failed:
    ``"infrastructure"`` (the harness, network or API, not the prompt's doing: such
    trials are rerun on resume and left out of the statistics) or ``"model"`` (the model
    misbehaved, which counts against the variant); other strings are allowed.

    Workspace fields: ``workspace`` is the kind (``worktree``, ``copy``, ``shared``),
    ``workspace_setup_s`` the time to make it, ``workspace_path`` where it was kept
    (``--keep-workspaces`` only), ``git_sha``/``git_dirty`` the repository's commit and
    whether it had uncommitted changes, ``skipped_links`` the symbolic links a copy left
    out (they pointed outside). ``setup`` and ``check`` are the commands' runs;
    ``passed`` is the check's verdict (None without a check).

    Grading: ``grade`` is the grader's score (0..1) and ``grader_cost_usd`` its cost, both
    None when no grade came back; then ``grader_error`` says why (the call failed, or the
    reply had no score). ``scripted_model`` is True when the answers came from teamlead's
    scripted model server (offline), False when from a real one, None in records written
    before it was recorded.

    Unknown fields (from a newer writer) are kept, not dropped. NaN and infinite numbers
    are rejected: no statistic can use them.
    """

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    version: int = RECORD_VERSION
    variant: str = Field(min_length=1)
    task: str = Field(min_length=1)
    trial: int = Field(ge=0)
    status: TrialStatus
    error_class: str | None = None
    retried: bool = False
    attempts: int = Field(default=1, ge=1)

    delegated: bool = False
    agent_calls: int = Field(default=0, ge=0)
    max_agent_calls_per_message: int = Field(default=0, ge=0)
    parallel: bool = False
    time_to_first_agent_s: float | None = Field(default=None, ge=0)
    workflow_agents: int = Field(default=0, ge=0)
    workflow_agents_at_once: int = Field(default=0, ge=0)
    workflow_agents_lost: int = Field(default=0, ge=0)
    workflow_agents_cached: int = Field(default=0, ge=0)
    agents_at_once: int = Field(default=0, ge=0)

    wall_s: float = Field(ge=0)
    turns: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    resumes: int = Field(default=0, ge=0)

    final_text: str = ""
    grade: float | None = None
    grader_cost_usd: float | None = Field(default=None, ge=0)
    grader_error: str | None = None

    prompt_name: str | None = None
    prompt_version: str | None = None
    prompt_sha256: str | None = None
    prompt_source: str | None = None
    model: str | None = None
    sdk_version: str | None = None
    cli_version: str | None = None
    teamlead_version: str | None = None
    git_sha: str | None = None
    started_at: datetime | None = None
    scripted_model: bool | None = None

    passed: bool | None = None
    git_dirty: bool | None = None
    workspace: str | None = None
    workspace_setup_s: float | None = Field(default=None, ge=0)
    workspace_path: str | None = None
    skipped_links: list[str] = Field(default_factory=list)
    setup: CommandRun | None = None
    check: CommandRun | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrialRecord:
        if self.delegated != (self.agent_calls > 0 or self.workflow_agents > 0):
            raise ValueError(
                "delegated must be true exactly when agent_calls > 0 or workflow_agents > 0"
            )
        if self.max_agent_calls_per_message > self.agent_calls:
            raise ValueError("max_agent_calls_per_message exceeds agent_calls")
        if self.parallel != (
            self.max_agent_calls_per_message >= 2 or self.workflow_agents_at_once >= 2
        ):
            raise ValueError(
                "parallel must be true exactly when max_agent_calls_per_message >= 2 or "
                "workflow_agents_at_once >= 2"
            )
        if self.agent_calls and self.max_agent_calls_per_message < 1:
            raise ValueError("a trial with Agent calls has max_agent_calls_per_message >= 1")
        workflow = (
            self.workflow_agents_at_once,
            self.workflow_agents_lost,
            self.workflow_agents_cached,
        )
        if any(count > self.workflow_agents for count in workflow):
            raise ValueError("a workflow agent count exceeds workflow_agents")
        if self.workflow_agents_at_once > self.agents_at_once:
            raise ValueError("workflow_agents_at_once exceeds agents_at_once")
        if self.time_to_first_agent_s is not None and not self.delegated:
            raise ValueError("time_to_first_agent_s is set but the trial did not delegate")
        if self.version > RECORD_VERSION:
            raise ValueError(
                f"record version {self.version} is newer than this teamlead reads "
                f"({RECORD_VERSION}); upgrade teamlead"
            )
        return self

    @property
    def key(self) -> TrialKey:
        """The (variant, task, trial) key."""
        return TrialKey(self.variant, self.task, self.trial)

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def infrastructure_failure(self) -> bool:
        """A failure that says nothing about the prompt: rerun it, don't analyse it."""
        return self.status == "failed" and self.error_class == "infrastructure"

    def to_json_line(self) -> str:
        """The record as one line of JSON (no trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False, sort_keys=False)


class RecordWarning(NamedTuple):
    """A line the reader skipped, and why (``line`` is 1-based)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class ReadResult(NamedTuple):
    """The records read, in file order, and the lines skipped."""

    records: list[TrialRecord]
    warnings: list[RecordWarning]


def _from_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 counted no workflow agents: its delegation fields mean the same in 2."""
    return dict(raw)


# Upgrades a raw record of version N (the key) to version N + 1; the reader applies them
# in order.
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}


def _upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    version = raw.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"bad version {version!r}")
    while version < RECORD_VERSION:
        raw = _MIGRATIONS[version](raw)
        version += 1
        raw["version"] = version
    return raw


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _float_sized(text: str) -> int:
    """An integer the statistics can take as a float (they raise OverflowError beyond)."""
    value = int(text)
    if abs(value) > sys.float_info.max:
        raise ValueError(f"{text[:20]}... ({len(text)} digits) is too large for a float")
    return value


def read_records(path: str | Path, *, missing_ok: bool = False) -> ReadResult:
    """Read a ``trials.jsonl`` file, skipping (and reporting) lines that don't parse.

    A torn or hand-edited line never costs the other records. Blank lines are ignored. A
    line with ``NaN`` or ``Infinity`` (JSON extensions Python accepts) is rejected with its
    line number, as is a value too large for a float.

    Args:
        path: the file.
        missing_ok: return an empty result for a missing file instead of raising.

    Raises:
        UsageError: the file is missing (unless ``missing_ok``) or unreadable.

    Example:
        >>> result = read_records("out/trials.jsonl", missing_ok=True)  # doctest: +SKIP
        >>> for warning in result.warnings:  # doctest: +SKIP
        ...     print(warning)
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return ReadResult([], [])
        raise UsageError(f"trials file not found: {file}") from None
    except OSError as exc:
        raise UsageError(f"cannot read trials file {file}: {exc}") from None
    records: list[TrialRecord] = []
    warnings: list[RecordWarning] = []
    for number, raw_line in enumerate(data.split(b"\n"), start=1):
        if not raw_line.strip():
            continue
        try:
            # RecursionError: caught below
            raw = json.loads(
                raw_line.decode("utf-8"), parse_constant=_no_constant, parse_int=_float_sized
            )
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            records.append(TrialRecord.model_validate(_upgrade(raw)))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problem = first["msg"].removeprefix("Value error, ")
            warnings.append(RecordWarning(number, f"{where}: {problem}" if where else problem))
        except (ValueError, UnicodeDecodeError, KeyError) as exc:
            warnings.append(RecordWarning(number, f"not a trial record: {exc}"))
        except RecursionError:  # 100,000 nested arrays: a malformed line like any other
            warnings.append(RecordWarning(number, "not a trial record: JSON nested too deeply"))
    return ReadResult(records, warnings)


def latest_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """One record per key, the last one written winning (a rerun replaces its trial)."""
    by_key: dict[TrialKey, TrialRecord] = {}
    for record in records:
        by_key.pop(record.key, None)
        by_key[record.key] = record
    return list(by_key.values())


def finished_keys(path: str | Path, *, retry_infrastructure: bool = True) -> set[TrialKey]:
    """The trials a resumed run can skip.

    A trial counts as finished once its latest record is written, except an
    infrastructure failure when ``retry_infrastructure`` is set: that one says nothing
    about the prompt, so it runs again. A missing file means nothing is finished.

    Example:
        >>> done = finished_keys("out/trials.jsonl")  # doctest: +SKIP
        >>> todo = [k for k in spec.trial_keys() if k not in done]  # doctest: +SKIP
    """
    records = read_records(path, missing_ok=True).records
    return finished_among(records, retry_infrastructure=retry_infrastructure)


def finished_among(
    records: Iterable[TrialRecord], *, retry_infrastructure: bool = True
) -> set[TrialKey]:
    """:func:`finished_keys` of records already read."""
    latest = latest_records(records)
    return {r.key for r in latest if not (retry_infrastructure and r.infrastructure_failure)}


class TrialWriter:
    """Appends records to a JSONL file, one line each, flushed and fsynced.

    Thread-safe; each record is one ``write`` call. If the file ends in a torn line (a
    crash mid-write), the next record starts on a new line so it stays readable. In
    async code, call :meth:`append` through ``anyio.to_thread.run_sync``: fsync blocks.

    Example:
        >>> with TrialWriter("out/trials.jsonl") as writer:  # doctest: +SKIP
        ...     writer.append(record)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torn = False
            if self.path.exists() and self.path.stat().st_size > 0:
                with self.path.open("rb") as existing:
                    existing.seek(-1, os.SEEK_END)
                    torn = existing.read(1) != b"\n"
            self._file = self.path.open("a", encoding="utf-8")
            if torn:
                self._file.write("\n")
        return self._file

    def append(self, record: TrialRecord) -> None:
        """Write one record durably (the line is on disk when this returns)."""
        line = record.to_json_line() + "\n"
        with self._lock:
            file = self._open()
            file.write(line)
            file.flush()
            os.fsync(file.fileno())

    def close(self) -> None:
        """Close the file; a later :meth:`append` reopens it."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TrialWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def append_record(path: str | Path, record: TrialRecord) -> None:
    """Append one record durably; opens and closes the file (see :class:`TrialWriter`)."""
    with TrialWriter(path) as writer:
        writer.append(record)


def isolation_notes(records: Sequence[TrialRecord]) -> list[str]:
    """Notes for a report on how ``records`` were isolated: trials that shared one
    directory, worktrees made from a repository with uncommitted changes."""
    notes: list[str] = []
    if shared := sum(r.workspace == "shared" for r in records):
        notes.append(
            f"{shared} trial(s) ran in one shared directory (workspace = 'shared'): "
            "they could see each other's edits"
        )
    if dirty := sum(bool(r.git_dirty) and r.workspace == "worktree" for r in records):
        notes.append(
            f"{dirty} worktree trial(s) started from a repository with uncommitted changes, "
            "which their worktrees did not have"
        )
    return notes
