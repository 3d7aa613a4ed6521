"""``python -m benchmarks.perf_terminal``: :mod:`benchmarks.perf_env` for the terminal env (its default)."""

import sys

from benchmarks.perf_env import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m benchmarks.perf_terminal"))
