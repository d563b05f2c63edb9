"""The Ray session of a ``--backend ray`` run: reach a cluster, or start a local Ray for it.

:func:`ray_session` connects to ``RAY_ADDRESS`` (a cluster the user runs), or starts a
private local Ray instance for the run and stops it after. A local instance needs care
that a plain ``ray.init()`` does not take:

- its session files go in a short temp dir of its own, because its unix sockets live
  there and a socket path may have at most 107 bytes (a deep ``TMPDIR``, such as a test's
  or a CI job's, exceeds it), and that dir is removed after the run;
- it gets a fresh authentication token of its own in that dir (Ray 2.5x turns token
  authentication on for a new local instance): nothing is written to ``~/.ray``, and a
  second session in the same process is not handed the first one's token;
- a failed start leaves nothing running and is one line, not Ray's traceback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ...errors import UsageError

__all__ = ["NAMESPACE", "error_line", "ray_session"]

NAMESPACE = "teamlead"
_SOCKET_BUDGET = 40
"""Longest temp dir of a local Ray: the session's sockets sit about 66 bytes below it, and a
unix socket path may have 107."""
_PREFIX = "tlray-"
_TOKEN_VARS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
_LOCAL_STARTS = 2
_REACH_TIMEOUT_S = 10.0
_CONNECT_ENV = {"RAY_gcs_server_port_wait_time_s": "2"}
"""For a connect (the user's own value wins): Ray tries a cluster's GCS this many times,
each up to about 30 s; its default, 20 times, leaves a wrong address hanging 10 minutes."""


def _short_temp_dir() -> Path:
    """A fresh directory (mode 0700) for a local Ray's session files.

    In ``RAY_TMPDIR`` when set; else in the system temp dir when it is short enough for
    Ray's sockets, else in ``/tmp``.
    """
    chosen = os.environ.get("RAY_TMPDIR")
    if not chosen:
        system = tempfile.gettempdir()
        fits = len(system) + len(_PREFIX) + 9 <= _SOCKET_BUDGET
        chosen = system if fits else str(Path(os.sep) / "tmp")
    try:
        return Path(tempfile.mkdtemp(prefix=_PREFIX, dir=chosen))
    except OSError as exc:
        raise UsageError(
            f"cannot start a local Ray instance: no temp dir in {chosen}: {exc.strerror or exc}"
        ) from None


def _reset_token_cache() -> None:
    """Make this process's Ray read its authentication token again (it caches the first)."""
    import ray._raylet

    loader = getattr(ray._raylet, "AuthenticationTokenLoader", None)
    if loader is not None:  # None: a Ray without token authentication
        loader.instance().reset_cache()


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in the environment for the block (Ray's processes inherit them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _local_env(temp: Path) -> dict[str, str]:
    """The run's own token in ``temp``, unless the user chose one (or turned auth off)."""
    if any(os.environ.get(name) for name in _TOKEN_VARS):
        return {}
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return {}
    token = temp / "auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    return {"RAY_AUTH_TOKEN_PATH": str(token)}


def _check_reachable(target: str) -> None:
    """Fail at once when nothing listens at ``target``'s host and port (Ray would retry)."""
    host, sep, port = target.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray judges itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        raise UsageError(
            f"cannot reach the Ray cluster at {target}: {exc.strerror or exc}"
        ) from None


def _start_error(target: str | None, exc: BaseException) -> str:
    if not target:
        return f"cannot start a local Ray instance: {error_line(exc)}"
    hint = ""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        hint = " (a cluster with token authentication needs RAY_AUTH_MODE=token and its token)"
    return f"cannot reach the Ray cluster at {target}: {error_line(exc)}{hint}"


def error_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its type when it says nothing); for a task's
    error, of what the task raised: the error's own first line says only where it ran."""
    cause = getattr(exc, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _start_local(stack: contextlib.ExitStack, num_cpus: int | None) -> None:
    """``ray.init`` a local instance whose temp dir (and token) ``stack`` removes after."""
    import ray

    temp = _short_temp_dir()
    stack.callback(shutil.rmtree, temp, ignore_errors=True)
    local = _local_env(temp)
    if local:
        stack.callback(_reset_token_cache)
        stack.enter_context(_environ(local))
        _reset_token_cache()
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        namespace=NAMESPACE,
        log_to_driver=False,
        _temp_dir=str(temp),
    )


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[None]:
    """Connect to ``address`` (or ``RAY_ADDRESS``), else start a local Ray for the block.

    An address nothing listens at fails at once, and a connect gives up after about a
    minute (Ray's own default retries for ten).

    A local Ray is shut down at the end: its processes are stopped and its temp dir is
    removed. A local start that fails is tried once more from scratch (Ray gives its
    processes fixed start-up windows that a loaded machine can miss). A Ray session
    already open in this process is used and left open.

    Raises:
        UsageError: Ray is not installed, or the cluster cannot be started or reached.
    """
    try:
        import ray
    except ImportError:
        raise UsageError(
            "the ray backend needs Ray: pip install -e '.[ray]' in the teamlead checkout"
        ) from None
    if ray.is_initialized():
        yield
        return
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target == "local":
        target = None
    if target:
        _check_reachable(target)
    with contextlib.ExitStack() as stack:
        for attempt in range(1 if target else _LOCAL_STARTS):
            try:
                if target:
                    unset = {k: v for k, v in _CONNECT_ENV.items() if k not in os.environ}
                    with _environ(unset):
                        ray.init(address=target, namespace=NAMESPACE, log_to_driver=False)
                else:
                    _start_local(stack, num_cpus)
                break
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds: all "no cluster"
                ray.shutdown()  # whatever a failed start left running
                if target or attempt + 1 == _LOCAL_STARTS:
                    raise UsageError(_start_error(target, exc)) from None
                stack.close()  # the failed start's temp dir and environment
            except BaseException:  # interrupted while starting
                ray.shutdown()
                raise
        try:
            yield
        finally:
            ray.shutdown()
