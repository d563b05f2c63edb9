"""A stop signal while ``teamlead`` is still starting ends it as an interrupted run ends.

The command's modules take about two seconds to load, and a run watches for the stop
signals only once it starts; in between, SIGINT printed a ``KeyboardInterrupt`` traceback,
and SIGTERM and SIGHUP killed the process (exit 143 and 129) with nothing on stdout,
though ``--json`` promises a ``finished`` line. Here a real ``teamlead ask`` subprocess
gets each signal at three points of its start-up, each read from outside (its CPU time,
its descriptors), never guessed with a sleep:

- ``importing``: a tenth of a second of CPU in, every heavy import still ahead. Not
  earlier: until the interpreter runs teamlead's first line (a third of that), the
  kernel's default ends the process, which no code can change.
- ``loading``: six tenths of a second of CPU in, deep in the imports (the SDK's).
- ``looping``: once its event loop exists (an ``eventpoll`` descriptor that stays, once the imports
  are well under way: ``selectors`` opens one for an instant as it loads, to see that it
  can): the run is starting, and the signal meets either the start-up's handler or the
  run's own watcher.

Every way, the command exits 130 with no traceback, and with ``--json`` its last line is
``finished``, reason ``interrupted``. The model is scripted and never answers in time;
the runs (one per point and signal) share nothing and go three side by side.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from teamlead.events import EVENT_VERSION
from teamlead.testing import OfflineClaude, Reply, ScriptedServer

from ..isolated import isolated_env, side_by_side
from ..polling import poll
from .conftest import cli_processes, start_ask
from .startup_points import POINTS

pytestmark = [
    pytest.mark.cli,
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc"),
]

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class StoppedStart:
    """One ``teamlead ask`` that got a stop signal at one point of its start-up."""

    reached: bool  #: the point was seen before the process ended
    returncode: int | None
    out: str
    err: str
    reaped: bool  #: no CLI process of the run was left afterwards


def _stopped_start(key: tuple[str, signal.Signals, bool], root: Path) -> StoppedStart:
    point, stop, as_json = key
    with ScriptedServer(lambda request: Reply.text("too late", delay=60)) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        proc = start_ask(claude, *(["--json"] if as_json else []), base=isolated_env(root))
        try:
            at_point = POINTS[point]
            reached = bool(
                poll(
                    lambda: at_point(proc.pid),
                    within_s=60,
                    every_s=0.002,
                    unless=lambda: proc.poll() is not None,
                )
            )
            if reached:
                proc.send_signal(stop)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    reaped = bool(poll(lambda: not cli_processes(root / "s"), within_s=10))
    return StoppedStart(reached, proc.returncode, out, err, reaped)


KEYS = [(point, stop, True) for point in POINTS for stop in STOPS]
PLAIN = ("importing", signal.SIGTERM, False)


@pytest.fixture(scope="module")
def stopped_starts(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, signal.Signals, bool], StoppedStart]:
    """One run per point and signal (and one without ``--json``), three side by side."""
    return side_by_side(
        _stopped_start,
        [*KEYS, PLAIN],
        tmp_path_factory,
        at_once=3,
        root_name=lambda key: f"{key[0]}-{key[1].name}-{'json' if key[2] else 'plain'}",
    )


@pytest.mark.parametrize(
    ("point", "stop"), [(p, s) for p, s, _ in KEYS], ids=[f"{p}-{s.name}" for p, s, _ in KEYS]
)
def test_a_stop_signal_while_ask_json_starts_exits_130_with_its_finished_line(
    stopped_starts: dict[tuple[str, signal.Signals, bool], StoppedStart],
    point: str,
    stop: signal.Signals,
) -> None:
    run = stopped_starts[(point, stop, True)]
    assert run.reached, f"the process ended before {point}: {run.err[-500:]}"
    assert run.returncode == 130, run.err[-2000:]
    assert "Traceback" not in run.err, run.err[-2000:]
    lines = run.out.splitlines()
    assert lines, "nothing on stdout"
    done = json.loads(lines[-1])
    assert (done["type"], done["version"]) == ("finished", EVENT_VERSION), done
    # stopped before the lead ran: no answer, no task
    assert (done["reason"], done["status"], done["tasks"]) == ("interrupted", "failed", []), done
    assert stop.name in " ".join(done["reasons"]), done
    assert run.err.splitlines()[-1].startswith("teamlead: interrupted"), run.err[-500:]
    assert run.reaped


def test_a_stop_signal_while_ask_starts_prints_one_line_and_no_answer(
    stopped_starts: dict[tuple[str, signal.Signals, bool], StoppedStart],
) -> None:
    run = stopped_starts[PLAIN]
    assert run.reached, run.err[-500:]
    assert (run.returncode, run.out, run.err) == (130, "", "teamlead: interrupted\n")
