"""hpcpredict: learn HPC job runtimes online and use the predictions for backfilling.

The package has one learner and two drivers: the offline simulator (`hpcpredict.sim`) replays a
Standard Workload Format log, and the daemon (later) is fed by a live SLURM. Both talk to the same
predictor objects through the protocol in `hpcpredict.learn.baselines`.
"""

__version__ = "0.1.0"
