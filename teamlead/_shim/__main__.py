"""``python -m teamlead._shim``: the ``teamlead-claude`` command."""

from . import main

main()
