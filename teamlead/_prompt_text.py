"""The text format of a strategy file: front matter lines, plain bodies and the body template.

:func:`split_prompt_file` turns a file's bytes into its front matter fields (``None`` for a
plain body with no front matter) and its body; :func:`parse_template` splits a body into
literal text and ``{placeholder}`` names, rejecting stray braces when the file is loaded
rather than when it is used. Validating the fields and building a
:class:`~teamlead.prompts.Strategy` is :mod:`teamlead.prompts`; this module holds only the
syntax, so the two stay small.
"""

from __future__ import annotations

import re
from typing import TypeAlias

from .errors import UsageError

__all__ = ["Segment", "name_from_stem", "parse_template", "split_prompt_file"]

Segment: TypeAlias = "str | tuple[str]"
"""Literal text, or ``(placeholder name,)``."""

_PLACEHOLDER_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(r"\{\{|\}\}|\{(" + _PLACEHOLDER_NAME + r")\}|[{}]")
_FRONT_MATTER_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$")
_FENCE = "---"


def name_from_stem(stem: str | None, source: str) -> str:
    """A strategy name from a file stem: lower-cased, other characters than ``a-z0-9._-``
    turned into ``-``."""
    name = re.sub(r"[^a-z0-9._-]+", "-", (stem or "").lower()).lstrip("._-")
    if not name:
        raise UsageError(
            f"prompt file {source}: give it a 'name:' in front matter (its file name "
            "yields no usable name)"
        )
    return name


def split_prompt_file(
    raw: bytes, source: str, *, stem: str | None = None
) -> tuple[dict[str, str] | None, str]:
    """``(front matter fields, body)`` of a strategy file; fields ``None`` for a plain body.

    ``stem`` (the file's stem) allows a plain body and a missing ``name:``; shipped
    resources pass none, so they must have front matter.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"prompt file {source} is not UTF-8 text: {exc.reason}") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].rstrip() != _FENCE:
        if stem is None:
            raise UsageError(
                f"prompt file {source} has no front matter: it must start with a '---' line"
            )
        name_from_stem(stem, source)  # a plain body needs a usable file name
        return None, "\n".join(lines).strip("\n")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE)
    except StopIteration:
        raise UsageError(
            f"prompt file {source}: front matter is not closed by a '---' line"
        ) from None

    fields: dict[str, str] = {}
    for number in range(1, end):
        line = lines[number].strip()
        if not line or line.startswith("#"):
            continue
        match = _FRONT_MATTER_LINE.match(line)
        if match is None:
            raise UsageError(
                f"prompt file {source} line {number + 1}: front matter lines must be "
                f"'key: value', got {line!r}"
            )
        key = match.group(1).lower().replace("-", "_")
        if key in fields:
            raise UsageError(f"prompt file {source} line {number + 1}: duplicate key {key!r}")
        fields[key] = _unquote(match.group(2).strip())
    if "name" not in fields and stem is not None:
        fields["name"] = name_from_stem(stem, source)
    return fields, "\n".join(lines[end + 1 :]).strip("\n")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_template(template: str, source: str) -> tuple[Segment, ...]:
    """Split a body into literal text and placeholders, rejecting stray braces up front."""
    segments: list[Segment] = []
    literal: list[str] = []
    position = 0
    for match in _TOKEN.finditer(template):
        literal.append(template[position : match.start()])
        position = match.end()
        token = match.group(0)
        if token in ("{{", "}}"):
            literal.append(token[0])
        elif match.group(1) is not None:
            segments.append("".join(literal))
            literal = []
            segments.append((match.group(1),))
        else:
            line = template.count("\n", 0, match.start()) + 1
            raise UsageError(
                f"prompt file {source}: stray {token!r} on body line {line}; write {{{{ or }}}} "
                "for a literal brace, or {name} for a placeholder"
            )
    literal.append(template[position:])
    segments.append("".join(literal))
    return tuple(seg for seg in segments if seg != "")
