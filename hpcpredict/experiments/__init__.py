"""Experiments built on the simulator: campaigns over logs and shaken replicas (`campaign`, their
stores and reports), `hpcpredict tune` (`tune`), and the replay of a log through a real SLURM
(`slurm_replay`). Nothing below imports them."""
