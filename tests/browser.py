"""The tests' way to look at ``teamlead view``: the real command serving, and its page in a
real headless Chromium (the system's, driven by Playwright) that fails the test on any
console error, page error or dialog."""

from __future__ import annotations

import http.client
import json
import resource
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["CHROMIUM", "chromium_page", "detail_events", "serving_view", "view_events"]

CHROMIUM = shutil.which("chromium")
_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@contextmanager
def serving_view(
    env: dict[str, str], *args: str, open_files: int | None = None, stderr: IO[str] | None = None
) -> Iterator[str]:
    """``teamlead view ARGS`` serving until the block ends (it must end with code 0, as a
    server's end does): the URL it printed first. ``open_files`` lowers its open-file
    limit; ``stderr`` takes what it writes there (else it is shown when it fails)."""

    def limited() -> None:
        if open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))

    proc = subprocess.Popen(
        [sys.executable, "-m", "teamlead", "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr,
        text=True,
        env=env,
        preexec_fn=limited if open_files is not None else None,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout is not None, "teamlead view printed no URL"
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "/?token=" in url, url
        yield url
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def detail_events(url: str, run: str = "log") -> Iterator[dict[str, Any]]:
    """The ``detail`` events ``teamlead view`` serves at ``url`` for ``run``, as its page's
    stream gets them (each read waits at most 30 s)."""
    return view_events(url, f"/detail?run={run}", "detail")


def view_events(url: str, target: str, name: str) -> Iterator[Any]:
    """The ``name`` events of the stream ``teamlead view`` serves at ``url`` + ``target``
    (``/events?`` for the runs, ``/detail?run=RUN``), as its page gets them (each read
    waits at most 30 s)."""
    address = urlsplit(url)
    token = url.split("token=", 1)[1]
    connection = http.client.HTTPConnection("127.0.0.1", address.port, timeout=30)
    try:
        connection.request(
            "GET",
            f"{target}&token={token}",
            headers={"host": f"127.0.0.1:{address.port}"},
        )
        answer = connection.getresponse()
        assert answer.status == 200
        event = None
        while line := answer.readline():
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                event = text.removeprefix("event: ")
            elif text.startswith("data: ") and event == name:
                yield json.loads(text.removeprefix("data: "))
    finally:
        connection.close()


@contextmanager
def chromium_page(url: str) -> Iterator[Page]:
    """``url`` open in headless Chromium (skipped without one); no console error, page
    error or dialog may have come by the block's end."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("dialog", lambda dialog: (problems.append(dialog.message), dialog.dismiss()))
            page.goto(url, timeout=30_000)
            yield page
            assert problems == []
        finally:
            browser.close()
