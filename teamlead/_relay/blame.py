"""Errors name the upstream the user set, never the relay in front of it.

The CLI only knows the relay (``http://127.0.0.1:PORT/...``, a random port), so its own
error text points at an address the user never set, and aiohttp's exception names say
nothing about what failed. :func:`shown` is the upstream as the user gave it, without
credentials; :func:`unreachable_reason` says what failed ("connection refused");
:func:`in_user_terms` replaces the relay's address in a text with the upstream's.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import ssl

import aiohttp
import yarl

__all__ = ["in_user_terms", "shown", "unreachable_reason"]


def shown(upstream: str) -> str:
    """``upstream`` as an error names it: scheme, host and port; no user, password, path
    or query (any of which may hold a credential).

    Example:
        >>> shown("http://user:secret@127.0.0.1:9/v1?key=k")
        'http://127.0.0.1:9'
        >>> shown("https://api.anthropic.com/")
        'https://api.anthropic.com'
    """
    try:
        url = yarl.URL(upstream)
        if url.host:
            return str(url.origin())
    except ValueError:
        pass
    return "the upstream"


def unreachable_reason(exc: BaseException) -> str:
    """What failed, in words, for an aiohttp error that reached no answer.

    Example:
        >>> import errno
        >>> unreachable_reason(aiohttp.ServerDisconnectedError())
        'the upstream closed the connection before answering'
        >>> unreachable_reason(OSError(errno.ECONNREFUSED, "Connect call failed"))
        'connection refused'
    """
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return "the proxy (HTTPS_PROXY or HTTP_PROXY) could not be reached"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        return "its TLS certificate was not accepted"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorDNSError | socket.gaierror) or isinstance(
        getattr(exc, "os_error", None), socket.gaierror
    ):
        return "its host name could not be resolved"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the upstream closed the connection before answering"
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        text = os.strerror(code)
        return text[:1].lower() + text[1:]
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the upstream's reply broke off"
    if isinstance(exc, ValueError):  # yarl's, or aiohttp's InvalidURL
        return "it is not a valid URL"
    return type(exc).__name__


def in_user_terms(text: str, *, relay_port: int, upstream: str) -> str:
    """``text`` with the relay's own address (``127.0.0.1:PORT``, with or without its
    secret path) replaced by the upstream's, so an error the CLI wrote about "its"
    gateway names what the user set instead.

    Example:
        >>> in_user_terms(
        ...     "check your inference gateway (127.0.0.1:53037).",
        ...     relay_port=53037,
        ...     upstream="http://u:p@10.0.0.7:8080/v1",
        ... )
        'check your inference gateway (10.0.0.7:8080).'
    """
    if not text or relay_port <= 0:
        return text
    address = rf"127\.0\.0\.1:{relay_port}(?![0-9])"
    origin = shown(upstream)
    text = re.sub(rf"https?://{address}[^\s)\"']*", origin, text)
    # the bare address: the upstream's host[:port], as the CLI's own messages name a host
    return re.sub(address, origin.partition("://")[2] or origin, text)
