"""The outside-control plane, private: the runs of this user seen and steered from outside.

A run of the engine (:mod:`teamlead._run`) registers while it goes, and ``teamlead ps``,
``show``, ``stop``, ``pause``, ``amend`` and ``view`` reach it from another process. One
concept per module:

- :mod:`.registry`: the user's runtime directory of live runs, an entry and a control
  socket per run (and which registry a process's runs enter);
- :mod:`.registered`: a run in the registry while it goes (its entry, endpoint, watch
  feed), kept in the run history when it ends (:mod:`.recorded`);
- :mod:`.endpoint`: the control socket's protocol, both sides;
- :mod:`.steering`: what each op of the endpoint does to one run;
- :mod:`.detail`: one run's agent tree, queue, waiting approvals and limits over time, for
  ``teamlead view``, and :mod:`.runlog`: the same read back from a run's NDJSON log.

It sits above the run engine (it reads a run's state) and below the coordinator and the
CLI, which enter it through this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .endpoint import call, follow
    from .registry import Registry, RunEntry, labelled, liveness, runtime_dir
    from .runlog import UNFINISHED, read_log

__all__ = [
    "Registry",
    "RunEntry",
    "UNFINISHED",
    "call",
    "follow",
    "labelled",
    "liveness",
    "read_log",
    "runtime_dir",
]

__getattr__ = lazy_exports(__name__)
