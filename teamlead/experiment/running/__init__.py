"""Running an experiment's trials: the runner and everything one trial needs.

``runner`` schedules the trials and writes their records; ``trial`` runs one (the
workspace of ``workspace``, the setup and check commands of ``trial_commands``, the lead
through the coordinator, the ``grader``, and ``agent_counts``, what its agents did, from
its ``Finished.tasks`` rows); ``outdir`` owns the output folder;
``ray_backend`` and ``ray_cluster`` run trials as Ray tasks, their governors on
``ray_account``'s shared limits. Builds on
:mod:`teamlead.experiment.specs` only.
"""
