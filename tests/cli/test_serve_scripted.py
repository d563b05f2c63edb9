"""`teamlead serve-scripted`'s start message on the real CLI: its ``export`` line is all a
shell needs to run `teamlead ask` against the server. The test pastes it, as a user
would, and the run completes (the scenario list and the log lines are checked in
tests/test_serve_scripted.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from .conftest import TEAMLEAD

pytestmark = pytest.mark.cli


@pytest.mark.slow  # a server process and a real `teamlead ask` against it
@pytest.mark.timeout(180)
def test_the_printed_export_line_is_all_ask_needs(tmp_path: Path) -> None:
    """The run completes, and what its relay learnt of the scripted model's 429s stays in
    its process: the machine's store, which real runs read, is never written."""
    server = subprocess.Popen(
        [*TEAMLEAD, "serve-scripted", "--scenario", "rate-limited", "--log", "on"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        exports = ""
        for _ in range(3):
            line = server.stderr.readline()
            if line.startswith("export "):
                exports = line
                break
        assert exports, "no export line in the start message"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
        env.update(word.split("=", 1) for word in shlex.split(exports)[1:])
        home = tmp_path / "user"
        (home / ".claude").mkdir(parents=True)
        (tmp_path / "tmp").mkdir()
        env.update(
            HOME=str(home),
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            TMPDIR=str(tmp_path / "tmp"),
            XDG_CACHE_HOME=str(home / ".cache"),  # where the machine's learnt limits live
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        ask = subprocess.run(
            [*TEAMLEAD, "ask", "Investigate.", "--quiet"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        server.terminate()
        _, log = server.communicate(timeout=10)
    assert ask.returncode == 0, ask.stderr
    assert "FINDING[agent-1]" in ask.stdout and "FINDING[agent-2]" in ask.stdout
    served = int(re.search(r"stopped after (\d+) requests", log).group(1))  # type: ignore[union-attr]
    logged = [line for line in log.splitlines() if re.match(r"\[ *\d+\.\ds\] #\d+ ", line)]
    assert len(logged) == served and served >= 4
    assert any("-> 429 fault 429" in line for line in logged)
    assert any("lead -> 200 tool_use Agent (2 calls)" in line for line in logged)
    assert not (home / ".cache" / "teamlead" / "limits.sqlite3").exists()
