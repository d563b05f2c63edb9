"""Bench: set-up time of a trial's workspace on a large repository, worktree against copy.

A git repository of about 10,000 files (~20 MB: small source files in nested packages,
a few larger ones) is generated in a temp dir and committed. Then, through
the same code the experiment runner uses (``teamlead.experiment.running.workspace.Workspaces``),
each kind is made and removed N times in alternation:

* ``copy``      a copy of the directory (the baseline: what a naive harness does);
* ``worktree``  a detached ``git worktree`` at the current commit.

Figures, per kind: set-up p50/p95 (what the record's ``workspace_setup_s`` holds),
removal p50, and set-up with 4 trials at once (p50 per trial). The ratio is worktree
set-up over copy set-up, p50 against p50. Target: a worktree sets up no slower than a
copy (ratio <= 1.0); a missed target exits 1.

Run: ``python bench/workspace.py`` (a few minutes); ``--quick`` uses 100 files, one
round and no warm-up, and does not judge the target.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _common import percentile, table

from teamlead.experiment.running.workspace import WorkspaceKind, Workspaces

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "gc.auto=0"]
KINDS: tuple[WorkspaceKind, ...] = ("copy", "worktree")


def make_repo(root: Path, files: int) -> Path:
    """A committed repository of ``files`` files: 20 packages, nested modules, some data."""
    repo = root / "repo"
    for i in range(files):
        package = repo / f"pkg{i % 20:02d}" / f"mod{(i // 20) % 25:02d}"
        package.mkdir(parents=True, exist_ok=True)
        size = 40_000 if i % 500 == 0 else 2_000
        (package / f"file{i:05d}.py").write_text(f"# file {i}\n" + "x = 1\n" * (size // 6))
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "bench"], cwd=repo, check=True)
    return repo


def _git_lines(repo: Path, *args: str) -> list[str]:
    done = subprocess.run([*GIT, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


async def one(spaces: Workspaces, repo: Path, kind: WorkspaceKind) -> tuple[float, float]:
    """(set-up seconds as recorded, removal seconds) of one workspace."""
    async with spaces.open(repo, kind, {}) as ws:
        setup = ws.setup_s
        left = time.perf_counter()
    return setup, time.perf_counter() - left


async def measure(
    repo: Path, base: Path, rounds: int, warm: bool = True
) -> dict[str, dict[str, list[float]]]:
    spaces = Workspaces(base_dir=base)
    out: dict[str, dict[str, list[float]]] = {
        k: {"setup": [], "remove": [], "parallel": []} for k in KINDS
    }
    for kind in KINDS if warm else ():  # warm the page cache and git's object store once
        await one(spaces, repo, kind)
    for _ in range(rounds):
        for kind in KINDS:
            setup, remove = await one(spaces, repo, kind)
            out[kind]["setup"].append(setup)
            out[kind]["remove"].append(remove)
    for kind in KINDS:
        results: list[float] = []

        async def trial(kind: WorkspaceKind = kind, results: list[float] = results) -> None:
            setup, _ = await one(spaces, repo, kind)
            results.append(setup)

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(trial)
        out[kind]["parallel"] = results
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="100 files, 1 round, no warm-up nor target"
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    files, rounds = (100, 1) if args.quick else (args.files, args.rounds)

    root = Path(tempfile.mkdtemp(prefix="teamlead-bench-ws-"))
    try:
        started = time.perf_counter()
        repo = make_repo(root, files)
        tracked = _git_lines(repo, "ls-files")
        size_mb = sum((repo / name).stat().st_size for name in tracked) / 1e6
        print(
            f"repository: {len(tracked)} files, {size_mb:.0f} MB, "
            f"generated in {time.perf_counter() - started:.1f}s; {rounds} rounds"
        )
        data = anyio.run(measure, repo, root / "ws", rounds, not args.quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    for kind in KINDS:
        d = data[kind]
        rows.append(
            [
                kind,
                f"{percentile(d['setup'], 50) * 1000:.0f} ms",
                f"{percentile(d['setup'], 95) * 1000:.0f} ms",
                f"{percentile(d['remove'], 50) * 1000:.0f} ms",
                f"{percentile(d['parallel'], 50) * 1000:.0f} ms",
            ]
        )
    print(table(["kind", "set-up p50", "set-up p95", "removal p50", "set-up p50, 4 at once"], rows))
    copy = percentile(data["copy"]["setup"], 50)
    worktree = percentile(data["worktree"]["setup"], 50)
    ratio = worktree / copy
    together = percentile(data["worktree"]["parallel"], 50) / percentile(
        data["copy"]["parallel"], 50
    )
    met = ratio <= 1.0
    verdict = "target not judged (--quick)" if args.quick else ("met" if met else "FAILED")
    print(
        f"SUMMARY: {files} files: worktree set-up {worktree * 1000:.0f} ms vs copy "
        f"{copy * 1000:.0f} ms (ratio {ratio:.2f}; {together:.2f} with 4 at once); "
        f"target worktree <= copy: {verdict}"
    )
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
