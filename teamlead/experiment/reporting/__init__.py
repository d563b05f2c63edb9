"""The report (its models and :func:`~.report.build_report`) and its formats.

``report`` (the models, :func:`build_report`; ``versions``, its JSON versions and reading
a ``report.json`` of any of them) -> ``headline`` (the sentences a report leads with),
``plots``, ``render`` (Markdown, JSON, the report folder) and ``html`` (with ``svg``, its
inline charts). Builds on :mod:`teamlead.experiment.stats` and
:mod:`teamlead.experiment.specs`.
"""
