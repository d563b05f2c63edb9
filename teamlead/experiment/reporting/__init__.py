"""The report (its models and :func:`~.report.build_report`) and its formats.

``report`` (the models, :func:`build_report`) -> ``plots``, ``render`` (Markdown, JSON,
the report folder) and ``html``. Builds on :mod:`teamlead.experiment.stats` and
:mod:`teamlead.experiment.specs`.
"""
