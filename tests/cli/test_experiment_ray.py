"""The Ray backend: ``teamlead experiment run --backend ray`` on the real CLI, offline.

The end-to-end tests drive the ``teamlead`` command in a subprocess against the scripted
model server: a two-arm A/B on a local Ray the run starts (no ``RAY_ADDRESS``), whose
report must match the local backend's; a run connected to a Ray instance these tests own
(token authentication on), whose worker is killed mid-trial; a run stopped with Ctrl-C
and resumed; and, in the cluster tier (marker ``cluster``, left out of the README's test
command), a run on a two-node cluster of ``ray start`` nodes sharing a Redis for its limits
and sessions, whose worker node is killed mid-trial (:mod:`tests.ray_cluster`). Every Ray
process and temp dir is checked gone at the end. The
shared-limits tests use the store directly on that same owned Ray instance, which the
tests of :class:`TestOnAnOwnedRay` share (one start-up instead of three).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from teamlead._cli.progress import report_for
from teamlead.errors import UsageError
from teamlead.experiment import TrialKey, load_spec, read_records
from teamlead.experiment.running.ray_backend import ray_session
from teamlead.experiment.running.ray_cluster import error_line
from teamlead.experiment.running.runner import trial_order, trial_session_id
from teamlead.sessions import stored_sessions
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import ProbabilisticFanOut

from ..polling import apoll, poll
from ..ray_cluster import RayNode, two_node_cluster
from ..redis_server import REDIS_SERVER, redis_server
from ..session_stores import in_store
from .scripted import most_accepted_at_once

ray = pytest.importorskip("ray")

# These run one after another on one worker (the README's ``-n 2 --dist loadfile``): each
# checks that the Ray processes it started are gone, which another test's Ray starting
# meanwhile would spoil. (``xdist_group`` would say it per test, but pytest-xdist 3.8's
# loadgroup does not group under pytest 9.2.) For the same reason TestOnAnOwnedRay comes
# last: its shared Ray runs from its first test to its last, and only then.

MARKER = "Fan out to parallel agents."
_RAY_NAMES = ("raylet", "gcs_server", "ray::", "default_worker", "plasma_store", "dashboard")


def _ray_pids() -> set[int]:
    found = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            text = " ".join([proc.info["name"] or "", *(proc.info["cmdline"] or [])])
        except (psutil.Error, TypeError):
            continue
        if any(name in text for name in _RAY_NAMES):
            found.add(proc.pid)
    return found


def _wait_gone(pids: set[int], deadline_s: float = 30.0) -> set[int]:
    """The processes of ``pids`` still alive once all ended or ``deadline_s`` passed."""

    def alive() -> set[int]:
        return {p for p in pids if psutil.pid_exists(p) and _running(p)}

    poll(lambda: not alive(), within_s=deadline_s, every_s=0.2)
    return alive()


def _described(pids: set[int]) -> list[str]:
    """What the processes ``pids`` are (and their parents), for a failure message."""
    out = [f"this process: {os.getpid()}"]
    for pid in sorted(pids):
        try:
            proc = psutil.Process(pid)
            parent = proc.parent()
            who = " ".join(parent.cmdline())[:120] if parent else "-"
            line = " ".join(proc.cmdline())[:100]
            out.append(f"{pid} ({proc.status()}) {line} <- {proc.ppid()} {who}")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return out


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _spec(tmp_path: Path, *, tasks: int, trials: int, name: str = "ab") -> Path:
    arms = tmp_path / "arms"
    arms.mkdir(exist_ok=True)
    (arms / "plain.md").write_text("Answer directly.\n")
    (arms / "fan.md").write_text(MARKER + "\n")
    lines = [
        "[experiment]",
        f'name = "{name}"',
        f"trials = {trials}",
        "seed = 5",
        "concurrency = 4",
        'control = "plain"',
        "[[variants]]",
        'name = "plain"',
        'strategy = "arms/plain.md"',
        "[[variants]]",
        'name = "fan"',
        'strategy = "arms/fan.md"',
    ]
    for i in range(tasks):
        lines += ["[[tasks]]", f'id = "t{i}"', f'prompt = "Question {i}."']
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(env: dict[str, str], cwd: Path, *args: str, timeout: float = 600) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "teamlead", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def _report(out: Path) -> dict[str, object]:
    """The JSON report of ``out``, as ``teamlead experiment report OUT --json`` prints it
    (built here: what is compared is the two backends' records, not the report command)."""
    _, text, _ = report_for(out, control=None, seed=0, json_=True, plots=False)
    data: dict[str, object] = json.loads(text)
    return data


def _keys(out: Path) -> list[tuple[str, str, int]]:
    return [(r.variant, r.task, r.trial) for r in read_records(out / "trials.jsonl").records]


def _env(claude: OfflineClaude) -> dict[str, str]:
    env = {**os.environ, **claude.env}
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
    )
    return env


def _ab_parity(tmp_path: Path, *, tasks: int, trials: int, limits: str | None = None) -> None:
    """The A/B run locally, then on Ray (its relays' limits shared through ``limits``)."""
    spec = _spec(tmp_path, tasks=tasks, trials=trials)
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, p_plain=0.0, p_solo=0.0, delay=0.05)
    before = _ray_pids()
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = _env(claude)
        local = tmp_path / "local"
        sessions = f"sqlite:///{tmp_path / 'sessions.db'}"  # the local run keeps its sessions
        code, out, err = _finish(
            _run(
                env,
                claude.cwd,
                *("experiment", "run", str(spec), "--out", str(local), "-q"),
                *("--session-store", sessions),
            )
        )
        assert code == 0, err
        on_ray = tmp_path / "ray"
        code, out, err = _finish(
            _run(
                {**env, "TEAMLEAD_BACKEND": "ray"},  # TMPDIR: the CLI's own, too deep for Ray
                claude.cwd,
                *("experiment", "run", str(spec), "--out", str(on_ray), "-q"),
                *(() if limits is None else ("--limits", limits)),
            )
        )
        assert code == 0, err
        assert "shared limits:" not in err  # the shared store never failed
    total = 2 * tasks * trials
    assert f"ran {total} trial(s)" in out
    keys = _keys(on_ray)
    assert len(keys) == total and len(set(keys)) == total  # every trial once, none twice
    assert sorted(keys) == sorted(_keys(local))
    run_id = json.loads((local / "run.json").read_text())["run_id"]
    stored = {s.session_id: s.status for s in in_store(sessions, stored_sessions)}
    for key in _keys(local):  # every local trial's session, in the store, with its end
        status = stored.get(trial_session_id(5, TrialKey(*key), 1, run_id))
        assert status is not None and status.status == "completed", key
    local_records = {
        (r.variant, r.task, r.trial): r for r in read_records(local / "trials.jsonl").records
    }
    for record in read_records(on_ray / "trials.jsonl").records:
        twin = local_records[(record.variant, record.task, record.trial)]
        assert (record.status, record.parallel) == (twin.status, twin.parallel)
        assert record.prompt_sha256 == twin.prompt_sha256 and record.cli_version
    local_report, ray_report = _report(local), _report(on_ray)
    verdicts = [
        {(c["variant"], c["metric"]): c["verdict"] for c in r["comparisons"]}  # type: ignore[index, attr-defined]
        for r in (local_report, ray_report)
    ]
    assert verdicts[0].keys() == verdicts[1].keys()
    # The primary metric decides the A/B; it and the other counts are fixed by the script.
    # Seconds, tokens and cost are measured (and scripted per session id, which differs
    # per run), so their verdicts may differ between any two runs, local ones included.
    # The script fans out on every marked trial and never otherwise: every task shows the
    # same difference, a zero-width interval, which decides no verdict (and says why).
    assert verdicts[0][("fan", "parallel")] == "inconclusive"
    parallel = next(
        c
        for c in local_report["comparisons"]  # type: ignore[attr-defined]
        if (c["variant"], c["metric"]) == ("fan", "parallel")
    )
    assert (parallel["diff"], parallel["p_value"] < 0.001) == (1.0, True)
    assert parallel["explanation"].startswith("zero variance")
    counted = [k for k in verdicts[0] if k[1] in ("parallel", "delegated", "agent_calls")]
    assert len(counted) == 3
    assert {k: verdicts[1][k] for k in counted} == {k: verdicts[0][k] for k in counted}
    # the run started its own local Ray and shut it down
    assert _wait_gone(_ray_pids() - before) == set()


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ray_backend_matches_local_backend_on_the_full_ab(tmp_path: Path) -> None:
    """The 4 tasks x 2 trials two-arm A/B on a local Ray the run starts: 16 records, none
    twice, the local backend's verdict on every counted metric. (4 x 2 is the smallest
    design whose exact paired test on ``parallel`` reaches p < 0.001: 1 / 6**4.) The Ray
    run shares its limits through a real Redis (``--limits redis://``), as a cluster's
    nodes would: every request of every trial took and gave back its lease there
    (without ``redis-server`` installed, the Ray run keeps its own store)."""
    if REDIS_SERVER is None:
        _ab_parity(tmp_path, tasks=4, trials=2)
        return
    import redis as redis_py

    with redis_server(tmp_path) as server:
        _ab_parity(tmp_path, tasks=4, trials=2, limits=server.url)
        client = redis_py.Redis.from_url(server.url, decode_responses=True)
        try:
            # each trial's lead sends at least two requests, each a lease taken and given back
            assert int(client.get("teamlead:seq") or 0) >= 2 * 2 * 16
            assert client.hlen("teamlead:lease-keys") == 0  # none left held
            assert client.keys("teamlead:limits:*")  # the buckets' limits live there
        finally:
            client.close()


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stopped_ray_run_cancels_its_trials_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C stops the trials where they run (no record for them), shuts the local Ray
    down, exits 130; the same command then finishes the rest, each trial written once."""
    spec = _spec(tmp_path, tasks=1, trials=1, name="stop")
    # A trial found running still has its CLI's start-up and three replies of 0.5 s to go
    # when the signal is sent right after.
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, p_plain=0.0, p_solo=0.0, delay=0.5)
    before = _ray_pids()
    out = tmp_path / "out"
    args = ("experiment", "run", str(spec), "--out", str(out), "-q", "--backend", "ray")
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = _env(claude)
        proc = _run(env, claude.cwd, *args)
        found = _trial_cli("--session-id=", proc, deadline_s=240)
        assert found is not None, "no trial CLI ever ran under a Ray worker"
        proc.send_signal(signal.SIGINT)
        code, _, err = _finish(proc, timeout=120)
        assert code == 130, err
        assert "interrupted; finished trials are kept" in err
        assert _wait_gone({p.pid for p in found}) == set()  # the trial's worker and CLI
        left = _wait_gone(_ray_pids() - before)
        assert left == set(), _described(left)
        stopped = (
            read_records(out / "trials.jsonl").records if (out / "trials.jsonl").exists() else []
        )
        assert all(r.status == "completed" for r in stopped)  # no record for a stopped trial
        code, stdout, err = _finish(_run(env, claude.cwd, *args))
        assert code == 0, err
    keys = _keys(out)
    assert len(keys) == 2 and len(set(keys)) == 2
    assert f"ran {2 - len(stopped)} trial(s), skipped {len(stopped)} finished" in stdout
    assert _wait_gone(_ray_pids() - before) == set()


def test_a_trial_task_that_raised_is_recorded_with_what_it_raised() -> None:
    """A trial task that raised (a node without the spec's cwd, say) fails with what it
    raised; the first line of Ray's error says only where it ran, in terminal colours."""
    from ray.exceptions import RayTaskError

    cause = UsageError("the experiment's cwd is not a directory: /x")
    error = RayTaskError(
        "_trial_task", "Traceback ...", cause, proctitle="ray::_trial_task()", pid=7, ip="10.0.0.2"
    )
    for raised in (error, error.as_instanceof_cause()):
        assert error_line(raised) == "the experiment's cwd is not a directory: /x"


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def test_an_address_nothing_listens_at_fails_at_once_in_one_line(tmp_path: Path) -> None:
    """Ray itself would retry such an address for ten minutes; the run says why and stops."""
    spec = _spec(tmp_path, tasks=1, trials=1)
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "out"
    env = {
        **os.environ,
        "RAY_ADDRESS": f"127.0.0.1:{port}",
        "ANTHROPIC_API_KEY": "sk-test",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "teamlead", "experiment", "run", str(spec), "--out", str(out)]
        + ["-q", "--backend", "ray"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"teamlead: error: cannot reach the Ray cluster at 127.0.0.1:{port}:"
    )
    assert not (out / "trials.jsonl").exists()


def _session_of(
    out: Path, seed: int, key: TrialKey, driver: subprocess.Popen[str], *, deadline_s: float
) -> str | None:
    """The session id of ``key``'s first attempt, once the run has written its run id."""

    def session() -> str | None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            run_id = json.loads((out / "run.json").read_text())["run_id"]
            return trial_session_id(seed, key, 1, run_id)
        return None

    return poll(session, within_s=deadline_s, every_s=0.1, unless=lambda: driver.poll() is not None)


def _trial_cli(
    needle: str, driver: subprocess.Popen[str], *, deadline_s: float
) -> tuple[psutil.Process, psutil.Process] | None:
    """(Ray worker, CLI) of the first trial CLI with ``needle`` in its arguments, once one
    runs under a Ray worker; None if none does within ``deadline_s`` or the driver ends."""

    def found() -> tuple[psutil.Process, psutil.Process] | None:
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if not any(needle in arg for arg in proc.info["cmdline"] or []):
                    continue
                worker = next(
                    (
                        p
                        for p in proc.parents()
                        if "ray::" in " ".join(p.cmdline())
                        or "default_worker" in " ".join(p.cmdline())
                    ),
                    None,
                )
            except psutil.Error:
                continue
            if worker is not None:
                return worker, proc
        return None

    return poll(found, within_s=deadline_s, every_s=0.1, unless=lambda: driver.poll() is not None)


def _kill_worker_of(
    session: str, driver: subprocess.Popen[str], server: ScriptedServer, *, deadline_s: float
) -> bool:
    """SIGKILL the Ray worker running the CLI of ``session`` (and that CLI), mid-trial:
    once the lead has started talking to the model."""
    found = _trial_cli(f"--session-id={session}", driver, deadline_s=deadline_s)
    if found is None:
        return False
    talking = poll(
        lambda: any(r.request.session_id == session for r in server.recorded("lead")),
        within_s=deadline_s,
        unless=lambda: driver.poll() is not None,
    )
    if not talking:
        return False
    for victim in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim.pid, signal.SIGKILL)
    return True


#: the scripted account's hidden limit on requests in flight, over every node's trials
HIDDEN_LIMIT = 3


def _node_trials(node: RayNode) -> tuple[int, set[str]]:
    """How many trial tasks run on ``node`` (workers titled ``ray::_trial_task``), and the
    sessions of the trial CLIs running there."""
    tasks, sessions = 0, set()
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info["cmdline"] or []
        session = next((a.split("=", 1)[1] for a in args if a.startswith("--session-id=")), None)
        task = bool(args) and args[0].startswith("ray::_trial_task")
        if (session or task) and node.owns(proc):
            tasks += task
            sessions |= {session} if session else set()
    return tasks, sessions


def _kill_node_mid_trial(
    node: RayNode,
    driver: subprocess.Popen[str],
    server: ScriptedServer,
    store_url: str,
    *,
    deadline_s: float,
) -> tuple[set[str], set[str]]:
    """Once every trial on ``node`` runs its CLI and one of them has had an answer from the
    model and is in the store, kill the node as a machine dies. Returns the sessions of
    the trials that ran on it then, and those of them the store held."""

    def started() -> tuple[set[str], set[str]] | None:
        tasks, running = _node_trials(node)
        answered = {
            r.request.session_id
            for r in server.recorded("lead")
            if r.finished is not None and r.status == 200
        }
        if len(running) != tasks or not running & answered:
            return None
        stored = running & {s.session_id for s in in_store(store_url, stored_sessions)}
        return (running, stored) if stored & answered else None

    found = poll(
        started, within_s=deadline_s, every_s=0.1, unless=lambda: driver.poll() is not None
    )
    if found is None:
        return set(), set()
    left = node.kill()
    assert not left, left
    return found


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(900)
@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_an_experiment_on_two_ray_nodes_keeps_the_limit_and_survives_losing_one(
    tmp_path: Path,
) -> None:
    """``teamlead experiment run --backend ray --limits redis://… --session-store redis://…``
    on a cluster of two nodes (``ray start --head``, ``ray start --address``), each its own
    home, against an account with a hidden limit of 3 requests in flight; the worker node
    is killed while its trials run.

    Both nodes' relays took their requests' places in the one Redis and learnt the true
    limit there; the killed node's trials were re-run once, on the head; every trial has
    one record; every trial's session is in the Redis store with how it ended, and the
    sessions that died with their node are there too, with no end."""
    spec_path = _spec(tmp_path, tasks=1, trials=2, name="scale")  # 4 trials, all at once
    spec = load_spec(spec_path)
    seed, keys = spec.experiment.seed, trial_order(spec)
    # Replies of 1 s keep the worker node's trials in flight long enough to kill it.
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, p_plain=0.0, p_solo=0.0, delay=1.0)
    out = tmp_path / "out"
    with (
        redis_server(tmp_path) as redis,
        ScriptedServer(script, concurrency_limit=HIDDEN_LIMIT, retry_after=0.5) as server,
        two_node_cluster(tmp_path / "cluster") as cluster,
    ):
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "driver")
        env = {**_env(claude), "RAY_ADDRESS": cluster.address}
        proc = _run(
            env,
            claude.cwd,
            *("experiment", "run", str(spec_path), "--out", str(out), "-q", "--backend", "ray"),
            *("--limits", redis.url, "--session-store", redis.url),
        )
        try:
            killed, stored_then = _kill_node_mid_trial(
                cluster.worker, proc, server, redis.url, deadline_s=300
            )
            code, stdout, err = _finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        assert code == 0, err
        assert killed, f"no trial ever ran on the worker node: {err[-2000:]}"
        limits = subprocess.run(
            [sys.executable, "-m", "teamlead", "limits", "--limits", redis.url, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        stored = {s.session_id: s for s in in_store(redis.url, stored_sessions)}
        requests = server.recorded()
    # (The cluster checked every process of its nodes gone; the driver started no Ray.)
    assert "shared limits:" not in err  # the Redis held for the whole run
    # The records: every trial once, none twice, each completed at its first attempt.
    records = read_records(out / "trials.jsonl").records
    assert sorted((r.variant, r.task, r.trial) for r in records) == sorted(map(tuple, keys))
    assert all(r.status == "completed" and not r.retried for r in records), records
    assert f"ran {len(keys)} trial(s), skipped 0 finished, 0 failed, 0 retried" in stdout
    # The killed node's trials: each re-run once by Ray, under a session of its own.
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    first = {trial_session_id(seed, k, 1, run_id): k for k in keys}
    assert killed <= first.keys()

    def rerun(session: str, n: int) -> str:
        return trial_session_id(seed, first[session], 1, f"{run_id}/rerun-{n}")

    asked = {r.request.session_id for r in requests}
    assert {s for s in first if rerun(s, 2) in asked} == killed
    assert not {s for s in first if rerun(s, 3) in asked}
    # The hidden limit: the account never answered more than 3 at once (it refuses the
    # 4th), the limit both nodes learnt in the one Redis is the true one, not a lower cut,
    # and it took at most a 429 per trial to learn it. No 429 reached a CLI: they do not
    # retry, so a trial would have failed.
    assert limits.returncode == 0, limits.stderr
    assert [entry["limit"] for entry in json.loads(limits.stdout)] == [HIDDEN_LIMIT]
    assert most_accepted_at_once(requests) == HIDDEN_LIMIT
    assert 0 < server.stats.rejected <= len(keys)
    assert not list(tmp_path.glob("**/teamlead/limits.sqlite3"))  # Redis only, on every node
    # The sessions: each trial's last one in the Redis store, with how it ended; one that
    # died with its node, in the store as far as it got, with no end (resumable).
    for session in (set(first) - killed) | {rerun(s, 2) for s in killed}:
        status = stored[session].status if session in stored else None
        assert status is not None and status.status == "completed", session
    for session in stored_then:
        assert session in stored and stored[session].status is None


@dataclass(frozen=True)
class _Cluster:
    address: str
    token: str


@pytest.fixture(scope="class")
def owned_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Cluster]:
    """A small local Ray the tests of :class:`TestOnAnOwnedRay` own and share, started by
    the backend's own :func:`ray_session` from a temp dir too deep for Ray's sockets, with
    token authentication as a cluster has. Its processes and session dir are checked gone
    after the last of them.

    Class-scoped fixtures start before the per-test isolation of ``tests/conftest.py``, so
    this one isolates the Claude state its Ray processes inherit itself, the same way."""
    from ray._raylet import AuthenticationTokenLoader

    root = tmp_path_factory.mktemp("owned-ray")
    deep = root / ("d" * 60)
    deep.mkdir()
    home = root / "home"
    (home / ".claude").mkdir(parents=True)
    mode = os.environ.get("RAY_AUTH_MODE")  # ray.init turns token mode on for good
    before = _ray_pids()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOME", str(home))
        env.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
        env.setenv("XDG_CACHE_HOME", str(root / "cache"))
        for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "RAY_ADDRESS", "RAY_TMPDIR"):
            env.delenv(name, raising=False)
        env.setenv("TMPDIR", str(deep))
        env.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        try:
            with ray_session(num_cpus=2):
                session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
                assert session_dir.is_dir() and not session_dir.is_relative_to(deep)
                token = AuthenticationTokenLoader.instance().get_raw_token()
                yield _Cluster(ray.get_runtime_context().gcs_address, token)
        finally:
            os.environ.pop("RAY_AUTH_MODE", None)
            if mode is not None:
                os.environ["RAY_AUTH_MODE"] = mode
    assert not session_dir.parent.exists()  # the run's temp dir is removed
    assert _wait_gone(_ray_pids() - before) == set()


@pytest.fixture
def ray_instance(owned_ray: _Cluster) -> Iterator[_Cluster]:
    """The shared owned Ray, and a check that every Ray process that appeared during the
    test (such as the workers of the job a ``teamlead`` run connected as) is gone after it.
    (An actor may take over a worker Ray had started before: the instance's own processes
    are checked gone when the last test of the class is done.)"""
    before = _ray_pids()
    yield owned_ray
    left = _wait_gone(_ray_pids() - before)
    assert left == set(), _described(left)


class TestOnAnOwnedRay:
    """Tests on one Ray instance they own and share (:func:`owned_ray`); each checks that
    the Ray processes that appeared while it ran are gone after it (:func:`ray_instance`)."""

    @pytest.mark.cli
    @pytest.mark.slow
    @pytest.mark.timeout(600)
    def test_worker_killed_mid_trial_yields_one_record(
        self, tmp_path: Path, ray_instance: _Cluster
    ) -> None:
        spec_path = _spec(tmp_path, tasks=1, trials=1, name="kill")
        spec = load_spec(spec_path)
        target = TrialKey("fan", "t0", 0)
        # Slow replies keep the trial in flight long enough to kill its worker: once its
        # lead's first request is seen, three replies of 1 s each are still to come.
        script = ProbabilisticFanOut(
            marker=MARKER, p_marked=1.0, p_plain=0.0, p_solo=0.0, delay=1.0
        )
        with ScriptedServer(script) as server:
            claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
            # As a user reaches a cluster: its address and its token.
            env = {
                **_env(claude),
                "RAY_ADDRESS": ray_instance.address,
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": ray_instance.token,
            }
            env.pop("RAY_AUTH_TOKEN_PATH", None)  # the local instance's own, in this process
            out = tmp_path / "out"
            proc = _run(
                env,
                claude.cwd,
                "experiment",
                "run",
                str(spec_path),
                "--out",
                str(out),
                "-q",
                "--backend",
                "ray",
            )
            session = _session_of(out, spec.experiment.seed, target, proc, deadline_s=120)
            killed = session is not None and _kill_worker_of(session, proc, server, deadline_s=240)
            code, stdout, err = _finish(proc)
            assert code == 0, err
        assert killed, "the target trial's CLI never started"
        records = read_records(out / "trials.jsonl").records
        keys = [(r.variant, r.task, r.trial) for r in records]
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 2
        again = next(r for r in records if (r.variant, r.task, r.trial) == tuple(target))
        # Ray re-ran it; the driver wrote it once
        assert again.status == "completed" and again.parallel
        assert "ran 2 trial(s)" in stdout

    @pytest.mark.slow
    @pytest.mark.anyio
    @pytest.mark.timeout(300)
    async def test_governors_on_two_nodes_share_learnt_limits(self, ray_instance: _Cluster) -> None:
        """A cut learnt by one process's governor is seen by another's, in its own time base."""
        from teamlead._governor.aimd import Limits
        from teamlead.experiment.running.ray_account import RayAccount
        from teamlead.governor import Governor, GovernorPolicy, bucket_key
        from teamlead.testing import FakeClock

        key = bucket_key("anthropic", "claude-opus-5-5")
        clock_a, clock_b = FakeClock(start=100.0), FakeClock(start=5000.0)  # same wall time
        account_a = RayAccount.connect("share-test", clock=clock_a)
        account_b = RayAccount.connect("share-test", clock=clock_b)
        try:
            policy = GovernorPolicy(ceiling=4, max_total=4)
            node_a = Governor(policy, clock=clock_a, account=account_a)
            async with node_a.slot(key) as slot:
                slot.rate_limited(3.0)
            learnt = node_a.state(key)
            assert learnt.cap < 4 and learnt.cooldown_s > 0
            account_b.refresh()
            node_b = Governor(policy, clock=clock_b, account=account_b)
            seen = node_b.state(key)
            assert (seen.cap, seen.epoch) == (learnt.cap, learnt.epoch)
            assert seen.cooldown_s == pytest.approx(learnt.cooldown_s)
            # A stale replica's write (an older epoch) does not undo the cut.
            account_b.update(key, lambda _: (Limits(cap=4, epoch=learnt.epoch - 1), None))
            account_a.refresh()
            limits = account_a.limits(key)
        finally:
            ray.kill(account_a.actor)  # the instance is shared: leave nothing running on it
        assert limits is not None and limits.cap == learnt.cap

    @pytest.mark.slow
    @pytest.mark.anyio
    @pytest.mark.timeout(300)
    async def test_a_worker_account_kept_fresh_sees_a_cut_made_elsewhere(
        self, ray_instance: _Cluster
    ) -> None:
        """While a trial runs, its worker's replica follows what another node learnt."""

        from teamlead._governor.aimd import Limits
        from teamlead.experiment.running.ray_account import RayAccount, kept_fresh

        elsewhere = RayAccount.connect("fresh-test")
        here = RayAccount.connect("fresh-test")
        try:
            async with kept_fresh(here, every_s=0.05):
                elsewhere.update("bucket", lambda _: (Limits(cap=2, epoch=3), None))
                await apoll(lambda: here.limits("bucket") is not None, within_s=60, every_s=0.05)
        finally:
            ray.kill(here.actor)  # the instance is shared: leave nothing running on it
        seen = here.limits("bucket")
        assert seen is not None and (seen.cap, seen.epoch) == (2, 3)
