"""A griffe extension for the API reference: a name imported as itself is re-exported.

``from .events import Finished as Finished`` marks ``Finished`` as part of the importing
module's API, as type checkers read it (PEP 484's convention for stubs, which mypy and
pyright apply to any module). ``teamlead/__init__.py`` lists its public names that way, in
one block that its ``__all__`` is made from when the package runs; griffe reads modules
without running them, so it is told here which imported names are public.
"""

from __future__ import annotations

import ast
from typing import Any

from griffe import Alias, Extension


class RedundantAliases(Extension):
    """Makes each ``X as X`` import public."""

    def on_alias_instance(self, *, node: Any, alias: Alias, **kwargs: Any) -> None:
        if isinstance(node, ast.ImportFrom) and any(
            name.asname == alias.name == name.name for name in node.names
        ):
            alias.public = True
