"""``python -m teamlead``: the same command line as the ``teamlead`` script."""

from ._cli.startup import run

run()
