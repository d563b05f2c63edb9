"""The loopback check: is a base URL on this machine?

``teamlead ask`` needs no API key when ``ANTHROPIC_BASE_URL`` points at a local gateway or
scripted server, and the offline test bed refuses to run the CLI against anything else,
so a test can never reach a real API. Both ask the same question here.

The URL is parsed strictly, because the CLI (Node's WHATWG URL parser) and Python's
``urlsplit`` disagree on odd URLs: ``http://192.0.2.2:1\\@127.0.0.1:2`` is 127.0.0.1 to
``urlsplit`` but 192.0.2.2 to Node. So only ``http(s)://`` with a *literal* loopback
address (127.0.0.0/8 or ``[::1]``), an optional port and a plain path is accepted: no
userinfo, no backslash, no whitespace or control characters, no host names (not even
``localhost``, whose address only the resolver knows), and nothing is looked up in DNS.
"""

from __future__ import annotations

import ipaddress
import re

from ..errors import SetupError

__all__ = ["ensure_loopback", "loopback_problem"]

# scheme://host[:port][/path|?query|#fragment], host a dotted IPv4 or a bracketed IPv6
_URL = re.compile(
    r"(?P<scheme>https?)://(?:(?P<v4>[0-9.]+)|\[(?P<v6>[0-9A-Fa-f:.]+)\])"
    r"(?::(?P<port>[0-9]{1,5}))?(?P<rest>[/?#][!-~]*)?",
    re.ASCII,
)


def loopback_problem(base_url: str) -> str | None:
    """Why ``base_url`` is not a strict loopback URL, or ``None`` when it is one.

    Example:
        >>> loopback_problem("http://127.0.0.1:8080"), loopback_problem("https://example.com")
        (None, 'it is not http(s)://<literal loopback address>[:port][/path] (no user@)')
        >>> loopback_problem("http://192.0.2.2:1\\\\@127.0.0.1:2")
        'it contains a backslash, whitespace or a control character'
    """
    if "\\" in base_url or any(c.isspace() or not c.isprintable() for c in base_url):
        return "it contains a backslash, whitespace or a control character"
    match = _URL.fullmatch(base_url)
    if match is None:
        return "it is not http(s)://<literal loopback address>[:port][/path] (no user@)"
    host = match["v4"] or match["v6"] or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"{host!r} is not a literal IP address"
    if not address.is_loopback:
        return f"{host} is not a loopback address"
    if match["port"] is not None and not 0 < int(match["port"]) < 65536:
        return f"port {match['port']} is out of range"
    return None


def ensure_loopback(base_url: str) -> None:
    """Raise :class:`SetupError` unless ``base_url`` points at a literal loopback address."""
    problem = loopback_problem(base_url)
    if problem is not None:
        raise SetupError(
            f"refusing to run offline against {base_url!r}: {problem}; ANTHROPIC_BASE_URL "
            "must be http://127.0.0.1:PORT or http://[::1]:PORT (use 127.0.0.1, not localhost)"
        )
