"""``teamlead prompts``: list the shipped delegation strategies and show one rendered."""

from __future__ import annotations

import click

from .exitcodes import SafeErrorsGroup, handle_errors
from .options import option

__all__ = ["prompts"]


@click.group(cls=SafeErrorsGroup)
def prompts() -> None:
    """List and show the delegation strategy prompts."""


@prompts.command("list")
@handle_errors
def prompts_list() -> None:
    """List the shipped strategies."""
    from ..prompts import list_strategies

    for meta in list_strategies():
        click.echo(f"{meta.name:<16} v{meta.version or '-':<6} {meta.description or ''}")


@prompts.command("show")
@click.argument("name")
@option(
    "--max-concurrent-agents",
    type=click.IntRange(min=1),
    help="Fill the concurrency limit with this.",
)
@option(
    "--max-agents-per-turn",
    type=click.IntRange(min=1),
    help="Fill the per-turn spawn limit with this.",
)
@handle_errors
def prompts_show(name: str, **limits: int | None) -> None:
    """Show strategy NAME (or a path), its placeholders filled."""
    from ..prompts import default_values, load_strategy

    strategy = load_strategy(name)
    text = strategy.render(default_values(**{k: v for k, v in limits.items() if v}))
    meta = strategy.meta
    click.echo(
        f"# {meta.name} v{meta.version or '-'}: {meta.description or '(plain prompt file)'}\n"
        f"# sha256 {strategy.sha256}\n"
    )
    click.echo(text if text.strip() else "(this strategy adds nothing to the system prompt)")
