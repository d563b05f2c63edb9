"""The docs site builds with ``mkdocs build --strict``, offline, and shows the public API.

The build runs in a child interpreter whose audit hook refuses every connection and name
lookup off loopback, so a plugin or theme feature that downloads something (fonts, social
cards, remote inventories) fails the test instead of needing the network in CI.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import teamlead
import teamlead.events
import teamlead.experiment
import teamlead.governor
import teamlead.policy
import teamlead.testing
from teamlead.events import EVENT_VERSION
from teamlead.experiment import RECORD_VERSION, REPORT_VERSION

from .docs_pages import DOCS, MKDOCS_YML, ROOT

#: Run mkdocs with the network refused: any connection or lookup off loopback raises.
OFFLINE_MKDOCS = """
import runpy, sys

LOOPBACK = {"127.0.0.1", "::1", "localhost"}

def refuse(event, args):
    if event == "socket.getaddrinfo" and str(args[0]) not in LOOPBACK:
        raise OSError(f"the docs build looked up {args[0]!r}: it must not need the network")
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][0] not in LOOPBACK:
        raise OSError(f"the docs build connected to {args[1]!r}: it must not need the network")
    if event == "urllib.Request":
        raise OSError(f"the docs build fetched {args[0]!r}: it must not need the network")

sys.addaudithook(refuse)
sys.argv = ["mkdocs", *sys.argv[1:]]
runpy.run_module("mkdocs", run_name="__main__", alter_sys=True)
"""

#: The public modules the API pages document, and the page of each.
API_PAGES = {
    teamlead: "api/teamlead/index.html",
    teamlead.events: "api/events/index.html",
    teamlead.policy: "api/policy/index.html",
    teamlead.governor: "api/governor/index.html",
    teamlead.experiment: "api/experiment/index.html",
    teamlead.testing: "api/testing/index.html",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "NO_MKDOCS_2_WARNING": "1",  # Material's notice about MkDocs 2, not a build warning
    }
    build = subprocess.run(
        [sys.executable, "-c", OFFLINE_MKDOCS, "build", "--strict", "--config-file",
         str(MKDOCS_YML), "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    assert "WARNING" not in output, output
    return out


@pytest.mark.slow  # griffe reads the whole package; the build takes a while on two cores
@pytest.mark.timeout(900)
def test_the_site_builds_strictly_without_the_network(site: Path) -> None:
    for page in sorted(DOCS.rglob("*.md")):  # docs/x.md is x/index.html, as MkDocs writes it
        path = page.relative_to(DOCS).with_suffix("")
        built = site / (path.parent if path.name == "index" else path) / "index.html"
        assert built.is_file(), page


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_api_pages_show_every_public_name(site: Path) -> None:
    missing = []
    for module, page in API_PAGES.items():
        html = (site / page).read_text(encoding="utf-8")
        for name in module.__all__:
            if f'id="{module.__name__}.{name}"' not in html:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, missing


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def test_the_versions_the_pages_name_are_the_codes() -> None:
    assert f"`version` (currently {EVENT_VERSION}," in _flat(DOCS / "json-schema.md")
    experiments = _flat(DOCS / "experiments.md")
    assert f"the JSON (`version` {REPORT_VERSION}, `teamlead.experiment.REPORT_VERSION`" in (
        experiments
    )
    assert f"version {RECORD_VERSION} of the record" in experiments


def test_every_page_is_in_the_nav() -> None:
    config = MKDOCS_YML.read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", config, flags=re.M))
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")}
    assert pages == listed, (sorted(pages - listed), sorted(listed - pages))


def test_the_pages_and_the_public_docstrings_name_no_unexplained_source() -> None:
    # "zcode's three-state amend" meant nothing to a reader: the amend's three states are
    # said in words (left out, None, a value); an anchor the docs keep is explained where named
    said = [_flat(page) for page in DOCS.rglob("*.md")]
    said += [inspect.getdoc(obj) or "" for obj in (teamlead, teamlead.RunControl)]
    said.append(inspect.getdoc(teamlead.RunControl.amend) or "")
    assert not [text for text in said if "zcode" in text.lower()]
    amend = inspect.getdoc(teamlead.RunControl.amend) or ""
    assert "None" in amend and "left out" in amend
