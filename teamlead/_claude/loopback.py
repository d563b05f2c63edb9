"""The loopback check: is a base URL on this machine?

``teamlead ask`` needs no API key when ``ANTHROPIC_BASE_URL`` points at a local gateway or
scripted server, and the offline test bed refuses to run the CLI against anything else,
so a test can never reach a real API. Both ask the same question here.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from ..errors import SetupError

__all__ = ["ensure_loopback", "is_loopback"]


def is_loopback(base_url: str) -> bool:
    """True when ``base_url``'s host is ``localhost`` or a loopback address.

    Example:
        >>> is_loopback("http://127.0.0.1:8080"), is_loopback("https://example.com")
        (True, False)
    """
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ensure_loopback(base_url: str) -> None:
    """Raise :class:`SetupError` unless ``base_url`` points at a loopback address."""
    if not is_loopback(base_url):
        raise SetupError(
            f"refusing to run offline against {base_url!r}: ANTHROPIC_BASE_URL must point at "
            "a loopback address (127.0.0.1, ::1 or localhost)"
        )
