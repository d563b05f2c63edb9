"""A private workspace per trial: a git worktree, a copy, or (opt-in) the shared directory.

Trials edit files and run commands, and they run concurrently, so each one gets its own
directory, created where the trial runs and removed afterwards (``keep=True`` keeps it
for debugging):

- ``worktree``: a detached ``git worktree`` of the repository's current commit, the
  default when the directory is inside a git repository. Uncommitted changes are not
  in it; the record's ``git_dirty`` flag says there were some. Git hooks are off while
  it is added, so nothing of the user's runs.
- ``copy``: a copy of the directory, the default elsewhere. Symbolic links are copied as
  links when they point inside the directory and left out when they point outside it,
  so nothing outside is copied or reachable through the copy.
- ``shared``: the directory itself, for read-only tasks; trials see each other's edits.

Every trial also gets its own Claude config dir (``CLAUDE_CONFIG_DIR``), so session ids
and transcripts never collide across trials or runs.

The user's working tree, index and refs are never written. A worktree registers itself
under ``.git/worktrees`` while it exists; it is removed even when the trial fails or is
cancelled, and worktrees left by a killed run (their process is gone) are removed the
next time this process adds one to the same repository. Kept worktrees are locked
(``git worktree lock``), so no later run removes them; ``git worktree remove --force
--force PATH`` does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil

from ...errors import UsageError
from ..specs.steps import WorkspaceKind

__all__ = [
    "RepoState",
    "Workspace",
    "WorkspaceError",
    "WorkspaceKind",
    "Workspaces",
    "copy_tree",
    "reap_stale_worktrees",
    "repo_state",
]

_PREFIX = "teamlead-ws-"
_OURS = re.compile(rf"/{re.escape(_PREFIX)}(\d+)-[^/]+/repo$")
_GIT_TIMEOUT_S = 300.0
# Files of the user's Claude config dir a fresh per-trial one needs to log in the same way.
_CONFIG_FILES = (".credentials.json", "settings.json")
_KEPT = "kept by teamlead --keep-workspaces"
_KEY_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


class WorkspaceError(RuntimeError):
    """A workspace could not be made (git failed, the disk is full, ...)."""


@dataclass(frozen=True)
class RepoState:
    """Where a directory sits in git: the top level, the commit and whether it is dirty."""

    root: Path
    subdir: Path
    commit: str | None
    dirty: bool


@dataclass
class Workspace:
    """One trial's directories. ``cwd`` is where the CLI, setup and check run."""

    kind: WorkspaceKind
    cwd: Path
    config_dir: Path
    root: Path
    setup_s: float
    commit: str | None = None
    dirty: bool | None = None
    repo: Path | None = None
    skipped_links: list[str] = field(default_factory=list)


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # --no-optional-locks: `git status` must not refresh the user's index.
    return subprocess.run(
        ["git", "--no-optional-locks", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=_GIT_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def repo_state(path: Path, *, ignore: Iterable[Path] = ()) -> RepoState | None:
    """The git state of ``path``, or None when it is not inside a work tree (or git is missing).

    Changes under ``ignore`` (the run's own output directory, say) don't make it dirty.
    """
    try:
        top = _git(["rev-parse", "--show-toplevel"], path)
        if top.returncode != 0 or not top.stdout.strip():
            return None
        root = Path(top.stdout.strip()).resolve()
        head = _git(["rev-parse", "--verify", "-q", "HEAD"], root)
        skip = [
            f":(exclude,top){p.resolve().relative_to(root).as_posix()}"
            for p in ignore
            if _inside(p.resolve(), root) and p.resolve() != root
        ]
        status = _git(["status", "--porcelain", "--", ":/", *skip], root)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip() if head.returncode == 0 else None
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return RepoState(root, path.resolve().relative_to(root), commit or None, dirty)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def copy_tree(source: Path, target: Path, *, exclude: Iterable[Path] = ()) -> list[str]:
    """Copy ``source`` to the new directory ``target`` without following symbolic links.

    A link that resolves inside ``source`` is recreated as a link (an absolute one made
    relative, so it points into the copy); one that resolves outside, or dangles out, is
    left out. Sockets and FIFOs are left out too. Directories in ``exclude`` (an output
    directory inside ``source``, say) are not copied.

    Returns:
        the links left out, relative to ``source``.
    """
    source = source.resolve()
    skipped_dirs = {p.resolve() for p in exclude}
    skipped: list[str] = []
    target.mkdir(parents=True)

    def walk(src: Path, dst: Path) -> None:
        with os.scandir(src) as entries:
            for entry in entries:
                here, there = Path(entry.path), dst / entry.name
                if entry.is_symlink():
                    link = here.readlink()
                    resolved = (here.parent / link).resolve()
                    if not _inside(resolved, source):
                        skipped.append(str(here.relative_to(source)))
                        continue
                    if link.is_absolute():
                        link = Path(os.path.relpath(resolved, here.parent))
                    there.symlink_to(link)
                elif entry.is_dir(follow_symlinks=False):
                    if here in skipped_dirs:
                        continue
                    there.mkdir()
                    walk(here, there)
                elif entry.is_file(follow_symlinks=False):
                    shutil.copy2(here, there, follow_symlinks=False)

    walk(source, target)
    shutil.copystat(source, target)
    return skipped


class Workspaces:
    """Makes and removes trial workspaces for one experiment run.

    Args:
        keep: leave every workspace on disk (its path goes into the record).
        exclude: directories a copy leaves out (the run's output directory).
        base_dir: where workspaces go (default: the system temp dir).
    """

    def __init__(
        self, *, keep: bool = False, exclude: Iterable[Path] = (), base_dir: Path | None = None
    ) -> None:
        self.keep = keep
        self._exclude = list(exclude)
        self._base_dir = base_dir
        self._states: dict[Path, RepoState | None] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()
        self._admin_made: set[Path] = set()
        self._live: dict[Path, int] = {}
        self._reaped: set[Path] = set()

    def state(self, source: Path) -> RepoState | None:
        """The git state of ``source``, looked up once per run."""
        source = source.resolve()
        with self._guard:
            if source not in self._states:
                self._states[source] = repo_state(source, ignore=self._exclude)
            return self._states[source]

    def kind_for(self, source: Path, kind: WorkspaceKind | None) -> WorkspaceKind:
        """``kind``, or the default: ``worktree`` inside a git repository with a commit."""
        if kind is not None:
            return kind
        state = self.state(source)
        return "worktree" if state is not None and state.commit else "copy"

    def check(self, source: Path, kind: WorkspaceKind | None) -> None:
        """Fail early, with one line, when no workspace of ``kind`` can come from ``source``.

        Raises:
            UsageError: ``source`` is not a directory, or ``worktree`` is asked for where
                there is no git repository with a commit.
        """
        if not source.is_dir():
            raise UsageError(f"the experiment's cwd is not a directory: {source}")
        state = self.state(source)
        if kind == "worktree" and (state is None or state.commit is None):
            raise UsageError(
                f"workspace = 'worktree' needs a git repository with a commit: {source}"
            )
        if self.kind_for(source, kind) == "worktree" and state is not None:
            self._check_subdir(source, state)

    def _check_subdir(self, source: Path, state: RepoState) -> None:
        if state.subdir == Path():
            return
        found = _git(["cat-file", "-e", f"{state.commit}:{state.subdir.as_posix()}"], state.root)
        if found.returncode != 0:
            raise UsageError(
                f"{source} is not in the repository's last commit, so a worktree would "
                "not have it; commit it or use workspace = 'copy'"
            )

    @contextlib.asynccontextmanager
    async def open(
        self, source: Path, kind: WorkspaceKind | None, env: Mapping[str, str]
    ) -> AsyncIterator[Workspace]:
        """A workspace for one trial, removed on exit (also on error and cancellation).

        Raises:
            UsageError: see :meth:`check`.
            WorkspaceError: git or the file system failed.
        """
        self.check(source, kind)
        resolved = self.kind_for(source, kind)
        # Shielded: a workspace made while the run is being cancelled must still be removed.
        with anyio.CancelScope(shield=True):
            workspace = await anyio.to_thread.run_sync(self._create, source, resolved, env)
        try:
            yield workspace
        finally:
            if not self.keep:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._remove, workspace)

    def _create(self, source: Path, kind: WorkspaceKind, env: Mapping[str, str]) -> Workspace:
        state = self.state(source)
        try:
            if self._base_dir is not None:
                self._base_dir.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=self._base_dir))
        except OSError as exc:
            raise WorkspaceError(f"cannot make a workspace directory: {exc}") from exc
        start = time.monotonic()
        try:
            config = root / "claude"
            config.mkdir()
            _seed_config(config, env)
            skipped: list[str] = []
            if kind == "shared":
                cwd = source.resolve()
            elif kind == "worktree" and state is not None:
                self._add_worktree(state, root / "repo")
                cwd = root / "repo" / state.subdir
            else:
                skipped = copy_tree(source, root / "repo", exclude=self._exclude)
                cwd = root / "repo"
        except (OSError, subprocess.SubprocessError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise WorkspaceError(f"{kind}: {exc}") from exc
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return Workspace(
            kind=kind,
            cwd=cwd,
            config_dir=config,
            root=root,
            setup_s=time.monotonic() - start,
            commit=state.commit if state else None,
            dirty=state.dirty if state else None,
            repo=state.root if state else None,
            skipped_links=skipped,
        )

    def _lock(self, repo: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(repo, threading.Lock())

    def _add_worktree(self, state: RepoState, path: Path) -> None:
        repo = state.root
        admin = _common_dir(repo) / "worktrees"
        with self._lock(repo):
            if repo not in self._reaped:
                self._reaped.add(repo)
                reap_stale_worktrees(repo)
            if not admin.exists():
                self._admin_made.add(repo)
            self._live[repo] = self._live.get(repo, 0) + 1
            # git reads every admin entry while it adds one, so adds must not overlap (a
            # half-written entry fails the other add); without a checkout it is quick.
            args = ["-c", "core.hooksPath=/dev/null", "worktree", "add", "--detach"]
            done = _git([*args, "--no-checkout", "--quiet", str(path), str(state.commit)], repo)
            if done.returncode == 0 and self.keep:  # kept on purpose: no later run reaps it
                _git(["worktree", "lock", "--reason", _KEPT, str(path)], repo)
        if done.returncode == 0:
            # The checkout, in parallel: it writes only this worktree's index and files.
            done = _git(["-c", "core.hooksPath=/dev/null", "reset", "--hard", "--quiet"], path)
        if done.returncode != 0:
            with self._lock(repo):
                _drop_worktree(repo, path)
            self._release(repo)
            raise WorkspaceError(f"git worktree add failed: {done.stderr.strip()}")

    def _release(self, repo: Path) -> None:
        with self._lock(repo):
            self._live[repo] -= 1
            # `git worktree add` made .git/worktrees: leave the repository as it was found.
            if self._live[repo] == 0 and repo in self._admin_made:
                with contextlib.suppress(OSError):
                    (_common_dir(repo) / "worktrees").rmdir()

    def _remove(self, workspace: Workspace) -> None:
        repo = workspace.repo
        if workspace.kind == "worktree" and repo is not None:
            shutil.rmtree(workspace.root / "repo", ignore_errors=True)  # in parallel
            with self._lock(repo):
                _forget_worktree(repo, workspace.root / "repo")
            self._release(repo)
        shutil.rmtree(workspace.root, ignore_errors=True)


def _common_dir(repo: Path) -> Path:
    done = _git(["rev-parse", "--git-common-dir"], repo)
    return (repo / done.stdout.strip()).resolve()


def _forget_worktree(repo: Path, path: Path) -> None:
    """Delete the admin entry (``.git/worktrees/NAME``) of the worktree at ``path``.

    What ``git worktree remove`` does after deleting the files, without git: the
    directory may already be gone, and no git process reads a half-removed entry.
    """
    admin = _common_dir(repo) / "worktrees"
    if admin.is_dir():
        wanted = str(path / ".git")
        for entry in admin.iterdir():
            with contextlib.suppress(OSError):
                if (entry / "gitdir").read_text().strip() == wanted:
                    shutil.rmtree(entry, ignore_errors=True)


def _drop_worktree(repo: Path, path: Path) -> None:
    """Delete one worktree's files and unregister it (call with the repository's lock)."""
    shutil.rmtree(path, ignore_errors=True)
    _forget_worktree(repo, path)


def reap_stale_worktrees(repo: Path) -> list[Path]:
    """Remove the worktrees a killed teamlead run left in ``repo``; returns their paths.

    Only unlocked worktrees at a teamlead workspace path whose process is gone are touched;
    kept ones (``--keep-workspaces``) are locked, so they stay.
    """
    done = _git(["worktree", "list", "--porcelain"], repo)
    removed: list[Path] = []
    for block in done.stdout.split("\n\n"):
        lines = block.splitlines()
        if (
            not lines
            or not lines[0].startswith("worktree ")
            or any(line.startswith("locked") for line in lines)
        ):
            continue  # a locked worktree is kept on purpose (--keep-workspaces, or the user's)
        path = Path(lines[0].removeprefix("worktree "))
        match = _OURS.search(str(path))
        if match and not psutil.pid_exists(int(match.group(1))):
            _drop_worktree(repo, path)
            shutil.rmtree(path.parent, ignore_errors=True)
            removed.append(path)
    return removed


def _seed_config(config: Path, env: Mapping[str, str]) -> None:
    """Give a fresh config dir the login and settings of the one the user runs with."""
    if any(env.get(name, "").strip() for name in _KEY_VARS):
        return
    configured = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    source = Path(configured).expanduser() if configured else Path.home() / ".claude"
    for name in _CONFIG_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, config / name)
            (config / name).chmod(0o600)
