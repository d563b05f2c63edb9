"""The relay tests' upstreams, key, request body and client.

:func:`server_factory` is a fixture (a module that uses it imports it): the scripted
servers a test starts with :func:`serve`, stopped after it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx2
import pytest

from teamlead.governor import Governor, GovernorPolicy
from teamlead.testing import FakeClock, ScriptedServer

__all__ = ["KEY", "MODEL", "body", "fake_governor", "http", "serve", "server_factory"]

KEY = "sk-ant-relay-secret-key-0123456789"
MODEL = "claude-opus-5-5"


@pytest.fixture
def server_factory() -> Iterator[list[ScriptedServer]]:
    started: list[ScriptedServer] = []
    yield started
    for server in started:
        server.stop()


def serve(started: list[ScriptedServer], script: object, **kwargs: object) -> ScriptedServer:
    server = ScriptedServer(script, **kwargs).start()  # type: ignore[arg-type]
    started.append(server)
    return server


def fake_governor(ceiling: int = 8, clock: FakeClock | None = None) -> Governor:
    return Governor(GovernorPolicy(ceiling=ceiling), clock=clock or FakeClock())


def body(model: str = MODEL, **extra: object) -> bytes:
    return json.dumps(
        {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra}
    ).encode()


@asynccontextmanager
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as h:
        yield h
