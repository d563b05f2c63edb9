"""The run history: one record file per finished run, kept within a count and a size.

Each record is ``<ended>-<run>.json`` (its end time in UTC, so the names sort by age),
mode 0600 in a private directory (:func:`~teamlead._private.private_dir`); an agent's long
result is a file of its own beside it, ``<ended>-<run>.<n>.txt``. After each record is
added the oldest go, until at most ``max_runs`` remain within ``max_bytes`` (the newest
always stays). A record is read as data anyone with this user's rights could have
written: at most :data:`MAX_RECORD_BYTES`, and a file that is not a record is skipped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._private import named_dir, private_dir, read_small, write_private
from .._redact import replace_surrogates
from ..clock import SYSTEM_CLOCK
from ..errors import AmbiguousRun, NoSuchRun
from .record import INLINE_RESULT_CHARS, AgentRecord, RunRecord

__all__ = ["History", "history_dir", "history_wanted"]

#: Where the history is kept, when set.
HISTORY_DIR_VAR = "TEAMLEAD_HISTORY_DIR"
#: ``1`` (``true``, ``yes``, ``on``): no run is recorded.
NO_HISTORY_VAR = "TEAMLEAD_NO_HISTORY"
_TRUE = frozenset({"1", "true", "yes", "on"})

#: How many runs the history keeps, when set (else :data:`DEFAULT_MAX_RUNS`).
MAX_RUNS_VAR = "TEAMLEAD_HISTORY_MAX_RUNS"
#: How many megabytes the history fills at most, when set (else 200).
MAX_BYTES_VAR = "TEAMLEAD_HISTORY_MAX_MB"
DEFAULT_MAX_RUNS = 1000
DEFAULT_MAX_BYTES = 200 * 1024 * 1024
#: The largest record file read; a larger one is not a record of ours.
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: The agents' prompts and results kept inside one record at most (characters); past it,
#: results go to files beside it and prompts are cut short.
_INLINE_BUDGET = 2 * 1024 * 1024
#: An agent's prompt is kept up to this many characters (this few past the budget).
_AGENT_PROMPT_CHARS = 8000
_SHORT_CHARS = 300
#: The run's prompt and answer are kept up to this many characters each.
_RUN_TEXT_CHARS = 1024 * 1024
#: The largest result file read back.
_MAX_RESULT_BYTES = 64 * 1024 * 1024
_RECORD = re.compile(r"(\d{8}T\d{6}Z)-([0-9a-f]{12})\.json")
_RESULT = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{12}\.\d+\.txt")


class History:
    """This user's run history (see the module docstring).

    Args:
        root: the directory; default :func:`history_dir` of ``env``, read at
            each use (so a test's environment decides where its runs are recorded).
        env: the environment the directory and the bounds are read from (default: this
            process's).
        max_runs: keep at most this many runs (default: ``TEAMLEAD_HISTORY_MAX_RUNS``, else
            1000).
        max_bytes: keep at most this many bytes of records and results (default:
            ``TEAMLEAD_HISTORY_MAX_MB``, else 200 MB).
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        max_runs: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._root = root
        self._env = env
        self._max_runs = max_runs
        self._max_bytes = max_bytes
        #: the records read so far, by folder and file name (``teamlead view`` reads the
        #: history every second: each record is parsed once)
        self._parsed: dict[tuple[Path, str], RunRecord] = {}

    @property
    def directory(self) -> Path:
        """Where the records are (made when the first one is added)."""
        return self._root if self._root is not None else history_dir(self._env)

    @property
    def max_runs(self) -> int:
        """How many runs are kept at most."""
        return self._max_runs or _bound(self._env, MAX_RUNS_VAR, DEFAULT_MAX_RUNS)

    @property
    def max_bytes(self) -> int:
        """How many bytes the records and their results fill at most."""
        if self._max_bytes is not None:
            return self._max_bytes
        return _bound(self._env, MAX_BYTES_VAR, DEFAULT_MAX_BYTES // 2**20) * 2**20

    def add(self, record: RunRecord) -> Path:
        """Write ``record`` (its long results to files beside it, its texts cut so that
        it stays well under :data:`MAX_RECORD_BYTES`), then prune the oldest runs beyond
        the bounds; returns the record's file.

        Raises:
            PermissionError: the directory is refused (another user's, open to others).
            OSError: it cannot be written (a full disk, no rights).
        """
        folder = private_dir(self.directory)
        ended = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(record.ended or SYSTEM_CLOCK.time()))
        stem = f"{ended}-{record.run}"
        agents, budget = [], _INLINE_BUDGET
        for index, agent in enumerate(record.agents):
            prompt = _cut(agent.prompt, _AGENT_PROMPT_CHARS if budget > 0 else _SHORT_CHARS)
            budget -= len(prompt or "")
            update: dict[str, object] = {"prompt": prompt}
            text = agent.result
            if text is not None and (len(text) > INLINE_RESULT_CHARS or len(text) > budget):
                name = f"{stem}.{index}.txt"
                write_private(folder / name, replace_surrogates(text))
                update.update(result=None, result_ref=name)
            elif text is not None:
                budget -= len(text)
            agents.append(agent.model_copy(update=update))
        path = folder / f"{stem}.json"
        kept = record.model_copy(
            update={
                "agents": agents,
                "prompt": _cut(record.prompt, _RUN_TEXT_CHARS),
                "result": _cut(record.result, _RUN_TEXT_CHARS),
            }
        )
        data = _writable(kept.model_dump(mode="json"))
        write_private(path, json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.prune()
        return path

    def prune(self) -> None:
        """Remove the oldest runs (their records and result files) beyond the bounds."""
        folder = self.directory
        try:
            names = [p.name for p in folder.iterdir()]
        except OSError:
            return
        runs: dict[str, list[Path]] = {}
        for name in names:
            stem = name.split(".", 1)[0]
            if _RECORD.fullmatch(f"{stem}.json"):
                runs.setdefault(stem, []).append(folder / name)
        order = sorted(runs)
        sizes = {stem: sum(_size(p) for p in runs[stem]) for stem in order}
        total, count = sum(sizes.values()), len(order)
        for stem in order[:-1]:  # the newest stays, however large
            if count <= self.max_runs and total <= self.max_bytes:
                break
            for path in sorted(runs[stem], key=lambda p: p.suffix == ".json"):
                with contextlib.suppress(OSError):
                    path.unlink()  # its results first, the record last
            total -= sizes[stem]
            count -= 1

    def records(self, limit: int | None = None) -> list[RunRecord]:
        """Every run kept (the newest ``limit`` when given), newest first; a file that is
        not a record is skipped."""
        folder = self.directory
        try:
            names = sorted((p.name for p in folder.iterdir()), reverse=True)
        except OSError:  # no history yet
            return []
        parsed, self._parsed = self._parsed, {}
        found: list[RunRecord] = []
        for name in names:
            if limit is not None and len(found) >= limit:
                break
            match = _RECORD.fullmatch(name)
            if match is None:
                continue
            record = parsed.get((folder, name))
            if record is None:
                raw = read_small(folder / name, MAX_RECORD_BYTES)
                record = _parse(raw) if raw is not None else None
            if record is not None and record.run == match.group(2):
                self._parsed[(folder, name)] = record  # a record's file is written once
                found.append(record)
        return found

    def find(self, ref: str) -> RunRecord:
        """The past run ``ref`` names: its run id, its session id, or a unique prefix of
        either (an exact id wins over prefixes; of runs that share a session, the newest).

        Raises:
            NoSuchRun: no run kept is named so.
            AmbiguousRun: ``ref`` is a prefix of several runs' ids.
        """
        wanted = ref.strip().lower()
        kept = self.records()
        exact = [r for r in kept if wanted and wanted in (r.run, (r.session_id or "").lower())]
        found = exact[:1] or [r for r in kept if r.matches(wanted)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            runs = list(dict.fromkeys(r.run for r in found))
            if len({r.session_id for r in found}) == 1 and not runs[0].startswith(wanted):
                return found[0]  # one session's runs: its newest
            raise AmbiguousRun(ref, runs)
        raise NoSuchRun(
            f"no run {ref!r} in the history (see `teamlead ps --all`)", ref=ref, why="none"
        )

    def result_of(self, agent: AgentRecord) -> str | None:
        """``agent``'s whole result: in its record, or read from the file beside it
        (``None`` when it has none, or its file is gone)."""
        if agent.result is not None or agent.result_ref is None:
            return agent.result
        if not _RESULT.fullmatch(agent.result_ref):  # a name of the record's choosing only
            return None
        raw = read_small(self.directory / agent.result_ref, _MAX_RESULT_BYTES)
        return None if raw is None else raw.decode("utf-8", "replace")


def history_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory this user's run history is kept in (not made): ``TEAMLEAD_HISTORY_DIR``
    when set, else ``teamlead/history`` under ``XDG_DATA_HOME`` when that is an absolute
    path, else ``~/.local/share/teamlead/history``.

    Example:
        >>> history_dir({"TEAMLEAD_HISTORY_DIR": "/tmp/h"})
        PosixPath('/tmp/h')
        >>> history_dir({"XDG_DATA_HOME": "/d", "HOME": "/home/u"})
        PosixPath('/d/teamlead/history')
        >>> history_dir({"HOME": "/home/u"})
        PosixPath('/home/u/.local/share/teamlead/history')
    """
    env = os.environ if env is None else env
    named = named_dir(env, HISTORY_DIR_VAR, "XDG_DATA_HOME", "teamlead/history")
    if named is not None:
        return named
    home = (env.get("HOME") or "").strip()
    return (Path(home) if home else Path.home()) / ".local" / "share" / "teamlead" / "history"


def history_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether runs are recorded (they are unless ``TEAMLEAD_NO_HISTORY`` is set)."""
    env = os.environ if env is None else env
    return (env.get(NO_HISTORY_VAR) or "").strip().lower() not in _TRUE


def _parse(raw: bytes) -> RunRecord | None:
    """The record in ``raw``, or ``None``: not a JSON object, strictly (``NaN``,
    ``Infinity`` and a number past a float, which Python would read, are not JSON, and
    ``ps --all --json`` would print them back), or not a record."""
    try:
        data = json.loads(raw, parse_constant=_not_finite, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return RunRecord.model_validate(data)
    except ValidationError:
        return None


def _writable(value: Any) -> Any:
    """A record's JSON value as a file holds it: a lone surrogate in a string (half a pair,
    as a cut made in JavaScript leaves it, which no UTF-8 file can hold) as U+FFFD, and a
    number that is no JSON (``nan``, ``inf``) as ``null``, as pydantic writes it."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_writable(k): _writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_writable(item) for item in value]
    return value


def _not_finite(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a float")
    return value


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} characters cut …]"


def _bound(env: Mapping[str, str] | None, name: str, default: int) -> int:
    """The positive whole number in variable ``name``, else ``default``."""
    raw = ((os.environ if env is None else env).get(name) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        return default
    return value if value > 0 else default


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0
