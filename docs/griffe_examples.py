"""A griffe extension for the API reference: read teamlead's docstrings as the code means them.

- teamlead's Google-style docstrings head their doctests ``Example:``, which Napoleon
  reads as the examples section; griffe reads only ``Examples:`` so, and renders
  ``Example:`` as an admonition of Markdown prose, where ``>>>`` lines become quotes and a
  list in a doctest's output a link. The header is read as ``Examples:``.
- A module-level name documented by ``#:`` comments above it (the Sphinx convention the
  code uses for type aliases such as ``teamlead.Disposition``) gets them as its docstring.
- Sphinx roles (``:class:`~teamlead.events.Finished```, ``:func:`query```) are read as the
  code they name, as Sphinx shows them (``Finished``, ``query``), instead of as text.

The docstrings in the code stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Attribute, Docstring, Extension, Object

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:attr|class|const|data|exc|func|meth|mod|obj):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class ExampleSections(Extension):
    """Read ``Example:`` as ``Examples:``, ``#:`` comments as a name's docstring, and
    Sphinx roles as code."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is None and isinstance(obj, Attribute):
            comment = _comment_above(obj)
            if comment:
                obj.docstring = Docstring(comment, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            text = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(_role, text)


def _comment_above(obj: Attribute) -> str:
    """The ``#:`` lines right above ``obj``'s first line, without their markers."""
    if obj.lineno is None or obj.filepath not in obj.lines_collection:
        return ""
    lines = obj.lines_collection[obj.filepath]
    found: list[str] = []
    at = obj.lineno - 2
    while at >= 0 and lines[at].lstrip().startswith("#:"):
        found.insert(0, lines[at].lstrip()[2:].strip())
        at -= 1
    return "\n".join(found)
