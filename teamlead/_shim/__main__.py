"""``python -m teamlead._shim``: the ``teamlead-claude`` command."""

from . import main

if __name__ == "__main__":
    main()
