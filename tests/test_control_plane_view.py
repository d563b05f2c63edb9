"""``teamlead view``: the local web page of the runs, served by the real command, opened in a
real headless Chromium (the system's, driven by Playwright).

The run on the page is one this test serves itself: a registry entry whose control
endpoint (the real :class:`~teamlead._control.endpoint.Endpoint`, on an event loop in a
thread) answers with a steering that records what it was asked and whose status the test
changes, so the page's live updates and its buttons are checked end to end without a
model. Its command is hostile markup, which the page must show as text.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from teamlead._control.endpoint import Endpoint, WatchFeed
from teamlead._control.registry import Registry
from teamlead.errors import ControlError

from .browser import chromium_page, serving_view

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.slow]

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>&amp;'
#: An agent description that would show its row's state, tokens and requests backwards.
BIDI = "review \u202e\u2066gpj.exe\u2069\u200f\u061c\x1b[2J"
#: Every bidi control the terminal's rule escapes.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@dataclass
class Steering:
    """A run that records what it was asked; ``state`` is what its status says."""

    state: str = "running"
    asked: list[tuple[str, object]] = field(default_factory=list)
    #: what its ``detail`` refuses with, while set
    refusing: str | None = None

    def status(self) -> dict[str, Any]:
        return {
            "status": self.state,
            "session_id": "5e551011-aaaa",
            "agents": {"running": 2, "queued": 1, "done": 3, "failed": 0},
            "tokens": 1234,
            "requests": 9,
            "cap": 3,
            "held": 1 if self.state == "paused" else 0,
        }

    def detail(self) -> dict[str, Any]:
        if self.refusing is not None:
            raise ControlError(self.refusing, code="state")
        agent = {"id": "a1", "kind": "agent", "label": HOSTILE, "state": "running", "children": []}
        reversed_ = {
            "id": "a2",
            "kind": "agent",
            "label": BIDI,
            "state": "done",
            "tokens": 4321,
            "requests": 7,
            "children": [],
        }
        return {
            "version": 1,
            "run": "r",
            "source": "live",
            "status": self.state,
            "started": 1000.0,
            "now": 1030.0,
            "tree": {
                "id": "lead",
                "kind": "lead",
                "label": "lead",
                "state": self.state,
                "tokens": 10,
                "requests": 2,
                "children": [agent, reversed_],
            },
            "queue": [{"tool_use_id": "t", "description": HOSTILE, "waited_s": 2.5}],
            "approvals": [{"tool": "Bash", "agent": HOSTILE, "what": HOSTILE, "waited_s": 1}],
            "limits": [
                {
                    "key": HOSTILE,
                    "points": [[1000.0, 8, 8, "start"], [1010.0, 2, 2, "rate_limited"]],
                }
            ],
        }

    def stop(self, *, now: bool) -> str:
        self.asked.append(("stop", now))
        return f"stopping run{' now' if now else ''}"

    def pause(self) -> str:
        self.asked.append(("pause", None))
        self.state = "paused"
        return "paused run"

    def unpause(self) -> str:
        raise ControlError("this run refuses to go on", code="state")

    def amend(self, changes: Mapping[str, int | str | None]) -> str:
        return "amended"


@dataclass
class Served:
    url: str
    steering: Steering
    run: str

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 0

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]


@pytest.fixture
def served() -> Iterator[Served]:
    """A fake live run in the test's runtime directory, and `teamlead view` serving it."""
    steering = Steering()
    registration = Registry().register(mode="query", command=f"teamlead ask {HOSTILE}")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    endpoint = Endpoint(registration.socket, steering, run=registration.run, feed=WatchFeed())
    asyncio.run_coroutine_threadsafe(endpoint.start(), loop).result(timeout=10)
    registration.write()
    try:
        with serving_view(dict(os.environ)) as url:
            yield Served(url, steering, registration.run)
    finally:
        asyncio.run_coroutine_threadsafe(endpoint.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        registration.remove()


def _request(
    served: Served,
    method: str,
    path: str,
    *,
    host: str | None = None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True)
        connection.putheader("Host", host or f"127.0.0.1:{served.port}")
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body or b"")))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_page_refuses_requests_without_the_token_a_foreign_host_or_origin(
    served: Served,
) -> None:
    token = served.token
    assert _request(served, "GET", f"/?token={token}")[0] == 200
    # the page alone carries nothing of the runs: it asks for them with the token
    assert _request(served, "GET", "/")[0] == 200
    assert _request(served, "GET", "/events")[0] == 403
    assert _request(served, "GET", "/events?token=wrong")[0] == 403
    assert _request(served, "GET", f"/events?token={token[:-1]}")[0] == 403
    # another site's name rebound to 127.0.0.1 sends its own Host
    assert _request(served, "GET", f"/?token={token}", host=f"evil.example:{served.port}")[0] == 403
    button = json.dumps({"run": served.run, "op": "pause"}).encode()
    own = {"x-teamlead-token": token, "content-type": "application/json"}
    assert _request(served, "POST", "/act", headers=own, body=button)[0] == 403  # no Origin
    other = {**own, "origin": "http://evil.example"}
    assert _request(served, "POST", "/act", headers=other, body=button)[0] == 403
    origin = {**own, "origin": f"http://127.0.0.1:{served.port}"}
    assert _request(served, "POST", "/act", headers=origin, body=b"x" * 5000)[0] == 413
    status, said = _request(served, "POST", "/act", headers=origin, body=b'{"op": "rm"}')
    assert status == 400 and not json.loads(said)["ok"]
    assert served.steering.asked == []  # nothing refused reached the run
    status, page = _request(served, "GET", f"/?token={token}")
    assert b"window.pwned" not in page  # the page carries no run text: it fetches it


@pytest.fixture
def page(served: Served) -> Iterator[Page]:
    with chromium_page(served.url) as page:
        yield page


def test_the_page_lists_the_runs_live_and_shows_their_text_as_text(
    served: Served, page: Page
) -> None:
    row = page.locator(f'tr[data-run="{served.run}"]')
    row.wait_for(timeout=30_000)
    assert urlsplit(page.url).query == ""  # the token left the address bar
    cells = row.locator("td")
    assert cells.nth(0).inner_text() == served.run
    assert cells.nth(3).inner_text() == "running"
    assert cells.nth(4).inner_text() == "2/1/3/0"
    assert row.locator("td.command").inner_text() == f"teamlead ask {HOSTILE}"
    assert page.evaluate("window.pwned") is None  # nothing of the command ran
    assert page.locator("tbody img, tbody script").count() == 0
    served.steering.state = "stopping"  # the run changes: the page follows by itself
    page.locator(f'tr[data-run="{served.run}"] td.status', has_text="stopping").wait_for(
        timeout=30_000
    )


def test_a_reload_of_the_page_keeps_it_working_and_a_page_without_the_token_says_where_it_is(
    served: Served, page: Page
) -> None:
    row = f'tr[data-run="{served.run}"]'
    page.locator(row).wait_for(timeout=30_000)
    page.reload()  # its address no longer carries the token: the tab kept it
    page.locator(row).wait_for(timeout=30_000)
    page.goto(f"http://127.0.0.1:{served.port}/")  # a new tab, say, by the bare address
    page.evaluate("sessionStorage.clear()")
    page.reload()
    page.locator("#said.refused", has_text="the address teamlead view printed").wait_for(
        timeout=30_000
    )
    assert page.locator(row).count() == 0


def test_the_pages_buttons_pause_and_stop_the_run_and_say_what_it_answered(
    served: Served, page: Page
) -> None:
    row = page.locator(f'tr[data-run="{served.run}"]')
    row.wait_for(timeout=30_000)
    row.locator('button[data-op="pause"]').click()
    page.locator("#said", has_text="paused run").wait_for(timeout=30_000)
    assert served.steering.asked == [("pause", None)]
    unpause = page.locator(f'tr[data-run="{served.run}"] button[data-op="unpause"]')
    unpause.wait_for(timeout=30_000)  # the live status said paused: the button follows
    unpause.click()
    page.locator("#said.refused", has_text="refuses to go on").wait_for(timeout=30_000)
    page.locator(f'tr[data-run="{served.run}"] button[data-op="stop"]').click()
    page.locator("#said", has_text="stopping run").wait_for(timeout=30_000)
    page.locator(f'tr[data-run="{served.run}"] button[data-op="stop_now"]').click()
    page.locator("#said", has_text="stopping run now").wait_for(timeout=30_000)
    assert served.steering.asked == [("pause", None), ("stop", False), ("stop", True)]


def test_the_page_shows_the_picked_runs_tree_queue_approvals_and_chart_as_text(
    served: Served, page: Page, tmp_path: Path
) -> None:
    agent = page.locator('#tree li[data-agent="a1"]')
    agent.wait_for(timeout=30_000)  # the only run is picked by itself
    assert agent.locator(".label").inner_text() == HOSTILE
    assert agent.get_attribute("data-state") == "running"
    assert page.locator("#queue").inner_text().startswith(HOSTILE)
    assert page.locator("#approvals").inner_text().startswith(f"[{HOSTILE}] Bash: {HOSTILE}")
    series = page.locator("#chart svg g")
    assert series.get_attribute("data-key") == HOSTILE
    assert series.locator("circle").count() == 2
    assert page.locator("#detail img, #detail script, #chart foreignObject").count() == 0
    assert page.evaluate("window.pwned") is None
    shot = tmp_path / "view-detail.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")


def _get(url: str, path: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """``GET path`` (with ``url``'s token) of the view serving ``url``: the connection,
    left open, and its answer."""
    address = urlsplit(url)
    connection = http.client.HTTPConnection("127.0.0.1", address.port, timeout=30)
    connection.request("GET", f"{path}?{address.query}", headers={"host": address.netloc})
    return connection, connection.getresponse()


def test_an_empty_page_says_how_to_start_a_run_and_its_link_outlives_a_restart() -> None:
    env = dict(os.environ)
    with serving_view(env) as url:
        with chromium_page(url) as page:
            empty = page.locator("#empty")
            empty.wait_for(state="visible", timeout=30_000)
            assert 'teamlead ask "your task"' in empty.inner_text()
            assert page.locator("#live").inner_text() == "0 running, 0 finished"
        held, events = _get(url, "/events")  # a page still open when the view stops
        assert events.status == 200 and events.readline() == b"event: runs\n"
    held.close()
    port = str(urlsplit(url).port)
    with serving_view(env, "--port", port) as again:
        assert again == url  # the same address and token: the old link still works
        connection, answer = _get(url, "/")
        connection.close()
        assert answer.status == 200
    token = Path(env["TEAMLEAD_RUNTIME_DIR"]) / "view-token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert token.read_text().strip() == url.split("token=", 1)[1]


def test_the_page_shows_bidi_and_control_characters_escaped_as_the_terminal_does(
    served: Served, page: Page
) -> None:
    agent = page.locator('#tree li[data-agent="a2"]')
    agent.wait_for(timeout=30_000)
    escaped = "review \\u202e\\u2066gpj.exe\\u2069\\u200f\\u061c\\x1b[2J"
    assert agent.locator(".label").first.inner_text() == escaped
    assert agent.get_attribute("data-state") == "done"
    shown = page.evaluate("document.body.innerText")
    assert "4321" in agent.inner_text() and escaped in shown
    assert not set(BIDI_CONTROLS + "\x1b") & set(shown)


def test_the_page_says_why_the_picked_run_answers_no_detail_until_it_does(
    served: Served,
) -> None:
    served.steering.refusing = "the run's loop is busy"
    with chromium_page(served.url) as page:
        status = page.locator("#detail-status.trouble", has_text="the run's loop is busy")
        status.wait_for(state="visible", timeout=30_000)
        served.steering.refusing = None  # it answers again: its detail replaces the line
        page.locator("#detail-status", has_text="running, live").wait_for(timeout=30_000)
        assert page.locator("#detail-status.trouble").count() == 0
