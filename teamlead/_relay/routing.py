"""What the relay accepts, and what it reads from a request to pace it.

A request is refused unless it is a plain origin-form request (no absolute URI, no
``CONNECT``) for this relay's ``Host``, under its secret path prefix. What survives is
classified from its JSON body: the model (the governor's bucket) and the role, so the
lead's requests do not starve behind its subagents. Claude Code marks a subagent's request
in the first system block (``cc_is_subagent=true``); an unmarked one that offers tools is
the lead's, anything else ``other`` (titles, summaries), paced like the lead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._governor import InputEstimate, estimate_input
from .._private import json_object
from ..events import RequestRole

__all__ = ["Refusal", "RequestInfo", "check_target", "classify", "priority"]

_SUBAGENT_MARK = "cc_is_subagent=true"
_DEFAULT_MODEL = "default"


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: an HTTP status and a one-line reason."""

    status: int
    reason: str


@dataclass(frozen=True)
class RequestInfo:
    """The relay's view of one request: its bucket's model, whose request it is, its
    estimated input (for the governor's token windows; ``None`` for a body that is not a
    JSON object), and whether it asks for an event stream."""

    model: str
    role: RequestRole
    estimate: InputEstimate | None = field(default=None, compare=False, repr=False)
    streaming: bool = False


def check_target(
    raw_path: bytes,
    headers: Iterable[tuple[bytes, bytes]],
    *,
    prefix: str,
    hosts: frozenset[bytes],
) -> str | Refusal:
    """The path under the prefix (with its leading ``/``), or why the request is refused.

    ``hosts`` are the ``Host`` values this relay answers to (``127.0.0.1:PORT`` and
    ``localhost:PORT``); anything else may be a DNS-rebinding page and is refused. The
    connection refused a ``CONNECT`` and a target that is not a path already
    (:mod:`.protocol`); a target that only begins the prefix is refused here.
    """
    host = [value for name, value in headers if name.lower() == b"host"]
    if len(host) != 1 or host[0].lower() not in hosts:
        return Refusal(421, "request for another host")
    path = raw_path.decode("latin-1")
    root = f"/{prefix}"
    if path != root and not path.startswith(root + "/"):
        return Refusal(404, "unknown path")
    rest = path[len(root) :]
    return rest or "/"


def _system_texts(system: Any) -> Iterable[str]:
    if isinstance(system, str):
        yield system
    elif isinstance(system, list):
        for block in system[:4]:  # the mark is in the first block; don't walk a long list
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def _storable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no half of a surrogate pair, which a JSON escape
    can hold): a bucket key is stored as text in a shared account."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def classify(body: bytes) -> RequestInfo:
    """Model, role and estimated input from a request body; a body that is not JSON is
    ``other``.

    Example:
        >>> classify(b'{"model": "claude-opus-5-5", "tools": [{"name": "Agent"}]}')
        RequestInfo(model='claude-opus-5-5', role='lead', streaming=False)
    """
    data = json_object(body)
    if data is None:
        return RequestInfo(_DEFAULT_MODEL, "other")
    model = data.get("model")
    model = model if isinstance(model, str) and model and _storable(model) else _DEFAULT_MODEL
    estimate = estimate_input(data, size=len(body))
    streaming = data.get("stream") is True
    if any(_SUBAGENT_MARK in text for text in _system_texts(data.get("system"))):
        return RequestInfo(model, "subagent", estimate, streaming)
    return RequestInfo(model, "lead" if data.get("tools") else "other", estimate, streaming)


def priority(role: RequestRole, attempt: int) -> int:
    """The governor priority: the lead (and side requests) before subagents, retries first.

    Example:
        >>> priority("subagent", 0), priority("subagent", 1), priority("lead", 0)
        (0, 1, 2)
    """
    return (0 if role == "subagent" else 2) + (1 if attempt > 0 else 0)
