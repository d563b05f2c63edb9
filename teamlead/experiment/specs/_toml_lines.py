"""Line numbers for the keys of a TOML text, so spec errors can say ``FILE:LINE``.

tomllib reports values, not positions; :class:`LineIndex` scans the text once and maps
each table and key, by pydantic-style location, to the line it starts on. Private to
:mod:`teamlead.experiment.specs.spec`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["LineIndex", "dotted"]


def dotted(loc: tuple[str | int, ...]) -> str:
    """A pydantic location as the spec's key path: ``("variants", 0, "name")`` ->
    ``variants[0].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(spec)"


_KEY = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_KEY_LINE = re.compile(rf"^\s*({_DOTTED})\s*=(.*)$")


def _split_key(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(_KEY, dotted))


@dataclass
class LineIndex:
    """Where each table and key of a TOML text starts, by pydantic-style location.

    tomllib gives no positions, so scan the text: ``[[variants]]`` headers are counted to
    turn the Nth one into ``("variants", N-1)``, and each ``key =`` line is filed under
    the table above it. Multi-line strings are skipped. Good enough for error messages,
    not a TOML parser.
    """

    text: str
    positions: dict[tuple[str | int, ...], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        arrays: dict[tuple[str, ...], int] = {}
        table: tuple[str | int, ...] = ()
        in_string: str | None = None
        for number, line in enumerate(self.text.splitlines(), start=1):
            if in_string is not None:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            if match := _ARRAY_HEADER.match(line):
                raw = _split_key(match.group(1))
                arrays[raw] = arrays.get(raw, 0) + 1
                table = self._resolve(raw, arrays)
                self.positions.setdefault(table, number)
                self.positions.setdefault(table[:-1], number)
            elif match := _TABLE_HEADER.match(line):
                table = self._resolve(_split_key(match.group(1)), arrays)
                self.positions.setdefault(table, number)
            elif match := _KEY_LINE.match(line):
                keys = _split_key(match.group(1))
                for end in range(1, len(keys) + 1):
                    self.positions.setdefault(table + keys[:end], number)
                value = match.group(2)
                for quote in ('"""', "'''"):
                    if value.count(quote) % 2 == 1:
                        in_string = quote
                        break

    @staticmethod
    def _resolve(raw: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> tuple[str | int, ...]:
        out: list[str | int] = []
        for end in range(1, len(raw) + 1):
            out.append(raw[end - 1])
            if raw[:end] in arrays:
                out.append(arrays[raw[:end]] - 1)
        return tuple(out)

    def find(self, loc: tuple[str | int, ...]) -> int:
        """The line of ``loc``, else of its nearest enclosing table, else line 1."""
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.positions:
                return self.positions[loc[:end]]
        return 1
