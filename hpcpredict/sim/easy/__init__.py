"""The EASY engine (docs/method.md §7): FCFS, EASY and EASY-SJBF backfilling (`schedulers`, the
pass compiled in `backfill_kernel`), the event loop (`simulation`), and the same loop compiled
for the configurations it models (`compiled_replay` over `replay_kernel`)."""
