"""The outside-control plane, private: the runs of this user seen and steered from outside.

A run of the engine (:mod:`teamlead._run`) registers while it goes, and ``teamlead ps``,
``show``, ``stop``, ``pause``, ``amend`` and ``view`` reach it from another process
(docs/layout.md names each module's job). It sits above the run engine and below the
coordinator and the CLI, which enter it through this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

# Each name other wings use, imported from where it lives (``X as X`` re-exports it): this
# block is the door's one list of them, its ``__all__`` too (:mod:`teamlead._door`).
if TYPE_CHECKING:
    from .detail import tree_parents as tree_parents
    from .endpoint import call as call
    from .endpoint import follow as follow
    from .registry import Registry as Registry
    from .registry import RunEntry as RunEntry
    from .registry import labelled as labelled
    from .registry import liveness as liveness
    from .registry import runtime_dir as runtime_dir
    from .runlog import UNFINISHED as UNFINISHED
    from .runlog import read_log as read_log

__getattr__ = lazy_exports(__name__)
