"""Keep secrets out of what teamlead emits.

Warnings, decoded teammate messages and transcript text can echo things a teammate read,
including an API key from its environment. Values of secret-looking environment variables
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ...) are replaced before anything leaves teamlead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE", re.I)
_MIN_SECRET_LEN = 8
REDACTED = "[redacted]"


def _secret_values() -> list[str]:
    values = {
        value
        for name, value in os.environ.items()
        if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET_LEN
    }
    # Longest first, so a secret that contains another one is replaced whole.
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    """Return ``text`` with the value of every secret-looking env var replaced."""
    for value in _secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_opt(text: str | None) -> str | None:
    """:func:`redact` that passes ``None`` through."""
    return None if text is None else redact(text)


def secret_scrubber() -> Callable[[str], str]:
    """:func:`redact` with the secret values looked up once, for redacting many strings."""
    values = _secret_values()

    def scrub(text: str) -> str:
        for value in values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    return scrub
