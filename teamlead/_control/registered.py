"""A run in the registry while it goes: its entry, its control endpoint, its watch feed.

:func:`registered` wraps a run's whole stream: before the first item it registers the run
(:func:`~.registry.process_registry`), starts its control endpoint on the run's own loop and
writes its entry; each item goes to the watch feed as ``ask --json``'s NDJSON lines, and the
entry learns the session id. A run that cannot register goes on unregistered, with one
warning line; one whose process state or environment says not to does not try.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import IO, Any, cast

import anyio

from .._ndjson import JsonProgress
from .._run import RunState
from ..errors import ControlError
from ..events import Finished
from .endpoint import Endpoint, WatchFeed
from .recorded import Recorder
from .registry import Registration, command_line, process_registry
from .steering import RunSteering

__all__ = ["registered"]

log = logging.getLogger("teamlead.control")

_CLOSE_TIMEOUT_S = 5.0


@dataclass
class _Registered:
    """One registered run's entry, endpoint and feed."""

    state: RunState
    registration: Registration
    endpoint: Endpoint
    steering: RunSteering
    progress: JsonProgress | None

    def saw(self, item: Any) -> None:
        """One item of the run's stream: to the watchers and the steering (the limits over
        time), and the session id to the entry."""
        self.steering.saw(item)
        progress = self.progress
        if progress is not None:
            try:
                progress.handle(item)
            except Exception as exc:  # a watcher's feed must never break the run
                log.warning("the run's watch feed failed and stops: %s", type(exc).__name__)
                self.progress = None
        session = self.state.stream.tracker.session_id
        if session:
            self.registration.update(session_id=session)

    async def close(self) -> None:
        """The run ended: its entry goes at once (no one finds an endpoint that refuses),
        the watchers get the last lines, then the endpoint goes. Shielded and bounded."""
        self.registration.remove()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
            if self.progress is not None:
                try:
                    self.progress.close()
                except Exception:
                    log.debug("the run's watch feed failed at its end", exc_info=True)
            await self.endpoint.close()


async def _register(state: RunState) -> _Registered | None:
    """Register ``state``'s run, or ``None`` (not registering, or failed: one warning)."""
    registry = process_registry(state.process)
    if registry is None:
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio): the endpoint serves on asyncio only
        log.debug("the run is not registered: its control endpoint needs asyncio")
        return None
    registration: Registration | None = None
    endpoint: Endpoint | None = None
    try:
        registration = registry.register(mode=state.ask.mode, command=command_line())
        entry = registration.entry
        steering = RunSteering(state, run=entry.run, command=entry.command, started=entry.started)
        endpoint = Endpoint(registration.socket, steering, run=entry.run, feed=WatchFeed())
        await endpoint.start()
        registration.write()  # listed only once it can be asked
    except (ControlError, OSError) as exc:
        log.warning("this run cannot be seen or steered from outside (teamlead ps): %s", exc)
        if endpoint is not None:
            await endpoint.close()
        if registration is not None:
            registration.remove()
        return None
    progress = JsonProgress(cast(IO[str], endpoint.feed), state.stream)
    return _Registered(state, registration, endpoint, steering, progress)


async def registered(
    state: RunState,
    items: AsyncGenerator[Any, None],
    *,
    mode: str | None = None,
    prompt: str | None = None,
) -> AsyncGenerator[Any, None]:
    """``items``, the run's stream, with the run registered while it goes (see the module
    docstring) and kept in the run history when it finishes (:mod:`.recorded`: ``mode``
    and ``prompt`` describe the run there); ``Finished`` comes last, once the run is in
    the history and has left the registry."""
    run = await _register(state)
    recorder = Recorder(
        state,
        run=run.registration.run if run is not None else None,
        mode=mode or state.ask.mode,
        prompt=prompt,
    )
    finished: Finished | None = None
    try:
        async with aclosing(items) as stream:
            async for item in stream:
                if run is not None:
                    run.saw(item)
                if isinstance(item, Finished):
                    finished = item
                    await recorder.keep(item)  # in the history before it leaves the registry
                else:
                    yield item
    finally:
        if run is not None:
            await run.close()
    if finished is not None:
        yield finished
