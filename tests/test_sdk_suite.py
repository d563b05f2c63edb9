"""The SDK's own ``query()`` tests, run against :func:`teamlead.query`: drop-in means drop-in.

The test downloads the sdist of the installed claude-agent-sdk version (as the build
fetches any dependency), extracts the test modules that drive ``query()``, and runs them
with pytest in a subprocess, under asyncio and trio (the SDK's conftest parametrizes
``anyio_backend``), with each module's imported ``query`` replaced by ``teamlead.query``
(:mod:`tests.sdk_dropin_plugin`). Every test must pass; none is left out.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .sdk_dropin_plugin import REPLACED

ROOT = Path(__file__).resolve().parents[1]

#: The SDK's test modules that drive ``query()`` (mock transports, a scripted CLI).
MODULES = (
    "test_query",
    "test_client",
    "test_integration",
    "test_streaming_client",
    "test_verbatim_prompts",
    "test_option_warnings",
    "test_run_end_subprocess",
    "test_session_resume",
    "test_transcript_mirror",
)

#: The SDK's own pytest settings, without its ``pythonpath = ["src"]``: the installed SDK
#: is the one teamlead runs on.
_INI = """[pytest]
addopts = --import-mode=importlib -p anyio -p tests.sdk_dropin_plugin
"""


def _sdk_tests(into: Path) -> Path:
    """The installed SDK version's sdist, downloaded into ``into``; its ``tests/`` folder
    (the modules above and their conftest) extracted there."""
    version = importlib.metadata.version("claude-agent-sdk")
    cache = into / "cache"
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    subprocess.run(
        [*pip, "--dest", str(cache), f"claude-agent-sdk=={version}"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = cache.glob("claude_agent_sdk-*.tar.gz")
    wanted = {f"{name}.py" for name in (*MODULES, "conftest")}
    suite = into / "suite"
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.isfile() and Path(m.name).parent.name == "tests" and Path(m.name).name in wanted
        ]
        assert {Path(m.name).name for m in members} == wanted, "the sdist's tests moved"
        for member in members:
            source = archive.extractfile(member)
            assert source is not None
            (suite / "tests").mkdir(parents=True, exist_ok=True)
            (suite / "tests" / Path(member.name).name).write_bytes(source.read())
    (suite / "pytest.ini").write_text(_INI, encoding="utf-8")
    return suite


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_sdks_own_query_tests_pass_against_teamlead_query(tmp_path: Path) -> None:
    suite = _sdk_tests(tmp_path)
    report = tmp_path / "report.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "60",
            f"--junitxml={report}",
            *(f"tests/{name}.py" for name in MODULES),
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    replaced = next(line for line in run.stdout.splitlines() if line.startswith(REPLACED))
    assert replaced.removeprefix(REPLACED).split() == sorted(MODULES)
    totals = ET.parse(report).getroot().find("testsuite")
    assert totals is not None
    counts = {k: int(totals.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
    names = [case.get("name", "") for case in totals.iter("testcase")]
    # both backends ran every backend-parametrized test
    assert sum("[trio" in n for n in names) == sum("[asyncio" in n for n in names) > 0
    assert counts["tests"] == len(names) > 0
