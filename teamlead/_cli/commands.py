"""The ``teamlead`` click group: every command, one module per group of them, loaded lazily.

A command's module is imported only when that command runs (:class:`LazyGroup`, the table
:data:`COMMANDS`): most load the SDK, which takes a second or more, while ``teamlead
--help`` and the verbs typed at a running run (``ps``, ``stop``, ``pause``) start in a
fraction of that. Only :mod:`.demo` loads the offline test bed, and only when it runs.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence

import click

from .._version import __version__
from .exitcodes import SafeErrorsGroup
from .help import headed

__all__ = ["COMMANDS", "COMMAND_SECTIONS", "LazyGroup", "main"]

#: Each command: where it is (``module:attribute`` under ``teamlead._cli``) and its one-line
#: summary, as ``teamlead --help`` shows it without loading the command (short enough to
#: fit an 80-column terminal beside the longest name).
COMMANDS: dict[str, tuple[str, str]] = {
    "amend": ("runs:amend", "Change a running run's agent cap or subagent model."),
    "ask": ("ask:ask", "Ask the lead; resume it until its answer uses every result."),
    "demo": ("demo:demo", "Run a real `ask` offline, on a built-in scripted model."),
    "experiment": (
        "experiment:experiment",
        "A/B experiments on strategy prompts, with statistics.",
    ),
    "inbox": ("inbox:inbox", "Read the team-lead inboxes (read-only)."),
    "pause": ("runs:pause", "Pause a run: no new agent starts, no new request goes out."),
    "prompts": ("prompts:prompts", "List and show the delegation strategy prompts."),
    "limits": ("limits:limits", "Show or clear the limits the relay learnt per account."),
    "ps": ("runs:ps", "List your runs (with --all, the finished ones too)."),
    "show": ("history:show", "Show a finished run: its prompt, answer and agents."),
    "sessions": ("sessions:sessions", "List the sessions a session store holds, newest first."),
    "relay": ("relay:relay", "Serve the pacing relay for any Claude Code client."),
    "resume": ("ask:resume", "Collect a session's unused results and resume its lead."),
    "serve-scripted": (
        "demo:serve_scripted",
        "Serve a scripted model on loopback, to try runs offline.",
    ),
    "stop": ("runs:stop", "Stop runs: each wraps up from the work finished so far."),
    "unpause": ("runs:unpause", "Let a paused run go on."),
    "view": ("board:view", "Serve a live web page of your runs, to watch and steer them."),
    "watch": ("runs:watch", "Follow a run's events live, one line each (or --json)."),
}

#: ``teamlead --help``'s sections: what a person comes to do, and the commands for it.
#: A command no section names is listed under "Other commands" (a test keeps it empty).
COMMAND_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run", ("ask", "resume", "demo")),
    ("Steer a running run", ("ps", "watch", "view", "pause", "unpause", "amend", "stop")),
    ("Look back", ("show", "sessions", "inbox")),
    ("Experiment", ("experiment", "prompts")),
    ("Set up", ("relay", "limits", "serve-scripted")),
)


class LazyGroup(SafeErrorsGroup):
    """A click group whose commands are imported when they are first used.

    Args:
        lazy: each command's ``module:attribute`` (relative to this package) and its
            one-line summary for the group's help.
        sections: the group's help's headings and the commands under each.
    """

    def __init__(
        self,
        *args: object,
        lazy: Mapping[str, tuple[str, str]],
        sections: Sequence[tuple[str, Sequence[str]]] = (),
        **kwargs: object,
    ):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = dict(lazy)
        self._sections = tuple((title, tuple(names)) for title, names in sections)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self._lazy:
            self.add_command(self.load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def load(self, name: str) -> click.Command:
        """Import command ``name``'s module and return the command."""
        module, _, attribute = self._lazy[name][0].partition(":")
        loaded = importlib.import_module(f"{__package__}.{module}")
        command: click.Command = getattr(loaded, attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands under :data:`COMMAND_SECTIONS`' headings, each with its one-line
        summary (those not loaded yet read from the table: ``--help`` loads no command)."""
        commands: dict[str, click.Command] = {}
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=self._lazy[name][1])
            if not command.hidden:
                commands[name] = command
        for title, names in headed(self._sections, commands, "Other commands"):
            limit = formatter.width - 6 - max(len(name) for name in names)
            with formatter.section(title):
                formatter.write_dl(
                    [(name, commands[name].get_short_help_str(limit)) for name in names]
                )


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    sections=COMMAND_SECTIONS,
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
