"""The experiment's ``--out`` directory: one run at a time, and the run id kept there.

Trial session ids must be unique per run, or runs that share a Claude config dir resume
each other's sessions; they must also be stable across resumes of the same ``--out``, so a
rerun still skips finished trials. :class:`OutDir` keeps a random run id in
``DIR/run.json`` (made once, read on every rerun) and holds an exclusive ``flock`` on
``DIR/.lock`` while a run appends to ``trials.jsonl``, so a second concurrent run on the same
directory stops with one line instead of duplicating every trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from types import TracebackType

from ...errors import UsageError

__all__ = ["OutDir", "make_out_dir"]

_RUN_FILE = "run.json"
_LOCK_FILE = ".lock"
_RUN_VERSION = 1

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no advisory lock, the run still works
    fcntl = None  # type: ignore[assignment]


def make_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` (and parents), or raise :class:`UsageError` naming why not."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {out_dir}: {exc.strerror or exc}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write to --out {out_dir}: permission denied")


def _read_run_id(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


class OutDir:
    """Hold ``out_dir`` for one run: ``with OutDir(path) as run_id: ...``.

    Raises (on enter):
        UsageError: the directory cannot be written, or another run holds it.
    """

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir)
        self._fd: int | None = None

    def __enter__(self) -> str:
        make_out_dir(self.path)
        lock = self.path / _LOCK_FILE
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise UsageError(f"cannot write to --out {self.path}: {exc.strerror or exc}") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                who = f" (pid {holder})" if holder.isdigit() else ""
                raise UsageError(
                    f"--out {self.path} is in use by another `experiment run`{who}; "
                    "wait for it or use another directory"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        try:
            return self._run_id()
        except BaseException:
            self._release()
            raise

    def _run_id(self) -> str:
        path = self.path / _RUN_FILE
        run_id = _read_run_id(path)
        if run_id is None:
            run_id = uuid.uuid4().hex
            tmp = path.with_name(f".{_RUN_FILE}.{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps({"version": _RUN_VERSION, "run_id": run_id}) + "\n")
                tmp.replace(path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise UsageError(
                    f"cannot write to --out {self.path}: {exc.strerror or exc}"
                ) from None
        return run_id

    def _release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()
