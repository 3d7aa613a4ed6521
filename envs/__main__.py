"""``python -m envs list``: every registered env with its alias and one-line description."""

from __future__ import annotations

import argparse
import sys

from envs.registration import entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs", description=__doc__)
    parser.add_argument("command", choices=["list"], help="what to do")
    parser.parse_args(argv)
    rows = [(e.env_id, e.alias or "-", e.description) for e in entries()]
    width_id = max((len(r[0]) for r in rows), default=2)
    width_alias = max((len(r[1]) for r in rows), default=5)
    print(f"{'id':<{width_id}}  {'alias':<{width_alias}}  description")
    for env_id, alias, description in rows:
        print(f"{env_id:<{width_id}}  {alias:<{width_alias}}  {description}")
    print(f"{len(rows)} env(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
