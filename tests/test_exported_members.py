"""The public API of each public package is exactly what its ``__init__`` lists in ``__all__``.

Three packages are public: ``teamlead`` (what users call), ``teamlead.experiment`` (the
experiment API, not re-exported at the top level) and ``teamlead.testing`` (the offline test
bed). Every listed name exists and is documented, and nothing public is left out.
"""

from __future__ import annotations

import inspect
import types

import pytest

import teamlead
import teamlead.experiment
import teamlead.testing

PACKAGES = [teamlead, teamlead.experiment, teamlead.testing]
IDS = [package.__name__ for package in PACKAGES]


@pytest.mark.parametrize("package", PACKAGES, ids=IDS)
def test_all_names_exist_and_every_public_member_is_listed(package: types.ModuleType) -> None:
    for name in package.__all__:
        assert hasattr(package, name), name
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(package.__all__) - {"__version__"}


@pytest.mark.parametrize("package", PACKAGES, ids=IDS)
def test_public_callables_are_documented(package: types.ModuleType) -> None:
    members = [(name, getattr(package, name)) for name in package.__all__]
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
    assert (package.__doc__ or "").strip()


def test_the_top_level_surface_stays_small_and_private_helpers_stay_private() -> None:
    # 40 at most; the names users never call (the coordinator, parsing helpers, the
    # experiment API, which lives in teamlead.experiment) are not re-exported.
    assert len(teamlead.__all__) <= 40
    for private in ("Coordinator", "decode_entry", "entry_key", "parse_message", "TrialWriter"):
        assert not hasattr(teamlead, private), private
    assert not set(teamlead.__all__) & set(teamlead.experiment.__all__)
