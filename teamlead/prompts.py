"""Delegation strategy prompts: load, fill and append them to Claude Code's system prompt.

A strategy is one Markdown file with a front matter block, then a body template::

    ---
    name: delegation
    version: 1
    description: Full delegation strategy.
    intended_use: Treatment arm against baseline.
    ---
    At most {max_concurrent_agents} agents running at once.

Front matter is ``key: value`` lines only (no YAML dependency); ``name``, ``version``,
``description`` and ``intended_use`` are expected (the shipped strategies must have all
four), other keys are kept. A file of your own may leave any of them out, or be a plain
body with no front matter at all: its name is then the file's stem (lower-cased, other
characters than ``a-z0-9._-`` turned into ``-``), which is what a trial's provenance
records with the file's hash and path. The body may use
``{placeholder}`` names, filled by :meth:`Strategy.render`; write ``{{`` and ``}}`` for literal
braces. Any other brace is an error when the file is loaded, not when it is used.
Applying a strategy only ever *appends* to Claude Code's system prompt
(:func:`apply_strategy`), so every arm of an experiment shares one base prompt.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from claude_agent_sdk import AgentDefinition, ClaudeAgentOptions
from claude_agent_sdk.types import SystemPromptPreset
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import UsageError
from .roster import default_agents, render_roster

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

__all__ = [
    "DEFAULT_MAX_AGENTS_PER_TURN",
    "DEFAULT_MAX_CONCURRENT_AGENTS",
    "Strategy",
    "StrategyMeta",
    "apply_strategy",
    "default_values",
    "list_strategies",
    "load_strategy",
]

DEFAULT_MAX_CONCURRENT_AGENTS = 4
"""Agents running at once. Fan-outs of 5 to 6 agents are reported to hit per-account 429s."""

DEFAULT_MAX_AGENTS_PER_TURN = 4
"""Agent calls the lead may send in one message."""


class StrategyMeta(BaseModel):
    """The front matter of a strategy file: what it is and what it is for.

    Keys other than the four below are kept (as strings) so a file can carry notes such as
    ``author`` without the loader rejecting it. Only ``name`` is always set (from the file
    stem when the file does not give one).
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    version: str | None = Field(default=None, min_length=1)
    description: str | None = Field(default=None, min_length=1)
    intended_use: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True)
class Strategy:
    """A loaded strategy: its front matter, body template and where it came from.

    Attributes:
        meta: the validated front matter.
        body_template: the body as written, placeholders and ``{{``/``}}`` escapes included.
        source: the file's path, or the location of the shipped resource.
        sha256: hex digest of the raw file bytes; record it with results so a run can be tied
            to the exact prompt text it used.
    """

    meta: StrategyMeta
    body_template: str
    source: str
    sha256: str
    _segments: tuple[_Segment, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_segments", _parse_template(self.body_template, self.source))

    @property
    def name(self) -> str:
        """The strategy's name from its front matter."""
        return self.meta.name

    @property
    def placeholders(self) -> frozenset[str]:
        """The placeholder names the body uses."""
        return frozenset(seg[0] for seg in self._segments if isinstance(seg, tuple))

    def render(self, values: Mapping[str, object] | None = None) -> str:
        """Fill the placeholders and return the text to append to the system prompt.

        Args:
            values: placeholder values, laid over :func:`default_values` (so the shipped
                prompts render with no arguments). Values are turned into text with ``str``;
                names the body does not use are ignored.

        Returns:
            The filled body without surrounding whitespace; ``""`` for ``baseline``.

        Raises:
            UsageError: the body uses a placeholder that has no value.

        Example:
            >>> text = load_strategy("delegation").render({"max_concurrent_agents": 3})
            >>> "At most 3 agents running at once." in text
            True
        """
        merged: dict[str, object] = dict(default_values())
        if values is not None:
            merged.update(values)
        parts: list[str] = []
        for seg in self._segments:
            if isinstance(seg, str):
                parts.append(seg)
                continue
            name = seg[0]
            if name not in merged:
                raise UsageError(
                    f"prompt file {self.source} uses placeholder {{{name}}} but no value was "
                    f"given for it (values given: {', '.join(sorted(merged))})"
                )
            parts.append(str(merged[name]))
        return "".join(parts).strip()


def default_values(
    max_concurrent_agents: int = DEFAULT_MAX_CONCURRENT_AGENTS,
    max_agents_per_turn: int = DEFAULT_MAX_AGENTS_PER_TURN,
) -> dict[str, str]:
    """Return the placeholder values the shipped prompts use, filled from the run's settings.

    The limits are stated in the prompt as numbers because a model follows "at most 4" far
    better than "a few"; pass the same numbers the run enforces so the prompt does not lie.

    Args:
        max_concurrent_agents: agents allowed to run at once (at least 1).
        max_agents_per_turn: Agent calls allowed in one message (at least 1).

    Returns:
        ``{"agent_roster", "max_concurrent_agents", "max_agents_per_turn"}`` as text; the
        roster lists :func:`teamlead.default_agents`.

    Raises:
        UsageError: a limit is not a positive integer.

    Example:
        >>> default_values(max_concurrent_agents=6)["max_concurrent_agents"]
        '6'
    """
    for label, limit in (
        ("max_concurrent_agents", max_concurrent_agents),
        ("max_agents_per_turn", max_agents_per_turn),
    ):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"{label} must be a positive integer, got {limit!r}")
    return {
        "agent_roster": render_roster(default_agents()),
        "max_concurrent_agents": str(max_concurrent_agents),
        "max_agents_per_turn": str(max_agents_per_turn),
    }


def list_strategies() -> list[StrategyMeta]:
    """Return the front matter of every shipped strategy, sorted by name.

    Example:
        >>> [meta.name for meta in list_strategies()][:2]
        ['baseline', 'delegation']
    """
    return [strategy.meta for strategy in _load_shipped().values()]


#: A strategy prompt is a page of text; anything bigger is a mistake (``/dev/zero``).
MAX_PROMPT_FILE_BYTES = 1024 * 1024


def _read_prompt_file(path: Path, shown: str | None = None) -> bytes:
    """Prompt file ``path``: a regular file (no FIFO, no device) of at most 1 MiB, or UsageError.

    ``shown`` is the path as the user typed it (``./nope.md``), for the error messages;
    :class:`~pathlib.Path` would print ``nope.md``.
    """
    label = shown or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError(f"strategy file not found: {label}; {_builtin_hint(path.stem)}") from None
    except OSError as exc:
        raise UsageError(f"cannot read prompt file {label}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"cannot read prompt file {label}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_PROMPT_FILE_BYTES + 1)
    if len(raw) > MAX_PROMPT_FILE_BYTES:
        raise UsageError(f"prompt file {label} is over {MAX_PROMPT_FILE_BYTES // 1024} KiB")
    return raw


def load_strategy(name_or_path: str | os.PathLike[str]) -> Strategy:
    """Load a shipped strategy by name, or any strategy file by path.

    A value ending in ``.md``, containing a path separator, or given as a path object is read
    as a file; anything else is a shipped name such as ``"delegation"``.

    Args:
        name_or_path: ``"baseline"``, ``"delegation"``, ``"parallel-first"``, or a path.

    Returns:
        The parsed and validated strategy.

    Raises:
        UsageError: unknown name (the message lists the known ones), missing or unreadable
            file, bad front matter, or a stray brace in the body.

    Example:
        >>> load_strategy("baseline").render()
        ''
    """
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(name_or_path):
        path = Path(name_or_path)
        shown = os.fspath(name_or_path)
        return _parse_strategy(_read_prompt_file(path, shown), shown, stem=path.stem)
    shipped = _load_shipped()
    if name_or_path not in shipped:
        raise UsageError(
            f"unknown strategy {name_or_path!r}; known: {', '.join(shipped)}"
            f"{_did_you_mean(name_or_path, list(shipped))} (or pass a path to a .md file)"
        )
    return shipped[name_or_path]


def _builtin_hint(stem: str) -> str:
    """What to say when a strategy file is missing: a ``--strategy nope.md`` is often a
    built-in name typed as a file, so the built-in names come with it, the nearest first.
    """
    try:
        names = list(_load_shipped())
    except UsageError:  # an incomplete install: the file is all there is to say
        return "no built-in strategies are installed"
    return (
        f"the built-in strategies (named without .md) are {', '.join(names)}"
        f"{_did_you_mean(stem, names)}"
    )


def _did_you_mean(typed: str, names: list[str]) -> str:
    """`` (did you mean 'delegation'?)`` for the nearest of ``names``, or nothing."""
    import difflib

    close = difflib.get_close_matches(typed, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def apply_strategy(
    options: ClaudeAgentOptions | None,
    strategy: Strategy,
    *,
    register_agents: bool = True,
    values: Mapping[str, object] | None = None,
) -> ClaudeAgentOptions:
    """Return a copy of ``options`` with the strategy appended to Claude Code's system prompt.

    The strategy is never put *in place of* Claude Code's prompt: it goes into the preset's
    ``append``, after any append the user already had (applying the same text twice adds it
    once). A ``None`` system prompt, which the SDK sends as an *empty* prompt, becomes Claude
    Code's preset for every strategy, ``baseline`` included, so all arms of an experiment share
    one base prompt. A system prompt that replaces Claude Code's (a string, ``custom`` or
    ``file``) is refused: the strategies are written to sit on top of Claude Code's tool
    guidance. To use one with your own prompt, concatenate ``strategy.render()`` yourself.

    A strategy whose body renders empty (``baseline``) adds no text and no agents, and leaves
    any system prompt that is set as it is, a replacing one included. Otherwise,
    with ``register_agents``, :func:`teamlead.default_agents` are merged into
    ``options.agents``, the user's definitions winning on a name clash, and ``{agent_roster}``
    lists the agents actually registered unless ``values`` sets it.

    Args:
        options: the caller's options, not modified; ``None`` starts from defaults.
        strategy: the strategy to apply.
        register_agents: add the default subagents the prompts refer to.
        values: placeholder values laid over :func:`default_values`.

    Returns:
        A new ``ClaudeAgentOptions`` (``dataclasses.replace``; other fields are shared).

    Raises:
        UsageError: the system prompt replaces Claude Code's, or a placeholder has no value.

    Example:
        >>> opts = apply_strategy(None, load_strategy("delegation"), values={
        ...     "max_concurrent_agents": 3, "max_agents_per_turn": 2})
        >>> opts.system_prompt["preset"], sorted(opts.agents)[0]
        ('claude_code', 'code-reviewer')
    """
    base = options if options is not None else ClaudeAgentOptions()
    agents: dict[str, AgentDefinition] = default_agents() if register_agents else {}
    agents.update(base.agents or {})
    render_values: dict[str, object] = {"agent_roster": render_roster(agents)}
    render_values.update(values or {})
    text = strategy.render(render_values)
    if not text:
        if base.system_prompt is None:
            return replace(base, system_prompt={"type": "preset", "preset": "claude_code"})
        return replace(base)

    preset = _preset_of(base.system_prompt, strategy)
    existing = preset.get("append", "")
    if text not in existing:
        preset["append"] = f"{existing.rstrip()}\n\n{text}" if existing.strip() else text
    return replace(base, system_prompt=preset, agents=agents or base.agents)


def _preset_of(system_prompt: object, strategy: Strategy) -> SystemPromptPreset:
    """Return a copy of the Claude Code preset to append to, or refuse a replacing prompt."""
    if system_prompt is None:
        return {"type": "preset", "preset": "claude_code"}
    if isinstance(system_prompt, dict) and system_prompt.get("type") == "preset":
        preset: SystemPromptPreset = dict(system_prompt)  # type: ignore[assignment]
        return preset
    kind = (
        "a plain string"
        if isinstance(system_prompt, str)
        else f"type {system_prompt.get('type')!r}"
        if isinstance(system_prompt, dict)
        else type(system_prompt).__name__
    )
    raise UsageError(
        f"strategy {strategy.name!r} appends to Claude Code's system prompt, but "
        f"options.system_prompt ({kind}) replaces it; use system_prompt={{'type': 'preset', "
        "'preset': 'claude_code', 'append': ...}, or add strategy.render() to your own prompt"
    )


def _looks_like_path(value: str) -> bool:
    return value.endswith(".md") or "/" in value or os.sep in value


def _shipped_dir() -> Traversable | Path:
    """The shipped prompts: inside the installed package, or the checkout's ``prompts/``."""
    packaged = resources.files("teamlead") / "prompts"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "prompts"


def _load_shipped() -> dict[str, Strategy]:
    directory = _shipped_dir()
    if not directory.is_dir():
        raise UsageError(f"no shipped prompts found at {directory}: the install is incomplete")
    strategies: dict[str, Strategy] = {}
    for entry in sorted(directory.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".md") or not entry.is_file():
            continue
        strategy = _parse_strategy(entry.read_bytes(), str(entry))
        stem = entry.name[: -len(".md")]
        missing = [
            key
            for key in ("version", "description", "intended_use")
            if not getattr(strategy.meta, key)
        ]
        if missing:
            raise UsageError(f"shipped prompt file {entry} lacks {', '.join(missing)}")
        if strategy.name != stem:
            raise UsageError(
                f"prompt file {entry}: front matter name {strategy.name!r} does not match the "
                f"file name {stem!r}"
            )
        strategies[stem] = strategy
    return strategies


def _parse_strategy(raw: bytes, source: str, *, stem: str | None = None) -> Strategy:
    fields, body = _split_prompt_file(raw, source, stem=stem)
    try:
        meta = StrategyMeta.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'front matter'}: {error['msg']}"
            for error in exc.errors()
        )
        raise UsageError(f"prompt file {source}: bad front matter: {problems}") from None
    return Strategy(
        meta=meta,
        body_template=body,
        source=source,
        sha256=hashlib.sha256(raw).hexdigest(),
    )


# -- the file's syntax: front matter lines, plain bodies and the body template -----------
_Segment: TypeAlias = "str | tuple[str]"
"""Literal text, or ``(placeholder name,)``."""

_PLACEHOLDER_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(r"\{\{|\}\}|\{(" + _PLACEHOLDER_NAME + r")\}|[{}]")
_FRONT_MATTER_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$")
_FENCE = "---"


def _name_from_stem(stem: str | None, source: str) -> str:
    """A strategy name from a file stem: lower-cased, other characters than ``a-z0-9._-``
    turned into ``-``."""
    name = re.sub(r"[^a-z0-9._-]+", "-", (stem or "").lower()).lstrip("._-")
    if not name:
        raise UsageError(
            f"prompt file {source}: give it a 'name:' in front matter (its file name "
            "yields no usable name)"
        )
    return name


def _split_prompt_file(
    raw: bytes, source: str, *, stem: str | None = None
) -> tuple[dict[str, str], str]:
    """``(front matter fields, body)`` of a strategy file; a plain body (the whole file is
    the prompt) has only a ``name``, from the file's stem.

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
        return {"name": _name_from_stem(stem, source)}, "\n".join(lines).strip("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE), None)
    if end is None:
        raise UsageError(f"prompt file {source}: front matter is not closed by a '---' line")

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
        fields["name"] = _name_from_stem(stem, source)
    return fields, "\n".join(lines[end + 1 :]).strip("\n")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _parse_template(template: str, source: str) -> tuple[_Segment, ...]:
    """Split a body into literal text and placeholders, rejecting stray braces up front."""
    segments: list[_Segment] = []
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
