"""A real ``redis-server`` on a free loopback port, for the tests that share limits across
machines: started in a temp dir with no persistence, stopped (and reaped) after."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One running server: ``url`` to connect, :meth:`stop` to take it away mid-test,
    :meth:`pause` and :meth:`resume` to hang it (SIGSTOP) and let it go on.

    ``password``: the server refuses clients that do not give it (``url`` has none).
    """

    def __init__(self, workdir: Path, *, password: str | None = None) -> None:
        assert REDIS_SERVER is not None
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        extra = [] if password is None else ["--requirepass", password]
        self._proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start within 10 s")

    def pause(self) -> None:
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(timeout=10)


@contextmanager
def redis_server(workdir: Path, *, password: str | None = None) -> Iterator[RedisServer]:
    server = RedisServer(workdir, password=password)
    try:
        yield server
    finally:
        server.stop()
