"""``python -m envs.interop list``: each integration and whether its library is installed."""

from __future__ import annotations

import argparse
import sys

from envs.interop import INTEGRATIONS, installed_version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.interop", description=__doc__)
    parser.add_argument("command", choices=["list"], help="what to do")
    parser.parse_args(argv)
    rows = []
    for integration in INTEGRATIONS:
        version = installed_version(integration)
        where = f" in {integration.venv}" if integration.venv and version else ""
        state = f"{integration.distribution} {version}{where}" if version else f"not installed: {integration.install}"
        rows.append((integration.name, state, integration.what))
    width_name = max(len(r[0]) for r in rows)
    width_state = max(len(r[1]) for r in rows)
    print(f"{'integration':<{width_name}}  {'library':<{width_state}}  what it gives")
    for name, state, what in rows:
        print(f"{name:<{width_name}}  {state:<{width_state}}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
