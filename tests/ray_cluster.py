"""A Ray cluster of two nodes on this machine, as ``ray start`` makes one: a head
(``ray start --head``) and a worker node (``ray start --address``), each a machine of its
own (its home, cache and Ray temp dir), both on loopback.

A node's processes are one process group (``ray start`` is started in a new session and
its daemons keep its group), so :meth:`RayNode.kill` takes the node away as a dying
machine does: SIGKILL to every process of it, the trial CLIs its workers started
included. The head's GCS checks the nodes' health every half second, so a node killed
so is declared dead in a few seconds (Ray's default takes about half a minute).
Every process of both nodes (their workers and the CLIs those started included) is
killed and checked gone at the end, every wait bounded. (Ray workers have process groups
of their own: a node's processes are its group and everything they started.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from .isolated import isolated_env
from .redis_server import free_port

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")

#: the head's GCS declares a node dead after 3 missed checks of 0.5 s (Ray: 5 of 3 s)
_HEALTH = {
    "RAY_health_check_initial_delay_ms": "500",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}
_START_S = 120.0
_STOP_S = 30.0
_SOCKET_BUDGET = 40  # a Ray temp dir's sockets sit ~66 bytes below it; a path has 107


def _short_dir(prefix: str) -> Path:
    system = tempfile.gettempdir()
    parent = system if len(system) + len(prefix) + 9 <= _SOCKET_BUDGET else os.sep + "tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


@dataclass
class RayNode:
    """One node: its name, its process group and its Ray temp dir."""

    name: str
    pgid: int
    temp_dir: Path

    def processes(self) -> list[psutil.Process]:
        """Every live process of the node: its group, and what they started."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == self.pgid:
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
        return [p for p in found.values() if _alive(p)]

    def owns(self, proc: psutil.Process) -> bool:
        """Whether ``proc`` runs on this node (its group's, or started by one of them)."""
        with contextlib.suppress(psutil.Error, OSError):
            return any(os.getpgid(p.pid) == self.pgid for p in [proc, *proc.parents()])
        return False

    def kill(self, within_s: float = _STOP_S) -> list[psutil.Process]:
        """SIGKILL every process of the node; returns those still alive after ``within_s``."""
        for _ in range(3):  # a process may start another while its group is being killed
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(procs, timeout=within_s / 3)
        return self.processes()


@dataclass
class TwoNodes:
    """The cluster: ``address`` for ``RAY_ADDRESS``, its ``head`` and its ``worker`` node."""

    address: str
    head: RayNode
    worker: RayNode


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _start(name: str, args: list[str], env: Mapping[str, str], log: Path) -> RayNode:
    assert RAY is not None
    temp = _short_dir(f"tl{name[:2]}-")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [RAY, "start", *args, f"--temp-dir={temp}", "--node-ip-address=127.0.0.1"],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the node's daemons keep this group: one kill stops it
        )
    node = RayNode(name, proc.pid, temp)
    try:
        code = proc.wait(timeout=_START_S)
    except subprocess.TimeoutExpired:
        code = None
    if code != 0:
        node.kill()
        shutil.rmtree(temp, ignore_errors=True)
        raise RuntimeError(
            f"ray start of the {name} node failed ({code}): {log.read_text()[-2000:]}"
        )
    return node


@contextmanager
def two_node_cluster(root: Path, *, head_cpus: int = 1, worker_cpus: int = 1) -> Iterator[TwoNodes]:
    """Start the head and the worker node under ``root`` (logs, homes); stop both after.

    Token authentication is off, as ``ray start`` leaves it without ``RAY_AUTH_MODE``; the
    nodes and the driver listen on loopback only.
    """
    port = free_port()
    common = ["--disable-usage-stats"]
    nodes: list[RayNode] = []
    try:
        head_env = {**isolated_env(root / "head"), **_HEALTH, "RAY_USAGE_STATS_ENABLED": "0"}
        for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            head_env.pop(name, None)
        head = _start(
            "head",
            [
                "--head",
                f"--port={port}",
                f"--num-cpus={head_cpus}",
                "--include-dashboard=false",
                *common,
            ],
            head_env,
            root / "head.log",
        )
        nodes.append(head)
        worker_env = {**head_env, **isolated_env(root / "worker")}
        worker = _start(
            "worker",
            [f"--address=127.0.0.1:{port}", f"--num-cpus={worker_cpus}", *common],
            worker_env,
            root / "worker.log",
        )
        nodes.append(worker)
        yield TwoNodes(f"127.0.0.1:{port}", head, worker)
    finally:
        left = []
        for node in reversed(nodes):
            left += node.kill()
            shutil.rmtree(node.temp_dir, ignore_errors=True)
    assert not left, [" ".join(p.cmdline())[:120] for p in left if _alive(p)]
