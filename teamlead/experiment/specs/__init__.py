"""What an experiment is and what it leaves behind: the spec and the trial records.

``spec`` (the TOML spec, with ``steps`` for a task's workspace and setup/check commands,
and ``_toml_lines`` for the line numbers of its errors) and ``records`` (the versioned
JSON lines, one per trial); ``synthetic`` makes records for a demo. Nothing here runs
anything or computes a statistic: the other stages build on these.
"""
