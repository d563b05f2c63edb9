"""The relay's first connection to its upstream: opened while the CLI starts, and the
check that the upstream can be reached at all.

A wrong ``ANTHROPIC_BASE_URL`` (nothing listening, a host name that does not resolve, a
TLS certificate that is not accepted) is the user's setting, not a server's trouble; met
by the run's first request, the CLI would retry the relay's 502 for minutes and call it
temporary. So a relay in front of an upstream the user set opens its first connection
(TCP, and TLS for ``https``) before it serves: a failure ends the run before its CLI
sends anything, as :class:`UpstreamUnreachable`, one line naming the upstream (no
credentials), what failed, and the fix. The connection stays in the relay's pool, for the
CLI's first request. A slow network, an upstream behind a proxy (only the proxy knows the
way) and the default API are left to the requests themselves.
"""

from __future__ import annotations

import asyncio
import logging
import os

import aiohttp
import yarl
from aiohttp.helpers import get_env_proxy_for_url

from ..errors import RelayError, SetupError
from .blame import shown, unreachable_reason

log = logging.getLogger("teamlead.relay")

__all__ = ["Proxy", "UpstreamUnreachable", "connect_ahead", "proxy_for"]

#: A proxy's URL and its credentials (``None``, ``None``: no proxy).
Proxy = tuple[yarl.URL | None, aiohttp.BasicAuth | None]

#: The longest the start of a run waits on the check (a slower network is not a verdict).
REACH_TIMEOUT_S = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: The variables (in any case) that can name a proxy for the upstream (``NO_PROXY`` only
#: exempts hosts from one).
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "ws_proxy", "wss_proxy"})


class UpstreamUnreachable(SetupError):
    """The upstream refused the connection, its name did not resolve, or TLS failed.

    Attributes:
        upstream: the upstream as errors name it (scheme, host and port).
        reason: what failed, in words ("connection refused").
    """

    def __init__(self, upstream: str, reason: str, *, setting: str = "ANTHROPIC_BASE_URL"):
        fix = (
            f"give {setting} your API's address, or leave it out for the Anthropic API"
            if setting.startswith("--")
            else f"set {setting} to your API's address, or unset it for the Anthropic API"
        )
        super().__init__(f"cannot connect to {setting} {upstream}: {reason}; {fix}")
        self.upstream = upstream
        self.reason = reason


async def connect_ahead(
    session: aiohttp.ClientSession,
    upstream: str,
    proxy: Proxy,
    *,
    check: str | None = None,
) -> None:
    """Open a connection to ``upstream`` (its TCP, TLS and proxy handshakes) and leave it in
    ``session``'s pool, so the first request does not wait for them.

    Args:
        session: the relay's upstream client, made with ``proxy``.
        upstream: the base URL the relay forwards to.
        proxy: the environment's proxy for it (:func:`proxy_for`).
        check: where the user set ``upstream``, as the error names it
            (``ANTHROPIC_BASE_URL``, or ``--upstream`` for ``teamlead relay``'s flag):
            a connection that cannot be opened raises. ``None``: best effort, a failure is
            the first request's to meet, and to report.

    Raises:
        UpstreamUnreachable: (with ``check``) the connection was refused, the host name did
            not resolve, the TLS handshake failed, or ``upstream`` is not a valid URL.
    """
    checked = check if proxy[0] is None else None
    connector = session.connector
    assert connector is not None  # made with one (``server._upstream_session``)
    try:
        url = yarl.URL(upstream)  # a malformed one raises ValueError: checked as one
        checked = checked if url.scheme in _DEFAULT_PORTS else None
        request = aiohttp.ClientRequest(
            "GET",
            url,
            loop=asyncio.get_running_loop(),
            proxy=proxy[0],
            proxy_auth=proxy[1],
            session=session,
        )
        connection = await asyncio.wait_for(
            connector.connect(request, [], session.timeout), REACH_TIMEOUT_S
        )
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        return
    except Exception as exc:  # noqa: BLE001 - unchecked, the first request reports it
        # aiohttp's errors are OSErrors too; a ValueError is a malformed URL
        if checked is not None and isinstance(exc, OSError | ValueError):
            reason = unreachable_reason(exc)
            raise UpstreamUnreachable(shown(upstream), reason, setting=checked) from None
        log.debug("could not connect to the upstream ahead: %s", type(exc).__name__)
        return
    connection.release()


def proxy_for(upstream: str) -> Proxy:
    """The environment's proxy for ``upstream`` (``HTTPS_PROXY``/``HTTP_PROXY``,
    ``NO_PROXY``), and its credentials.

    Raises:
        RelayError: a proxy variable holds no URL (its value, which may hold a password,
            is not named).
    """
    if not any(name.lower() in _PROXY_VARIABLES for name in os.environ):
        return None, None  # the common case, without reading every variable twice
    try:
        return get_env_proxy_for_url(yarl.URL(upstream))
    except LookupError:
        return None, None
    except ValueError as exc:
        names = ", ".join(sorted(n for n in os.environ if n.lower() in _PROXY_VARIABLES))
        raise RelayError(f"the proxy setting ({names}) is not a URL: {exc}") from None
