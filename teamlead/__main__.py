"""``python -m teamlead``: the same command line as the ``teamlead`` script."""

from ._cli import run

run()
