"""SLURM integration: the adapter to SLURM's commands, the live corrector, history export."""
