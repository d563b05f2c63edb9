"""The public API is exactly what ``teamlead/__init__.py`` re-exports in ``__all__``."""

from __future__ import annotations

import inspect
import types

import teamlead


def test_all_names_exist_and_every_public_member_is_listed() -> None:
    for name in teamlead.__all__:
        assert hasattr(teamlead, name), name
    public = {
        name
        for name, value in vars(teamlead).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(teamlead.__all__) - {"__version__"}


def test_public_callables_are_documented() -> None:
    members = [(name, getattr(teamlead, name)) for name in teamlead.__all__]
    missing = [
        name
        for name, value in members
        if (
            (inspect.isclass(value) and not hasattr(value, "__origin__"))
            or inspect.isfunction(value)
        )
        and not (value.__doc__ or "").strip()
    ]
    assert missing == []
