"""Workspaces and commands without the CLI: copies and links, stale worktrees, timeouts,
the spec's new fields and the ``passed`` metric in the report."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import get_args

import anyio
import psutil
import pytest

from teamlead.errors import UsageError
from teamlead.experiment.reporting.html import render_html
from teamlead.experiment.reporting.render import render_markdown
from teamlead.experiment.reporting.report import build_report, upgrade_report_json
from teamlead.experiment.running.trial_commands import (
    TAIL_CHARS,
    command_env,
    output_name,
    run_command,
)
from teamlead.experiment.running.workspace import (
    Workspaces,
    copy_tree,
    reap_stale_worktrees,
    repo_state,
)
from teamlead.experiment.specs.records import TrialRecord
from teamlead.experiment.specs.spec import parse_spec
from teamlead.experiment.specs.steps import DEFAULT_TIMEOUT_S, PrimaryMetric
from teamlead.experiment.stats.metrics import METRICS

from ..polling import poll

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def _repo(path: Path) -> Path:
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "first")
    return path


def test_a_copy_never_follows_a_link_out_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("data\n")
    (src / "out-file").symlink_to(outside / "secret.txt")
    (src / "out-dir").symlink_to(outside)
    (src / "sneaky").symlink_to("../outside")
    (src / "rel").symlink_to("sub/data.txt")
    (src / "abs").symlink_to(src / "sub")
    (src / "runs").mkdir()
    (src / "runs" / "trials.jsonl").write_text("{}\n")

    skipped = copy_tree(src, tmp_path / "copy", exclude=[src / "runs"])

    copy = tmp_path / "copy"
    assert sorted(skipped) == ["out-dir", "out-file", "sneaky"]
    for name in skipped:
        assert not (copy / name).exists() and not (copy / name).is_symlink()
    assert (copy / "rel").readlink() == Path("sub/data.txt")
    assert (copy / "abs").readlink() == Path("sub")  # made relative: it points into the copy
    assert (copy / "abs" / "data.txt").read_text() == "data\n"
    assert not (copy / "runs").exists()
    assert "secret" not in "".join(p.read_text() for p in copy.rglob("*") if p.is_file())


def test_repo_state_reports_commit_dirty_and_subdir(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "pkg").mkdir()
    state = repo_state(repo / "pkg")
    assert state is not None and state.commit == _git(repo, "rev-parse", "HEAD").strip()
    assert state.subdir == Path("pkg") and state.dirty is False
    (repo / "a.txt").write_text("changed\n")
    dirty = repo_state(repo)
    assert dirty is not None and dirty.dirty is True
    assert repo_state(tmp_path) is None


def test_workspace_misconfiguration_is_one_line(tmp_path: Path) -> None:
    spaces = Workspaces()
    with pytest.raises(UsageError, match="not a directory"):
        spaces.check(tmp_path / "missing", None)
    with pytest.raises(UsageError, match="needs a git repository"):
        spaces.check(tmp_path, "worktree")
    assert spaces.kind_for(tmp_path, None) == "copy"
    assert spaces.kind_for(_repo(tmp_path / "repo"), None) == "worktree"


def test_worktrees_of_a_killed_run_are_removed_others_kept(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / "ws" / f"teamlead-ws-{dead.pid}-abc" / "repo"
    mine = tmp_path / "mine"
    _git(repo, "worktree", "add", "-q", "--detach", str(stale), "HEAD")
    _git(repo, "worktree", "add", "-q", "--detach", str(mine), "HEAD")
    spaces = Workspaces(base_dir=tmp_path / "ws")

    async def one() -> None:
        async with spaces.open(repo, None, {}) as ws:
            assert ws.kind == "worktree" and (ws.cwd / "a.txt").is_file()
            assert (ws.config_dir).is_dir()

    anyio.run(one)
    listed = _git(repo, "worktree", "list")
    assert str(stale) not in listed and str(mine) in listed
    assert len(listed.splitlines()) == 2
    assert not stale.parent.exists()


def test_a_workspace_is_removed_when_the_trial_raises(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    spaces = Workspaces(base_dir=tmp_path / "ws")

    async def broken() -> None:
        async with spaces.open(repo, "worktree", {}):
            raise RuntimeError("the trial broke")

    with pytest.raises(RuntimeError):
        anyio.run(broken)
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    assert list((tmp_path / "ws").iterdir()) == []
    assert not (repo / ".git" / "worktrees").exists()  # as the repository was found


def test_commands_time_out_fail_to_start_and_keep_a_tail(tmp_path: Path) -> None:
    async def main() -> None:
        env = command_env({"ANTHROPIC_API_KEY": "sk-test-secret", "MINE": "1"})
        assert "ANTHROPIC_API_KEY" not in env and env["MINE"] == "1"
        slow = await run_command(
            ["sh", "-c", "echo started; sleep 30"],
            cwd=tmp_path,
            env=env,
            timeout_s=0.3,
            out_dir=tmp_path / "out",
            name="slow.log",
        )
        assert slow.timed_out and slow.exit_code is None and not slow.ok
        assert "started" in slow.output_tail and "timed out" in slow.describe()
        missing = await run_command(
            ["./no-such-program"],
            cwd=tmp_path,
            env=env,
            timeout_s=5,
            out_dir=tmp_path / "out",
            name="missing.log",
        )
        assert missing.error is not None and missing.exit_code is None
        loud = await run_command(
            [sys.executable, "-c", "print('x' * 10000); print('END'); raise SystemExit(4)"],
            cwd=tmp_path,
            env=env,
            timeout_s=30,
            out_dir=tmp_path / "out",
            name="loud.log",
        )
        assert loud.exit_code == 4 and loud.describe() == "exit status 4"
        assert len(loud.output_tail) == TAIL_CHARS and loud.output_tail.rstrip().endswith("END")
        assert (tmp_path / "out" / str(loud.output_file)).stat().st_size > 10000

    anyio.run(main)
    assert output_name("a/b", "t 1", 0, "check") == "a_b.t_1.0.check.log"


def test_what_a_command_leaves_running_is_stopped_even_if_it_ignores_sigterm(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    # The command exits at once, leaving in its group a child that ignores SIGTERM.
    script = f"trap '' TERM; sleep 60 & echo $! > {shlex.quote(str(pid_file))}"

    async def main() -> None:
        run = await run_command(
            ["sh", "-c", script],
            cwd=tmp_path,
            env=command_env({}),
            timeout_s=30,
            out_dir=tmp_path / "out",
            name="left.log",
        )
        assert run.exit_code == 0

    anyio.run(main)
    child = psutil.Process(int(pid_file.read_text()))

    def gone() -> bool:
        try:
            return child.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    try:
        assert poll(gone, within_s=10), "the command's child outlived it"
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


_SPEC = """
[experiment]
name = "x"
trials = 1
control = "a"
{extra}
[[variants]]
name = "a"
strategy = "baseline"
[[variants]]
name = "b"
strategy = "baseline"
[[tasks]]
id = "t"
prompt = "p"
{task}
"""


def test_spec_commands_workspace_and_primary_metric() -> None:
    spec = parse_spec(
        _SPEC.format(
            extra='setup = "pip install -e ."\ncheck = ["pytest", "-q"]\nworkspace = "copy"',
            task='check = ""\nworkspace = "shared"\nsetup_timeout_s = 5',
        )
    )
    steps = spec.steps_for(spec.tasks[0])
    assert steps.setup == ["pip", "install", "-e", "."]
    assert steps.check is None  # the task turned the default off
    assert steps.workspace == "shared"
    assert (steps.setup_timeout_s, steps.check_timeout_s) == (5, DEFAULT_TIMEOUT_S)
    assert set(get_args(PrimaryMetric)) == {m.name for m in METRICS}
    problems = {
        'setup = "a \\"b"': "experiment.setup: cannot split the command",
        'check = [""]': "experiment.check: a command's arguments must be non-empty",
        "check = 3": "experiment.check: a command is a string or a list of strings",
        'workspace = "tmp"': "experiment.workspace: Input should be 'worktree', 'copy'",
        'primary_metric = "passed"': "tasks[0].id: task 't' has no check command",
        'primary_metric = "speed"': "experiment.primary_metric: Input should be",
    }
    for extra, message in problems.items():
        with pytest.raises(UsageError, match=message.replace("[", r"\[")):
            parse_spec(_SPEC.format(extra=extra, task=""))


@pytest.mark.parametrize(
    ("command", "syntax"),
    [
        ("test $(ls out-*.txt | wc -l) -eq 1", "$(, |"),
        ("echo `date`", "`"),
        ("pip install -e . && make", "&&"),
        ("make || true", "||"),
        ("pytest -q > log.txt", ">"),
        ("wc -l < list.txt", "<"),
        ("make; make test", ";"),
        ('echo "$(whoami)"', "$("),
    ],
)
def test_a_command_string_with_shell_syntax_is_refused_at_its_line(
    command: str, syntax: str
) -> None:
    """Commands run without a shell: shell syntax in a string would reach the program as
    arguments and fail every trial silently, so the spec is refused, with the fix."""
    text = _SPEC.format(extra="", task=f"setup = {json.dumps(command)}")
    line = text.splitlines().index(f"setup = {json.dumps(command)}") + 1
    with pytest.raises(UsageError) as info:
        parse_spec(text, source="exp.toml")
    message = str(info.value)
    assert message.startswith(f"exp.toml:{line}: tasks[0].setup: {command!r} ")
    assert f"uses shell syntax ({syntax}) but runs without a shell" in message
    assert json.dumps(["sh", "-c", command]) in message  # the fix, ready to paste
    assert "\n" not in message
    # Written as the message says, the same command loads.
    fixed = _SPEC.format(extra="", task=f"setup = {json.dumps(['sh', '-c', command])}")
    assert parse_spec(fixed).steps_for(parse_spec(fixed).tasks[0]).setup == ["sh", "-c", command]


@pytest.mark.parametrize(
    "command",
    [
        "grep -E 'a|b' notes.txt",
        'grep "x > y" f',
        r"echo a\;b",
        "python -c 'print(1)'",
        "pytest -q",
    ],
)
def test_quoted_or_escaped_operators_are_arguments_not_shell_syntax(command: str) -> None:
    text = _SPEC.format(extra=f"check = {json.dumps(command)}", task="")
    spec = parse_spec(text)
    assert spec.steps_for(spec.tasks[0]).check == shlex.split(command)


def _records(passed: dict[str, list[bool]], workspace: str = "worktree") -> list[TrialRecord]:
    return [
        TrialRecord(
            variant=variant,
            task=f"t{i % 4}",
            trial=i // 4,
            status="completed",
            wall_s=1.0 + i,
            passed=value,
            workspace=workspace,
        )
        for variant, values in passed.items()
        for i, value in enumerate(values)
    ]


def test_passed_is_reported_like_parallel_and_can_be_primary() -> None:
    # Not constant on every task: a zero-width interval would decide nothing.
    new = [True] * 5 + [False] + [True] * 6
    records = _records({"base": [False] * 12, "new": new}, workspace="shared")
    report = build_report(records, control="base", primary="passed", n_permutations=500)
    data = report.to_json()
    assert data["variants"]["new"]["passed_rate"]["estimate"] == 11 / 12
    assert set(data["variants"]["new"]["passed_rate"]) == set(
        data["variants"]["new"]["parallel_rate"]
    )
    assert (data["version"], data["primary_metric"]) == (4, "passed")
    passed = next(c for c in report.comparisons if c.metric == "passed")
    assert (passed.correction, passed.verdict) == ("holm", "better")
    parallel = next(c for c in report.comparisons if c.metric == "parallel")
    assert parallel.correction == "fdr_bh"
    assert data["tasks"]["t0"]["new"]["passed_rate"] == 1.0
    text = render_markdown(report)
    assert "passed rate" in text and "shared directory" in text
    assert "Primary metric: passed (Holm)" in text
    page = render_html(report, records)
    assert "passed rate" in page and "primary metric passed" in page
    assert page.count(", check passed</summary>") == 11  # every passing trial of "new"
    old = {k: v for k, v in data.items() if k != "primary_metric"}
    assert upgrade_report_json(old)["primary_metric"] == "parallel"

    # Without a check on every trial, passed is not analysed and the primary falls back.
    partial = [*records[:-1], records[-1].model_copy(update={"passed": None})]
    fallback = build_report(partial, control="base", primary="passed", n_permutations=50)
    assert fallback.primary_metric == "parallel"
    assert "passed_rate" not in fallback.to_json()["variants"]["new"]
    assert any("passed not analysed" in n for n in fallback.notes)
    plain = build_report(_records({"base": [True] * 4, "new": [True] * 4}), control="base")
    assert "passed_rate" in plain.to_json()["variants"]["base"]
    with pytest.raises(UsageError, match="unknown primary metric"):
        build_report(records, control="base", primary="speed")


def test_the_docs_example_is_a_valid_spec() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "experiments.md").read_text()
    section = page.split("## Experiments on a repository", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    variants = '[[variants]]\nname = "baseline"\nstrategy = "baseline"\n' * 1
    variants += '[[variants]]\nname = "delegation"\nstrategy = "delegation"\n'
    spec = parse_spec(block + variants)
    task = spec.tasks[0]
    assert spec.experiment.primary_metric == "passed"
    assert spec.steps_for(task).setup == ["pip", "install", "-e", "."]
    assert spec.steps_for(task).check == ["python", "-m", "pytest", "-q", "tests/test_parse.py"]


def test_kept_worktrees_are_locked_and_survive_the_next_run(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    kept = Workspaces(keep=True, base_dir=tmp_path / "ws")

    async def open_one(spaces: Workspaces) -> Path:
        async with spaces.open(repo, None, {}) as ws:
            return ws.root

    root = anyio.run(open_one, kept)
    assert (root / "repo" / "a.txt").is_file()  # kept after the trial
    assert "locked" in _git(repo, "worktree", "list", "--porcelain")
    # kept by a run whose process is gone: locked, so reaping leaves it
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = tmp_path / "ws" / f"teamlead-ws-{dead.pid}-kept" / "repo"
    _git(repo, "worktree", "add", "-q", "--detach", str(old), "HEAD")
    _git(repo, "worktree", "lock", str(old))
    assert reap_stale_worktrees(repo) == []
    assert (root / "repo" / "a.txt").is_file() and (old / "a.txt").is_file()


def test_a_subdirectory_missing_from_the_commit_is_a_usage_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "new").mkdir()
    with pytest.raises(UsageError, match="not in the repository's last commit"):
        Workspaces().check(repo / "new", None)
    Workspaces().check(repo / "new", "copy")


def test_the_runs_own_output_does_not_make_the_repository_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "runs" / "ab").mkdir(parents=True)
    (repo / "runs" / "ab" / "trials.jsonl").write_text("{}\n")
    state = repo_state(repo, ignore=[repo / "runs" / "ab"])
    assert state is not None and state.dirty is False
    dirty = repo_state(repo)
    assert dirty is not None and dirty.dirty is True
