"""What both simulated schedulers plan with: the running jobs by planned end (`profile`, its
compiled arithmetic in `profile_kernel`). Below the EASY engine and the SLURM model alike."""
