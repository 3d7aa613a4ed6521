"""Build the default model's safetensors cache ahead of time (:mod:`agents.model_cache`).

    python -m scripts.cache_model            # idempotent; prints the cache path
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.model_cache import build, default_model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_model_dir())
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
