"""A private wing's front door: what other packages use of it, each loaded on first use.

Each private package (``teamlead._run``, ``teamlead._claude``, ...) is entered through its
``__init__``: it names what others use in ``__all__`` and imports it under
``TYPE_CHECKING``, for the type checker and the reader; at run time
``__getattr__ = lazy_exports(__name__)`` loads a name's module only when the name is first
used. Importing one light module of a wing (the registry ``teamlead ps`` reads, the
``Finished`` of a run stopped at start-up) so never loads the wing's heavy ones (the SDK).
``teamlead`` itself is entered the same way; its ``TYPE_CHECKING`` block is also its
``__all__``, so its public names are written once.
``pyproject.toml``'s import contracts keep other packages from reaching past the door.

A name that is also the name of one of the wing's modules cannot go through such a door
(the module, once imported, is the package's attribute of that name): it is imported from
its module, an exception the contracts list.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``'s door: each name the door imports under
    ``TYPE_CHECKING`` is loaded from that module on first use, then kept on the package; a
    door without its own ``__all__`` gets those names as its ``__all__``."""
    namespace = sys.modules[package].__dict__
    homes: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> object:
        if not homes:
            homes.update(_checked_imports(package, namespace.get("__loader__")))
        home = homes.get(name)
        if name == "__all__":
            value: object = list(homes)
        elif home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            value = getattr(importlib.import_module(home[0], package), home[1])
        namespace[name] = value
        return value

    return __getattr__


def _checked_imports(package: str, loader: Any) -> dict[str, tuple[str, str]]:
    """Each name ``package``'s ``__init__`` imports under ``if TYPE_CHECKING:``, with the
    (relative) module it comes from and its name there."""
    import ast  # only once a door is first asked for a name

    source = loader.get_source(package) if hasattr(loader, "get_source") else None
    if source is None:
        raise ImportError(f"the source of {package!r}'s door cannot be read")
    homes: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom):
                    module = "." * inner.level + (inner.module or "")
                    homes.update({a.asname or a.name: (module, a.name) for a in inner.names})
    return homes
