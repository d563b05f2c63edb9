"""How many input tokens a Messages API request will draw: a cheap estimate from its body.

The governor paces by the upstream's token windows (see :mod:`.token_budget`), so it must
know a request's size before sending it. Counting tokens exactly needs the model's
tokenizer (or a ``count_tokens`` round trip); the estimate here needs neither:

* **Size.** The characters of the request's prompt as compact JSON (``tools``, ``system``
  and ``messages``: what the API counts as input), divided by :data:`CHARS_PER_TOKEN`
  (4, the usual rule of thumb for English text and code). Each unit (a tool, a system
  block, a content block) is measured by the C JSON encoder, compact and unescaped; one it
  cannot encode (nesting too deep, a value that is not JSON) by a bounded walk of its
  strings, keys and punctuation. The budget corrects the estimate with a ratio learnt from
  the ``usage`` the upstream reports, so the rule of thumb only has to be consistent, not
  right.
* **Cached prefixes.** The API does not count cached input reads against the input-token
  window on most models. A request marks cache breakpoints with ``cache_control``; the
  prefix up to each mark (in the API's order: tools, then system, then messages) is
  recorded with its size and a fingerprint, so the budget can leave out the part the
  upstream already holds (it learns which from the ``cache_read_input_tokens`` the
  upstream reports).

The measure is bounded like every read of untrusted input: a body larger than
:data:`WALK_MOST_BYTES` is estimated from its byte size alone (no prefixes), and the walk
stops at :data:`MOST_DEPTH`. Nothing here raises on an odd body: what is not a list or a
dict where one is expected counts as nothing.

Fingerprints use Python's ``hash`` over the prefix's units: stable within one process
(which is all the budget needs), never stored, never compared across processes. A unit's
measure is remembered by its value, so the tools every request repeats are encoded once.
"""

from __future__ import annotations

import functools
import json
import marshal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "MOST_DEPTH",
    "WALK_MOST_BYTES",
    "CachedPrefix",
    "InputEstimate",
    "estimate_input",
]

#: Characters of prompt JSON per input token: the estimate's rule of thumb.
CHARS_PER_TOKEN = 4.0
#: Bodies larger than this are estimated from their size alone (the walk stays cheap).
WALK_MOST_BYTES = 4 * 1024 * 1024
#: Nesting walked at most; deeper values count as the characters of their strings, unread.
MOST_DEPTH = 64
#: Units whose measure is remembered, at most, and the largest (as ``marshal`` bytes).
_REMEMBERED, _REMEMBER_MOST_BYTES = 512, 32 * 1024
#: A unit as compact JSON, unescaped: what its characters are counted on.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class CachedPrefix:
    """The prompt up to one ``cache_control`` mark: its estimated tokens and fingerprint."""

    tokens: float
    fingerprint: int


@dataclass(frozen=True)
class InputEstimate:
    """A request's estimated input: the whole prompt, and its cacheable prefixes.

    Attributes:
        tokens: the whole prompt (tools, system and messages), in estimated tokens.
        prefixes: one per ``cache_control`` mark, shortest first.
    """

    tokens: float
    prefixes: tuple[CachedPrefix, ...] = ()


class _Walk:
    """The running count and fingerprint of the prompt, unit by unit."""

    __slots__ = ("chars", "fingerprint", "prefixes")

    def __init__(self) -> None:
        self.chars = 0
        self.fingerprint = 0
        self.prefixes: list[CachedPrefix] = []

    def unit(self, value: Any) -> None:
        """Count one unit (a tool, a system block, a content block); a ``cache_control``
        on it ends a cacheable prefix."""
        chars, digest = _measure(value)
        self.chars += chars + 1  # the comma or bracket around it
        self.fingerprint = hash((self.fingerprint, digest))
        if isinstance(value, dict) and "cache_control" in value:
            self.prefixes.append(CachedPrefix(self.chars / CHARS_PER_TOKEN, self.fingerprint))


def _measure(value: Any) -> tuple[int, int]:
    """A unit's characters as compact JSON and its digest, remembered by its value (its
    ``marshal`` bytes, format 2: equal values give equal bytes, five times quicker than
    its JSON)."""
    try:
        key = marshal.dumps(value, 2)
    except (ValueError, TypeError):  # not plain data (cannot come from a parsed body)
        return _encode(value)
    return _encode(value) if len(key) > _REMEMBER_MOST_BYTES else _remembered(key)


@functools.lru_cache(maxsize=_REMEMBERED)
def _remembered(key: bytes) -> tuple[int, int]:
    return _encode(marshal.loads(key))


def _encode(value: Any) -> tuple[int, int]:
    """:func:`_measure` without the memory: the C encoder, else a bounded walk."""
    try:
        text = _COMPACT.encode(value)
    except (ValueError, TypeError, RecursionError):
        return _size(value, 0)
    return len(text), hash(text)


def _size(value: Any, fingerprint: int) -> tuple[int, int]:
    """Characters of ``value`` as compact JSON (escapes not counted), and the fingerprint
    carried through its strings; iterative, bounded by :data:`MOST_DEPTH`."""
    chars = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            chars += len(item) + 2
            fingerprint = hash((fingerprint, item))
        elif isinstance(item, dict):
            chars += 2 + max(0, len(item) - 1)
            if depth >= MOST_DEPTH:
                continue
            for key, inner in item.items():
                chars += len(str(key)) + 3
                fingerprint = hash((fingerprint, key))
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            chars += 2 + max(0, len(item) - 1)
            if depth >= MOST_DEPTH:
                continue
            stack.extend((inner, depth + 1) for inner in reversed(item))
        elif isinstance(item, bool) or item is None:
            chars += 4
            fingerprint = hash((fingerprint, item))
        elif isinstance(item, (int, float)):
            text = repr(item)
            chars += len(text)
            fingerprint = hash((fingerprint, text))
    return chars, fingerprint


def estimate_input(body: Mapping[str, Any], *, size: int | None = None) -> InputEstimate:
    """The estimated input of a parsed Messages API request ``body``.

    ``size``: the body's size in bytes, when known; past :data:`WALK_MOST_BYTES` the
    estimate is the size alone.

    Example:
        >>> body = {"system": [{"type": "text", "text": "x" * 390,
        ...                     "cache_control": {"type": "ephemeral"}}],
        ...         "messages": [{"role": "user", "content": "y" * 398}]}
        >>> estimate = estimate_input(body)
        >>> round(estimate.tokens), [round(p.tokens) for p in estimate.prefixes]
        (218, [113])
    """
    if size is not None and size > WALK_MOST_BYTES:
        return InputEstimate(size / CHARS_PER_TOKEN)  # known only by its size
    walk = _Walk()
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            walk.unit(tool)
    system = body.get("system")
    if isinstance(system, str):
        walk.unit(system)
    elif isinstance(system, list):
        for block in system:
            walk.unit(block)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            walk.chars += 20  # {"role":"user","content":...}
            if isinstance(content, list):
                for block in content:
                    walk.unit(block)
            elif content is not None:
                walk.unit(content)
    return InputEstimate(walk.chars / CHARS_PER_TOKEN, tuple(walk.prefixes))
