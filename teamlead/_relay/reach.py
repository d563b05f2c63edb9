"""Whether the upstream can be reached at all, asked once as a run starts.

A wrong ``ANTHROPIC_BASE_URL`` (nothing listening, a host name that does not resolve, a
TLS certificate that is not accepted) is the user's setting, not a server's trouble; met
by the run's first request, the CLI would retry the relay's 502 for minutes and call it
temporary. So a run on the relay first opens one connection to its upstream (TCP, and TLS
for ``https``) and closes it: a failure ends the run before its CLI starts, as
:class:`UpstreamUnreachable`, one line naming the upstream (no credentials), what failed,
and the fix. A slow network, an upstream behind a proxy (only the proxy knows the way) and
the default API are left to the requests themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import aiohttp
import yarl
from aiohttp.helpers import get_env_proxy_for_url

from ..errors import SetupError
from .blame import shown, unreachable_reason

__all__ = ["Proxy", "UpstreamUnreachable", "check_reachable", "proxy_for"]

#: A proxy's URL and its credentials (``None``, ``None``: no proxy).
Proxy = tuple[yarl.URL | None, aiohttp.BasicAuth | None]

#: The longest the start of a run waits on the check (a slower network is not a verdict).
REACH_TIMEOUT_S = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


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


async def check_reachable(
    upstream: str, *, setting: str = "ANTHROPIC_BASE_URL", timeout_s: float = REACH_TIMEOUT_S
) -> None:
    """Open one connection to ``upstream`` and close it; raise when it cannot be opened.

    Args:
        upstream: the base URL the relay forwards to, the user's ``ANTHROPIC_BASE_URL``.
        setting: where the user set it, as the error names it (``--upstream`` for
            ``teamlead relay``'s flag).
        timeout_s: the longest wait; past it the check gives no verdict.

    Raises:
        UpstreamUnreachable: the connection was refused, the host name did not resolve,
            or the TLS handshake failed.
    """
    url = yarl.URL(upstream)
    host, scheme = url.host, url.scheme
    if not host or scheme not in _DEFAULT_PORTS:
        return
    if proxy_for(upstream)[0] is not None:
        return  # only the proxy knows the way
    port = url.port or _DEFAULT_PORTS[scheme]
    tls = ssl.create_default_context() if scheme == "https" else None
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None),
            timeout_s,
        )
    except asyncio.TimeoutError:
        return
    except OSError as exc:  # ssl.SSLError is one too
        raise UpstreamUnreachable(
            shown(upstream), unreachable_reason(exc), setting=setting
        ) from None
    writer.close()
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), timeout_s)


def proxy_for(upstream: str) -> Proxy:
    """The environment's proxy for ``upstream`` (``HTTPS_PROXY``/``HTTP_PROXY``,
    ``NO_PROXY``), and its credentials."""
    try:
        return get_env_proxy_for_url(yarl.URL(upstream))
    except LookupError:
        return None, None
