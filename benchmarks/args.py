"""``key=value`` command lines of the benchmark scripts."""

from __future__ import annotations

from collections.abc import Iterable


def key_values(argv: list[str], defaults: dict[str, str], internal: Iterable[str] = (),
               positive: Iterable[str] = ()) -> dict[str, str]:
    """``defaults`` updated from ``argv``'s ``key=value`` items. A bare word or a key not in
    ``defaults`` (nor ``internal``: keys a script passes to its own child processes) exits
    naming the keys; each of ``positive`` must be a positive integer."""
    args = dict(defaults)
    for item in argv:
        key, eq, value = item.partition("=")
        if not eq or (key not in defaults and key not in internal):
            raise SystemExit(f"unknown argument {item!r}; pass key=value with key one of: {', '.join(defaults)}")
        args[key] = value
    for key in positive:
        if not str(args[key]).isdigit() or int(args[key]) < 1:
            raise SystemExit(f"{key} must be a positive integer, got {args[key]!r}")
    return args
