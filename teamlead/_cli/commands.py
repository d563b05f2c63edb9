"""The ``teamlead`` click group: every command, one module per group of them.

``ask``/``resume`` live in :mod:`.ask`, ``demo``/``serve-scripted`` in :mod:`.demo` (the
only modules that load the offline test bed, and only when run), ``inbox``, ``prompts``,
``experiment``, ``relay`` and ``sessions`` in modules of those names. Loading them loads the
SDK: the entry point (:mod:`.startup`) imports this module only once it takes the stop signals.
"""

from __future__ import annotations

import logging

import click

from .._version import __version__
from .ask import ask, resume
from .demo import demo, serve_scripted
from .exitcodes import SafeErrorsGroup
from .experiment import experiment
from .inbox import inbox
from .prompts import prompts
from .relay import relay
from .sessions import sessions

__all__ = ["main"]


@click.group(
    cls=SafeErrorsGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="teamlead")
def main() -> None:
    """Never lose a subagent's or teammate's result with the Claude Agent SDK."""
    _configure_logging()


def _configure_logging() -> None:
    """teamlead's warnings as one line each; the SDK's own error logs are folded into ours."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("teamlead: warning: %(message)s"))
    ours = logging.getLogger("teamlead")
    if not ours.handlers:
        ours.addHandler(handler)
        ours.setLevel(logging.WARNING)
        ours.propagate = False
    # a failing CLI is reported in the run's reasons; the SDK's traceback-style log is noise
    logging.getLogger("claude_agent_sdk").setLevel(logging.CRITICAL)


for _command in (ask, resume, sessions, demo, serve_scripted, prompts, inbox, experiment, relay):
    main.add_command(_command)
