"""The strict drop-in's view of a run: the SDK's own messages and exceptions, nothing else.

:func:`teamlead.query` drives the same run as :func:`teamlead.run`, with the user's options
as given, through :class:`SdkRounds`, and shows the app what ``claude_agent_sdk.query``
would have shown it had the lead used every result (:func:`sdk_view`): only the SDK's
message types, a round's last ``ResultMessage`` held back while teamlead goes on from it,
and the last round's exception after its messages (docs/library.md, "What differs from
the SDK").
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from contextlib import aclosing
from typing import Any, TypeGuard, cast, get_args

from claude_agent_sdk import ClaudeAgentOptions, Message, ResultMessage

from ..events import Finished

__all__ = ["SdkRounds", "sdk_view"]

#: The SDK's message types (its ``Message`` union), the only items the drop-in yields.
_SDK_MESSAGES: tuple[type, ...] = get_args(Message)


def _is_sdk_message(item: object) -> TypeGuard[Message]:
    return isinstance(item, _SDK_MESSAGES)


class SdkRounds:
    """The run's ``query_fn``: each call is one round through ``claude_agent_sdk.query``.

    The user's ``transport`` carries the first round (a transport is connected once);
    every later round starts the CLI its options name, as the SDK does without one. What
    the latest round raised is kept in :attr:`raised`, for the app.
    """

    def __init__(self, transport: Any = None) -> None:
        self._transport = transport
        self.count = 0
        self.raised: Exception | None = None

    async def __call__(
        self, *, prompt: str | AsyncIterable[dict[str, Any]], options: ClaudeAgentOptions
    ) -> AsyncIterator[Any]:
        from claude_agent_sdk import query as sdk_query

        transport, self._transport = self._transport, None
        self.count += 1
        self.raised = None
        stream = cast(
            AsyncGenerator[Any, None],
            sdk_query(prompt=prompt, options=options, transport=transport),
        )
        try:  # closed here when the run stops reading, not left to the loop's finaliser
            async with aclosing(stream) as messages:
                async for message in messages:
                    yield message
        except Exception as exc:  # the round's own failure, for the app once the run ends
            self.raised = exc
            raise


async def sdk_view(items: AsyncIterator[Any], rounds: SdkRounds) -> AsyncGenerator[Message, None]:
    """The run's ``items`` (driven by ``rounds``, its ``query_fn``) as the SDK's ``query``
    shows them (see the module docstring).

    Raises:
        Exception: what the last round's SDK call raised, after that round's messages.
    """
    held: ResultMessage | None = None
    held_round = 0
    finished: Finished | None = None
    async for item in items:
        if isinstance(item, Finished):
            finished = item
        if not _is_sdk_message(item):
            continue
        if held is not None and held_round == rounds.count:  # the same round goes on
            yield held
            held = None
        if isinstance(item, ResultMessage):
            held, held_round = item, rounds.count
        else:
            yield item
    if held is not None:
        if rounds.count > 1 and finished is not None:  # every round's CLI counted once
            held = dataclasses.replace(held, total_cost_usd=finished.cost_usd)
        yield held
    if rounds.raised is not None:
        raise rounds.raised
