"""The SLURM model (`--scheduler slurm-backfill`): Slurm's main scheduler and its periodic
backfill passes (`slurm_backfill`, the pass compiled in `slurm_backfill_kernel`, the loop in
`compiled_slurm_replay` over `slurm_replay_kernel`), with slurm.conf's settings (`slurm_params`,
read from a file by `slurm_conf`). It reuses the EASY engine's result and compiled plumbing."""
