"""``python -m envs.interop.openenv serve env=<id> [port=...]``: a clawgym env as an OpenEnv server."""

from __future__ import annotations

import json
import sys
from typing import Any

from envs.interop.openenv.server import MAX_SESSIONS, build_app
from envs.registration import resolve

USAGE = """usage: python -m envs.interop.openenv serve env=<alias or id> [port=8000] [host=127.0.0.1]
                                       [max_sessions=8] [idle_timeout_s=none] [env_kwargs.<name>=<value>]"""


def parse_serve_args(argv: list[str]) -> dict[str, Any]:
    """``key=value`` arguments of ``serve`` -> keyword arguments (``env_kwargs.<name>`` values
    are JSON when they parse, as in ``trainers.run``)."""
    settings: dict[str, Any] = {"port": 8000, "host": "127.0.0.1", "max_sessions": MAX_SESSIONS,
                                "idle_timeout_s": None, "env_kwargs": {}}
    for item in argv:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"argument {item!r} must look like key=value (e.g. env=guess)")
        if key.startswith("env_kwargs."):
            try:
                settings["env_kwargs"][key.removeprefix("env_kwargs.")] = json.loads(raw)
            except json.JSONDecodeError:
                settings["env_kwargs"][key.removeprefix("env_kwargs.")] = raw
        elif key == "env" or key == "host":
            settings[key] = raw
        elif key in ("port", "max_sessions"):
            try:
                settings[key] = int(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        elif key == "idle_timeout_s":
            try:
                settings[key] = None if raw.lower() in ("none", "") else float(raw)
            except ValueError:
                raise ValueError(f"idle_timeout_s={raw!r} is not a number (or none)") from None
        else:
            raise ValueError(f"unknown key {key!r}; keys: env, port, host, max_sessions, "
                             "idle_timeout_s, env_kwargs.<name>")
    if "env" not in settings:
        raise ValueError("env= is required (an alias or id: `python -m envs list`)")
    return settings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "serve":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = parse_serve_args(args[1:])
        host, port = settings.pop("host"), settings.pop("port")
        env = settings.pop("env")
        app = build_app(env, **settings)
    except (ValueError, KeyError, ImportError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    import uvicorn

    print(f"serving {resolve(env)} as an OpenEnv server on http://{host}:{port} (sessions over /ws, "
          f"at most {settings['max_sessions']})", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
