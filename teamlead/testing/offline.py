"""Run the real bundled Claude Code CLI offline, against a scripted model server.

:class:`OfflineClaude` owns a throwaway state directory and builds
``ClaudeAgentOptions`` whose environment isolates all Claude state there
(``CLAUDE_CONFIG_DIR``, ``HOME``, ``TMPDIR``), turns off non-essential traffic,
auto-update and telemetry, sets ``IS_SANDBOX=1`` when running as root, and points
``ANTHROPIC_BASE_URL`` at the loopback server. It refuses any base URL off loopback,
so a test can never reach a real API.

Example:
    >>> with ScriptedServer(script) as server, OfflineClaude(server.base_url) as claude:
    ...     async for msg in claude_agent_sdk.query(prompt="hi", options=claude.options()):
    ...         ...  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

from .._claude import bundled_cli_path, cli_version, ensure_loopback

__all__ = ["OfflineClaude", "bundled_cli_path", "cli_version", "ensure_loopback", "offline_env"]


_ROUTE_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
)


def offline_env(
    state_dir: Path,
    base_url: str,
    *,
    max_retries: int | None = 0,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment that runs the CLI offline with its state under ``state_dir``.

    ``max_retries`` is ``CLAUDE_CODE_MAX_RETRIES``; ``None`` leaves it unset, so the CLI
    retries as it does by default.
    """
    ensure_loopback(base_url)
    state_dir = Path(state_dir)
    config = state_dir / ".claude"
    tmp = state_dir / "tmp"
    config.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-offline-test-key",
        "CLAUDE_CONFIG_DIR": str(config),
        "HOME": str(state_dir),
        "TMPDIR": str(tmp),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # the host the CLI really connects to must be the loopback one: no proxy in
        # between, no Bedrock or Vertex endpoint inherited from the parent's environment
        **dict.fromkeys(_ROUTE_VARS, ""),
        "NO_PROXY": "127.0.0.1,::1",
        "no_proxy": "127.0.0.1,::1",
    }
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    if extra:
        env.update(extra)
    ensure_loopback(env["ANTHROPIC_BASE_URL"])
    return env


class OfflineClaude:
    """An isolated, offline home for the real CLI.

    Args:
        base_url: the scripted server's URL (loopback only).
        state_dir: where Claude state lives; a fresh temp dir (removed on exit) if omitted.
        max_retries: ``CLAUDE_CODE_MAX_RETRIES``; 0 makes injected faults fail fast,
            ``None`` leaves the CLI its default retries.
        env: extra variables for the CLI.
    """

    def __init__(
        self,
        base_url: str,
        *,
        state_dir: Path | None = None,
        max_retries: int | None = 0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        ensure_loopback(base_url)
        bundled_cli_path()
        self._owned = state_dir is None
        self.state_dir = (
            Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="teamlead-"))
        )
        self.env = offline_env(self.state_dir, base_url, max_retries=max_retries, extra=env)
        self.cwd = self.state_dir / "project"
        self.cwd.mkdir(exist_ok=True)

    @property
    def config_dir(self) -> Path:
        """``CLAUDE_CONFIG_DIR`` for this home."""
        return Path(self.env["CLAUDE_CONFIG_DIR"])

    def options(
        self, base: ClaudeAgentOptions | None = None, **overrides: Any
    ) -> ClaudeAgentOptions:
        """``ClaudeAgentOptions`` that run offline here, on top of ``base``."""
        base = base or ClaudeAgentOptions()
        env = {**self.env, **dict(base.env)}
        ensure_loopback(env.get("ANTHROPIC_BASE_URL", ""))
        fields: dict[str, Any] = {"env": env, "cwd": base.cwd or str(self.cwd)}
        if base.permission_mode is None:
            fields["permission_mode"] = "bypassPermissions"
        fields.update(overrides)
        return dataclasses.replace(base, **fields)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> OfflineClaude:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
