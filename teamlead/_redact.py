"""Keep secrets out of what teamlead emits, and control characters out of its lines.

Warnings, decoded teammate messages and transcript text can echo things a teammate read,
including an API key from its environment. Values of secret-looking environment variables
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ...) are replaced before anything leaves teamlead.
:func:`terminal_safe` makes text safe to print (and :func:`shown_safe` every string of a
JSON value the web view's page shows), :func:`ndjson_line` a JSON record safe to write as
one line of NDJSON.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE", re.I)
_MIN_SECRET_LEN = 8
REDACTED = "[redacted]"


def _secrets_in(items: Iterable[tuple[str, str]]) -> list[str]:
    """The secret-looking values of ``items``, longest first: a secret that contains another
    one is replaced whole."""
    found = {v for n, v in items if _SECRET_NAME.search(n) and len(v) >= _MIN_SECRET_LEN}
    return sorted(found, key=len, reverse=True)


class _EnvironSecrets:
    """This process's secret values, looked up again only when its environment changed
    (every line teamlead emits is redacted: a scan of the environment for each cost more
    than the rest of a short run's own work)."""

    def __init__(self) -> None:
        self._seen: dict[Any, Any] | None = None
        self._values: list[str] = []

    def values(self) -> list[str]:
        data = getattr(os.environ, "_data", None)  # CPython's own copy, compared in C
        if not isinstance(data, dict):
            return _secrets_in(os.environ.items())
        if data != self._seen:
            self._values = _secrets_in(os.environ.items())
            self._seen = dict(data)
        return self._values


_ENVIRON_SECRETS = _EnvironSecrets()


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """Return ``text`` with the value of every secret-looking env var replaced.

    The one redaction function: every output (answers, stdout, NDJSON, trial records,
    reports, warnings) goes through it. ``env`` adds the variables a child process was
    given on top of this process's own environment (``ClaudeAgentOptions.env``).

    Example:
        >>> redact("key=sk-ant-0123456789", {"ANTHROPIC_API_KEY": "sk-ant-0123456789"})
        'key=[redacted]'
    """
    return secret_scrubber(env)(text)


def redact_opt(text: str | None) -> str | None:
    """:func:`redact` that passes ``None`` through."""
    return None if text is None else redact(text)


#: A URL's scheme and its user part (``user:password@``), up to the last ``@`` of the word.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s]*@")


def without_password(text: str) -> str:
    """``text`` with the user and password of every URL in it (``scheme://user:password@host``)
    left out.

    The one function for credentials in URLs: a store URL in a warning, and every way a run
    describes itself (its command line in the registry entry, so ``teamlead ps``, ``ps
    --json`` and the view's page and events) show a ``--session-store`` or ``--limits``
    URL through it.

    Example:
        >>> without_password("redis://:s3cret@127.0.0.1:6379/0")
        'redis://***@127.0.0.1:6379/0'
        >>> without_password("teamlead ask --limits=rediss://u:p@h:1/0 hi")
        'teamlead ask --limits=rediss://***@h:1/0 hi'
    """
    return _USERINFO.sub(r"\1***@", text) if "://" in text else text


def secret_scrubber(env: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """:func:`redact` with the secret values looked up once, for redacting many strings
    (``env`` as for :func:`redact`)."""
    values = _ENVIRON_SECRETS.values()  # sorted once per change of the environment
    if env:
        values = sorted({*values, *_secrets_in(env.items())}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for value in values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    return scrub


# C0 and C1 controls, DEL, the bidi controls that reorder what a terminal or a page shows
# (the embeddings, overrides and isolates, and the marks), and lone surrogates (they cannot
# be encoded for output).
_CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape_control(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(
    text: str, *, keep_newlines: bool = False, scrub: Callable[[str], str] = redact
) -> str:
    """``text`` made safe to print: secrets redacted, every control character made visible.

    This is the one function untrusted text (names, descriptions, teammate text) goes
    through before any terminal output: ESC, CSI and OSC introducers and every other
    C0/C1 control become ``\\x1b``-style escapes, so nothing can move the cursor, set the
    title or clear the screen. The result is plain text; render it with ``rich.text.Text``
    (never as markup). ``scrub`` redacts the secrets (a :func:`secret_scrubber`, for
    many strings).

    Example:
        >>> terminal_safe("hi\\x1b]0;pwned\\x07")
        'hi\\\\x1b]0;pwned\\\\x07'
    """
    text = scrub(text)
    if keep_newlines:
        return "\n".join(_CONTROL.sub(_escape_control, line) for line in text.split("\n"))
    return _CONTROL.sub(_escape_control, text)


def shown_safe(value: Any, scrub: Callable[[str], str] | None = None) -> Any:
    """A JSON value (dicts, lists, strings, numbers) with every string, keys too, made
    :func:`terminal_safe`: what the web view sends its page, so a page shows untrusted
    text by the terminal's one rule (a U+202E in an agent's description cannot reverse the
    rest of its row). The secrets are looked up once for the whole value.

    Example:
        >>> shown_safe({"label": "a\\u202eb", "n": [1, "\\x1b"]})
        {'label': 'a\\\\u202eb', 'n': [1, '\\\\x1b']}
    """
    scrub = scrub or secret_scrubber()
    if isinstance(value, str):
        return terminal_safe(value, scrub=scrub)
    if isinstance(value, dict):
        return {shown_safe(k, scrub): shown_safe(v, scrub) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_safe(item, scrub) for item in value]
    return value


#: C1 controls (U+0080-U+009F, e.g. U+009B, a CSI on some terminals) and the line and
#: paragraph separators: JSON leaves them raw with ``ensure_ascii=False``.
_RAW_IN_JSON = {c: f"\\u{c:04x}" for c in (*range(0x80, 0xA0), 0x2028, 0x2029)}


#: A lone surrogate: half a pair, as a cut made in JavaScript leaves it. JSON writes it as
#: an escape and Python reads it back as a code point, but no UTF-8 text can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON ``text`` with each lone surrogate written as its ``\\uXXXX`` escape: the same
    JSON value, in text that UTF-8 can hold.

    Example:
        >>> escape_surrogates('{"a": "x\\ud800"}') == '{"a": "x\\\\ud800"}'
        True
    """
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD, for a file or stream that must be UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


def json_line_safe(line: str) -> str:
    """A JSON line with the characters JSON keeps raw but terminals and line readers act on
    written as ``\\uXXXX`` escapes, and lone surrogates too (:func:`escape_surrogates`): the
    same JSON value, printable on any terminal and in UTF-8. They can only occur inside
    strings (JSON's own syntax is ASCII), so the text replacement is exact.

    Example:
        >>> json_line_safe('{"a": "x\\u009by"}') == '{"a": "x\\\\u009by"}'
        True
    """
    return escape_surrogates(line.translate(_RAW_IN_JSON))


def ndjson_line(serialized: str) -> str:
    """One serialized JSON record (an event's ``to_json()``) as teamlead writes it on a line
    of NDJSON: secrets redacted (in any field, at the last step), then made
    :func:`json_line_safe`."""
    return json_line_safe(redact(serialized))
