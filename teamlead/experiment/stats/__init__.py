"""The statistics of an experiment, clustered by task.

The modules form a one-way chain, each importing only those before it: ``intervals``
(the t-intervals) -> ``estimates`` (means, the paired permutation test) -> ``rates`` (the
clustered Wilson interval) -> ``power`` (the simulated MDE) -> ``verdicts`` -> ``explain``
-> ``metrics`` (which record field each metric reads) -> ``comparisons`` (one variant
against the control). Builds on :mod:`teamlead.experiment.specs` only.
"""
