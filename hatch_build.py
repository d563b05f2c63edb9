"""The wheel's ``teamlead-claude``: the launcher compiled (``_teamlead_claude.c``), when it can be.

An SDK app starts ``teamlead-claude`` for every query; an interpreter's own start is a
twentieth of a short one, the compiled launcher's well under a thousandth. It hands a
session to a warm teamlead process that runs already and leaves everything else to the
launcher in Python, installed as ``teamlead-claude-py`` (``[project.scripts]``). Where it
cannot be compiled (not Linux, no C compiler: ``CC``, else ``cc``), ``teamlead-claude`` is
that launcher in Python too, and the wheel says why on the build's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_SOURCE = "_teamlead_claude.c"
_SCRIPT = "teamlead-claude"
_IN_PYTHON = (
    "#!python\n"  # the installer writes the interpreter here
    "import sys\n\n"
    "from _teamlead_claude import main\n\n"
    'if __name__ == "__main__":\n'
    "    sys.exit(main())\n"
)


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds ``teamlead-claude`` to the wheel's scripts: compiled, or else in Python."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        self._folder = tempfile.mkdtemp(prefix="teamlead-claude-build-")
        script = Path(self._folder) / _SCRIPT
        why = _compile(Path(self.root) / _SOURCE, script)
        if why is None:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
        else:
            self.app.display_warning(f"teamlead-claude: the launcher in Python ({why})")
            script.write_text(_IN_PYTHON)
            script.chmod(0o755)
        build_data["shared_scripts"][str(script)] = _SCRIPT

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self.target_name == "wheel":
            shutil.rmtree(self._folder, ignore_errors=True)


def _compile(source: Path, binary: Path) -> str | None:
    """Compile the launcher at ``binary``; ``None``, or why it was not."""
    if not sys.platform.startswith("linux"):
        return f"it is compiled on Linux only, not on {sys.platform}"
    compiler = os.environ.get("CC", "cc")
    command = [*compiler.split(), "-O2", "-std=c11", "-o", str(binary), str(source)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no C compiler {compiler!r}: {exc}"
    if done.returncode != 0:
        return f"{compiler} failed: {done.stderr.strip()[:500]}"
    return None
