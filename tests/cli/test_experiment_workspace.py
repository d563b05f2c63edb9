"""Experiments on real repositories: a workspace per trial, setup and check, ``passed``.

The real CLI runs offline against a scripted model whose lead uses real tools (Bash,
Write) in its working directory, so every file it makes lands wherever the trial runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import psutil
import pytest

from teamlead._cli.progress import report_for
from teamlead.experiment.reporting.render import render_markdown
from teamlead.experiment.reporting.report import build_report
from teamlead.experiment.running.runner import run_experiment, run_one_trial
from teamlead.experiment.running.trial import Outcome
from teamlead.experiment.running.workspace import Workspaces
from teamlead.experiment.specs.records import TrialKey, finished_keys, read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.policy import Policy
from teamlead.prompts import load_strategy
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer, ToolUse
from teamlead.testing.scripts import ToolSteps, bash, working_directory, write

from ..polling import poll
from ..records import ab_spec

MARKER = "# Delegation strategy"  # the delegation prompt's first line; baseline has none
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def _spec(extra: str = "", *, tasks: int = 2, trials: int = 2, concurrency: int = 4) -> str:
    """An A/B spec of bug fixes in a repository (no rubric: its ``check`` grades)."""
    return ab_spec(
        tasks,
        trials,
        concurrency=concurrency,
        extra=extra,
        name="repo",
        seed=3,
        prompt="Fix bug {i}.",
        rubric=None,
    )


def _processes_in(directory: Path) -> list[str]:
    """Live processes whose working directory is inside ``directory`` (deleted or not)."""
    found = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            if (proc.info["cwd"] or "").startswith(str(directory)) and (
                proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(" ".join(proc.info["cmdline"] or []))
        except psutil.Error:  # it ended while we looked
            continue
    return found


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def _make_repo(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "src" / "app.py").write_text("print('hi')\n")
    (path / "README.md").write_text("# project\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "first")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the .git directory included) and its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _run(spec_text: str, tmp_path: Path, script: ToolSteps, **kwargs: object) -> Path:
    out = tmp_path / "out"
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        anyio.run(
            lambda: run_experiment(
                parse_spec(spec_text, base_dir=tmp_path),
                out,
                base_options=claude.options(),
                workspace_dir=tmp_path / "ws",
                **kwargs,  # type: ignore[arg-type]
            )
        )
    return out


def _mark(req: ScriptedRequest) -> str:
    return (req.session_id or "nosession")[:8]


@pytest.mark.cli
def test_concurrent_worktrees_are_private_and_the_repository_is_untouched(
    tmp_path: Path,
) -> None:
    repo = _make_repo(tmp_path / "repo")
    before = _snapshot(repo)
    head = _git(repo, "rev-parse", "HEAD").strip()
    # Each of the four trials (all at once: concurrency 4) writes its own file, waits
    # until all four have written theirs (a marker each, outside the worktrees), then
    # lists what it sees: every trial's file exists by then, and each sees only its own.
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    barrier = (
        f"for i in $(seq 1200); do [ $(ls {arrived} | wc -l) -ge 4 ] && break; sleep 0.05; done"
    )
    script = ToolSteps(
        [
            lambda req: [
                bash(
                    f"echo ok > trial-{_mark(req)}.txt && touch {arrived}/{_mark(req)} && "
                    f"{barrier}; ls trial-*.txt && echo CONFIG=$CLAUDE_CONFIG_DIR"
                )
            ]
        ]
    )
    check = 'check = ["sh", "-c", "test $(ls trial-*.txt | wc -l) -eq 1"]'
    out = _run(_spec(f'cwd = "repo"\n{check}', trials=1), tmp_path, script)

    assert len(list(arrived.iterdir())) == 4
    records = read_records(out / "trials.jsonl").records
    assert len(records) == 4
    configs = set()
    for record in records:
        seen = [w for w in record.final_text.split() if w.startswith("trial-")]
        assert len(seen) == 1, record.final_text  # only its own file
        assert record.workspace == "worktree" and record.passed is True
        assert record.git_sha == head and record.git_dirty is False
        assert record.workspace_setup_s is not None and record.workspace_setup_s > 0
        assert record.check is not None and record.check.exit_code == 0
        assert (out / str(record.check.output_file)).is_file()
        assert record.workspace_path is None
        configs.add(record.final_text.split("CONFIG=")[1].split()[0])
    assert len(configs) == 4  # a Claude config dir per trial
    assert str(tmp_path / "s") not in "".join(configs)

    assert _snapshot(repo) == before  # byte-identical, .git included
    assert _git(repo, "status", "--porcelain") == ""
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    assert list((tmp_path / "ws").iterdir()) == []


@pytest.mark.cli
def test_check_decides_passed_in_copies_and_is_the_primary_metric(tmp_path: Path) -> None:
    project = tmp_path / "project"  # not a git repository: copies by default
    project.mkdir()
    (project / "check.sh").write_text("#!/bin/sh\ngrep -q fixed answer.txt\n")
    (project / "check.sh").chmod(0o755)

    def fix(req: ScriptedRequest) -> list[object]:
        content = "fixed\n" if MARKER in req.system else "still broken\n"
        return [write(f"{working_directory(req)}/answer.txt", content)]

    spec = _spec('cwd = "project"\ncheck = "./check.sh"\nprimary_metric = "passed"', trials=1)
    out = _run(spec, tmp_path, ToolSteps([fix]), keep_workspaces=True)  # type: ignore[list-item]
    (out / "experiment.json").write_text(
        json.dumps({"control": "baseline", "primary_metric": "passed"})
    )

    records = read_records(out / "trials.jsonl").records
    assert {(r.variant, r.passed) for r in records} == {("baseline", False), ("delegation", True)}
    for record in records:
        assert record.workspace == "copy" and record.git_sha is None
        assert record.workspace_path is not None  # kept: it is on disk, with the edit
        assert (Path(record.workspace_path) / "repo" / "answer.txt").is_file()
    assert not (project / "answer.txt").exists()

    report, text, _ = report_for(out, control=None, seed=1, json_=False, plots=False)
    data = report.to_json()
    assert data["variants"]["delegation"]["passed_rate"]["estimate"] == 1.0
    assert data["variants"]["baseline"]["passed_rate"]["estimate"] == 0.0
    assert data["primary_metric"] == "passed"
    passed = next(c for c in report.comparisons if c.metric == "passed")
    assert passed.correction == "holm" and passed.diff == 1.0
    assert {c.correction for c in report.comparisons if c.metric != "passed"} == {"fdr_bh"}
    assert "passed rate" in text and "Primary metric: passed" in text


@pytest.mark.cli
def test_failing_setup_is_retried_as_infrastructure(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    once = tmp_path / "once"
    # The very first setup fails (and shows its environment); every later one passes.
    setup = f'setup = ["sh", "-c", "mkdir {once} 2>/dev/null || exit 0; env; exit 3"]'
    script = ToolSteps([lambda req: [bash("ls")]])
    out = _run(
        _spec(f'cwd = "project"\n{setup}', tasks=1, trials=1, concurrency=1), tmp_path, script
    )

    records = read_records(out / "trials.jsonl").records
    assert len(records) == 2
    retried = [r for r in records if r.retried]
    assert len(retried) == 1 and retried[0].attempts == 2
    assert all(r.status == "completed" and r.setup and r.setup.exit_code == 0 for r in records)
    failed_logs = [p for p in (out / "commands").iterdir() if ".1.setup" in p.name]
    first = [p.read_text() for p in failed_logs if "ANTHROPIC_BASE_URL=" in p.read_text()]
    assert len(first) == 1 and "ANTHROPIC_API_KEY" not in first[0]  # no key in its env


@pytest.mark.cli
def test_setup_that_always_fails_is_excluded_and_rerun(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    spec = _spec('cwd = "project"\nsetup = "false"', tasks=1, trials=1, concurrency=1)
    out = _run(spec, tmp_path, ToolSteps([lambda req: [bash("ls")]]))
    records = read_records(out / "trials.jsonl").records
    assert sorted(
        (r.variant, r.infrastructure_failure, r.retried, r.attempts, r.turns) for r in records
    ) == [("baseline", True, True, 3, 0), ("delegation", True, True, 3, 0)]
    assert all(r.final_text.startswith("setup failed") for r in records)
    assert finished_keys(out / "trials.jsonl") == set()  # a rerun tries them again


@pytest.mark.cli
def test_shared_mode_runs_in_the_directory_and_is_flagged(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = ToolSteps([lambda req: [bash(f"echo x > shared-{_mark(req)}.txt")]])
    spec = _spec('cwd = "project"\nworkspace = "shared"', tasks=1, trials=1)
    out = _run(spec, tmp_path, script)
    records = read_records(out / "trials.jsonl").records
    assert {r.workspace for r in records} == {"shared"}
    assert len(list(project.glob("shared-*.txt"))) == 2  # every trial wrote right here
    report = build_report(records, control="baseline", seed=1, n_permutations=50, n_bootstrap=50)
    assert any("shared directory" in note for note in report.notes)
    assert "shared directory" in render_markdown(report)


@pytest.mark.cli
def test_an_interrupted_run_leaves_no_worktree(tmp_path: Path) -> None:
    repo = _make_repo(tmp_path / "repo")
    before = _snapshot(repo)
    started: set[str] = set()
    both = threading.Event()

    def hang(req: ScriptedRequest) -> list[ToolUse]:
        started.add(req.session_id or "")  # the lead runs: its CLI is in its workspace
        if len(started) >= 2:
            both.set()
        # A command that runs until it is stopped, so both trials are still in their
        # workspaces when the run is cancelled. (Not `sleep 60`: Claude Code refuses a
        # standalone sleep at once, the trial then ends on its own a second later, and
        # under load one trial could end before the other one started.)
        return [bash("tail -f /dev/null")]

    async def main() -> None:
        with ScriptedServer(ToolSteps([hang])) as server:
            claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await run_experiment(
                        parse_spec(_spec('cwd = "repo"', tasks=1, trials=1), base_dir=tmp_path),
                        tmp_path / "out",
                        base_options=claude.options(),
                        workspace_dir=tmp_path / "ws",
                    )

                tg.start_soon(run)
                assert await anyio.to_thread.run_sync(both.wait, 60)
                listed = _git(repo, "worktree", "list")
                assert len(listed.splitlines()) == 3, listed
                tg.cancel_scope.cancel()

    anyio.run(main)
    # No trial ended on its own: both were cut off, and both workspaces are gone already
    # (their removal is awaited before the run returns), with no process left in them.
    trials = tmp_path / "out" / "trials.jsonl"
    assert not trials.exists()
    listed = _git(repo, "worktree", "list")
    assert len(listed.splitlines()) == 1, listed
    assert list((tmp_path / "ws").iterdir()) == []
    assert _processes_in(tmp_path / "ws") == []
    after = _snapshot(repo)
    assert sorted(set(after) ^ set(before)) == []
    assert after == before


@pytest.mark.cli
def test_ctrl_c_on_experiment_run_removes_every_worktree(tmp_path: Path) -> None:
    repo = _make_repo(tmp_path / "repo")
    before = _snapshot(repo)
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec('cwd = "repo"', tasks=1, trials=1))
    with ScriptedServer(lambda req: Reply.text("done", delay=30.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**os.environ, **claude.env, "TMPDIR": str(tmp_path / "tmp")}
        (tmp_path / "tmp").mkdir()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "teamlead",
                "experiment",
                "run",
                str(spec),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert poll(lambda: len(server.recorded("lead")) >= 2, within_s=60), "no trials started"
        assert len(server.recorded("lead")) == 2, "more than the two trials started"
        assert len(_git(repo, "worktree", "list").splitlines()) == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0, err
    assert len(_git(repo, "worktree", "list").splitlines()) == 1, err
    assert [p.name for p in (tmp_path / "tmp").iterdir() if "teamlead-ws" in p.name] == []
    assert _snapshot(repo) == before


@pytest.mark.cli
def test_run_one_trial_makes_the_workspace_where_it_runs(tmp_path: Path) -> None:
    """What a remote worker (a Ray task) calls: a fresh Workspaces in its own process."""

    repo = _make_repo(tmp_path / "repo")
    spec = parse_spec(_spec('cwd = "repo"\ncheck = "test -f made.txt"', tasks=1), base_dir=tmp_path)
    strategies = {v.name: load_strategy(v.strategy) for v in spec.variants}
    script = ToolSteps([lambda req: [bash("echo x > made.txt && pwd")]])
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")

        async def worker() -> Outcome:
            workspaces = Workspaces(base_dir=tmp_path / "ws")  # made on the worker
            return await run_one_trial(
                TrialKey("delegation", "task-0", 0),
                spec,
                claude.options(),
                strategies,
                Policy(),
                1,
                workspaces=workspaces,
                out_dir=tmp_path / "worker-out",
            )

        record, infra, _ = anyio.run(worker)
    assert not infra
    assert record.passed is True and record.workspace == "worktree"
    assert str(tmp_path / "ws") in record.final_text
    assert (tmp_path / "worker-out" / str(record.check.output_file)).is_file()
    assert not (repo / "made.txt").exists()
    assert list((tmp_path / "ws").iterdir()) == []
