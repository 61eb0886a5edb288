"""``python -m hpcpredict.cli``: the ``hpcpredict`` command, where the entry point is not installed
(the daemon's tests and benchmarks start it with the interpreter they run under)."""

from hpcpredict.cli import main

main(prog_name="hpcpredict")
