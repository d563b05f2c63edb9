"""The public API of each public package is exactly what its ``__init__`` lists in ``__all__``.

Four packages are public: ``teamlead`` (what users call and get back most),
``teamlead.experiment`` (the experiment API, not re-exported at the top level),
``teamlead.sessions`` (the session stores; ``open_session_store`` is re-exported) and
``teamlead.testing`` (the offline test bed). Every listed name exists and is documented, and
nothing public is left out. The rest is grouped in public modules, each with its own
``__all__``: the events and every type they carry in ``teamlead.events``, the policies in
``teamlead.policy`` (the governor's in ``teamlead.governor``).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
import typing
from typing import Any

import pydantic
import pytest

import teamlead
import teamlead.events
import teamlead.experiment
import teamlead.governor
import teamlead.policy
import teamlead.sessions
import teamlead.testing

PACKAGES = [teamlead, teamlead.experiment, teamlead.sessions, teamlead.testing]
IDS = [package.__name__ for package in PACKAGES]
#: The public modules that group what the top level does not re-export.
GROUPS = [teamlead.events, teamlead.policy, teamlead.governor]
GROUP_IDS = [module.__name__ for module in GROUPS]


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


@pytest.mark.parametrize("module", [teamlead.events, teamlead.policy], ids=GROUP_IDS[:2])
def test_a_group_lists_every_class_and_literal_it_defines(module: types.ModuleType) -> None:
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (
            (inspect.isclass(value) and value.__module__ == module.__name__)
            or typing.get_origin(value) is typing.Literal
        )
    }
    assert defined - set(module.__all__) == set()
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize("package", PACKAGES + GROUPS, ids=IDS + GROUP_IDS)
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
    # 40 at most: what users call and what they get back most (the entry points, the run's
    # control, the policy, the last event, the errors, the process's shared state, the
    # stream's item union, the strategy prompts and the subagent roster); the events and
    # their codes are in teamlead.events, the policies' parts in teamlead.policy, the
    # governor's knobs in teamlead.governor; the names users never call (the run state,
    # parsing helpers, the test bed, the experiment API, the session stores' classes) are
    # not re-exported.
    assert len(teamlead.__all__) <= 40
    private = ("RunState", "decode_entry", "entry_key", "parse_message", "TrialWriter")
    for name in (*private, "FakeClock", "ScriptedServer"):
        assert not hasattr(teamlead, name), name
    assert not set(teamlead.__all__) & set(teamlead.experiment.__all__)
    knobs = ("SpawnPolicy", "LockPolicy", "InboxWaitPolicy", "GovernorPolicy", "bucket_key")
    for name in (*knobs, "SpawnDecided", "TaskDisposition", "Status"):
        assert not hasattr(teamlead, name), name
    grouped = {*teamlead.events.__all__, *teamlead.policy.__all__, *teamlead.governor.__all__}
    for name in set(teamlead.__all__) & grouped:  # re-exported as the same object
        owner = next(m for m in GROUPS if name in m.__all__)
        assert getattr(teamlead, name) is getattr(owner, name), name


def _named_types(annotation: Any, names: dict[int, str]) -> set[str]:
    """The module-level names (classes, ``Literal`` aliases) an annotation is made of."""
    found = {names[id(annotation)]} if id(annotation) in names else set()
    if id(annotation) in names and typing.get_origin(annotation) is typing.Literal:
        return found  # a named Literal alias: its values are not types
    for arg in typing.get_args(annotation):
        found |= _named_types(arg, names)
    return found


def test_every_type_an_event_carries_is_exported() -> None:
    # what a user receives back (Finished.tasks, .relay, .reason, SpawnDecided.outcome, ...)
    # can be named and imported from teamlead.events, as the claude SDK exports every type
    # its users get
    events = vars(teamlead.events)
    names = {
        id(value): name
        for name, value in events.items()
        if not name.startswith("_")
        and (
            (inspect.isclass(value) and value.__module__ == teamlead.events.__name__)
            or typing.get_origin(value) is typing.Literal
        )
    }
    reachable: set[str] = set()
    todo: list[type[pydantic.BaseModel]] = list(typing.get_args(teamlead.events.TeamleadEvent))
    seen: set[type[pydantic.BaseModel]] = set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        reachable.add(model.__name__)
        hints = typing.get_type_hints(model)  # resolves the forward references
        for field in model.model_fields:
            for name in _named_types(hints[field], names):
                reachable.add(name)
                value = events[name]
                if inspect.isclass(value) and issubclass(value, pydantic.BaseModel):
                    todo.append(value)
    expected = {"TaskDisposition", "RelaySummary", "BucketSummary", "FinishReason", "SpawnOutcome"}
    assert expected <= reachable
    assert reachable - set(teamlead.events.__all__) == set()


def test_every_policy_a_user_constructs_is_exported() -> None:
    policies = {
        name
        for module in (teamlead.policy, teamlead.governor)
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, pydantic.BaseModel)
        and name.endswith("Policy")
        and value.__module__.startswith("teamlead.")
    }
    assert {"Policy", "SpawnPolicy", "RetryPolicy", "GovernorPolicy"} <= policies
    assert policies - {*teamlead.policy.__all__, *teamlead.governor.__all__} == set()
    # a part of Policy is reachable through its field's type, in teamlead.policy
    parts = {
        field.annotation.__name__
        for field in teamlead.Policy.model_fields.values()
        if inspect.isclass(field.annotation) and issubclass(field.annotation, pydantic.BaseModel)
    }
    assert {"SpawnPolicy", "RetryPolicy", "InboxWaitPolicy", "LimitsPolicy"} <= parts
    assert parts <= set(teamlead.policy.__all__)


def test_importing_teamlead_loads_no_public_module_until_a_name_is_used() -> None:
    # `python -m teamlead` imports the package first: it must cost nothing, so the command
    # takes its stop signals before the SDK (over a second) loads
    code = (
        "import sys, teamlead\n"
        "heavy = {'claude_agent_sdk', 'pydantic', 'teamlead.coordinator', 'teamlead.events'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
        "teamlead.Finished\n"
        "print('teamlead.events' in sys.modules, 'claude_agent_sdk' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == ["[]", "True False"]
