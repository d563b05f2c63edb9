"""The relay's way out: the environment's proxy, and no credentials the CLI did not send."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamlead._relay import RelayError, start_relay
from teamlead._relay.server import Reserved
from teamlead.testing import Reply, ScriptedServer

from .relay_upstream import KEY, body, fake_governor, http, serve, server_factory

__all__ = ["server_factory"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.anyio


async def test_the_upstream_is_reached_through_the_environments_proxy(
    server_factory: list[ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scripted server plays the proxy: an HTTP proxy gets the absolute URI and answers
    # for a host that does not resolve (.invalid), so only the proxy route can succeed.
    proxy = serve(server_factory, lambda req: Reply.text("via the proxy"))
    monkeypatch.setenv("HTTP_PROXY", proxy.base_url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the test's own client reaches the relay direct
    upstream = "http://api.upstream.invalid"
    async with start_relay(upstream, fake_governor()) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
    assert r.status_code == 200
    assert r.json()["content"][0]["text"] == "via the proxy"
    (seen,) = proxy.recorded()
    headers = {k.lower(): v for k, v in seen.headers}
    assert headers["host"] == "api.upstream.invalid"


async def test_no_proxy_leaves_the_upstream_direct(
    server_factory: list[ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = serve(server_factory, lambda req: Reply.text("direct"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens at port 9
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with start_relay(upstream.base_url, fake_governor()) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
    assert r.status_code == 200 and len(upstream.recorded()) == 1


async def test_netrc_credentials_are_never_added(
    server_factory: list[ScriptedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ~/.netrc entry for the upstream host must not become an Authorization header: the
    # relay passes on exactly what the CLI sent.
    server = serve(server_factory, lambda req: Reply.text("ok"))
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password not-for-the-api\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with start_relay(server.base_url, fake_governor()) as relay, http() as h:
        r = await h.post(
            relay.base_url + "/v1/messages", content=body(), headers={"x-api-key": KEY}
        )
    assert r.status_code == 200
    (seen,) = server.recorded()
    names = {k.lower() for k, _ in seen.headers}
    assert "authorization" not in names and "x-api-key" in names


async def test_a_proxy_setting_that_is_no_url_is_a_relay_that_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A malformed ``HTTPS_PROXY`` is a relay that cannot start (the run goes direct with a
    warning), and the socket drawn for it is closed."""
    monkeypatch.setenv("HTTPS_PROXY", "http://[::1")
    reserved = Reserved.draw()
    with pytest.raises(RelayError, match="HTTPS_PROXY"):
        async with start_relay("https://api.upstream.invalid", fake_governor(), reserved=reserved):
            pass
    assert reserved.sock.fileno() == -1
