"""``python -m hpcpredict.cli``: the ``hpcpredict`` command, where the entry point is not installed
(the daemon's tests and benchmarks start it with the interpreter they run under)."""

from hpcpredict.cli import main

if __name__ == "__main__":  # not when a tool imports every module (pytest --doctest-modules)
    main(prog_name="hpcpredict")
