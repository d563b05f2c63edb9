"""A pytest plugin for the SDK's own test suite: each test module's ``query`` is teamlead's.

:mod:`tests.test_sdk_suite` runs the ``query()`` tests of the installed claude-agent-sdk's
sdist with ``-p tests.sdk_dropin_plugin``: once the modules are collected, every one that
imported ``claude_agent_sdk.query`` gets :func:`teamlead.query` under that name instead,
and the modules it replaced are listed in one line of the report (so the caller can check
that the substitution happened, not only that the tests passed).
"""

from __future__ import annotations

import types

import claude_agent_sdk
import pytest

import teamlead

#: The line's prefix in the terminal report.
REPLACED = "teamlead.query replaces query in:"

_replaced: set[str] = set()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Swap ``query`` in each collected test module that imported the SDK's."""
    for item in items:
        module = getattr(item, "module", None)
        if not isinstance(module, types.ModuleType):
            continue
        if getattr(module, "query", None) is claude_agent_sdk.query:
            module.query = teamlead.query
        if getattr(module, "query", None) is teamlead.query:
            _replaced.add(module.__name__.rsplit(".", 1)[-1])


def pytest_collection_finish(session: pytest.Session) -> None:
    """Report the modules whose ``query`` is teamlead's."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"{REPLACED} {' '.join(sorted(_replaced))}")
