"""The package layout is the architecture: envs < agents < trainers < benchmarks < scripts, and
imports only run downward. Every module of the four library layers is parsed (not imported:
an import inside a function or under ``TYPE_CHECKING`` is a dependency too) and each import of
a higher layer is named with its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "agents", "trainers", "benchmarks", "scripts")
"""Bottom to top: a module may import its own layer and those before it."""


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``source`` (the module ``module``, whose
    relative imports are resolved against it), at any depth: in functions, classes, ``if`` blocks."""
    package = module.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level] if node.level else []
            found.append((node.lineno, ".".join([*base, *([node.module] if node.module else [])])))
    return sorted(found)


def upward_imports(layer: str, source: str, module: str) -> list[tuple[int, str]]:
    """The imports of ``source`` (a module of ``layer``) that reach a layer above it."""
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    return [(line, name) for line, name in imported_modules(source, module) if name.split(".")[0] in above]


def test_the_scan_sees_imports_in_functions_relative_ones_and_type_checking_blocks() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "import envs.core\n"
              "if TYPE_CHECKING:\n"
              "    from benchmarks.run import Suite\n"
              "def f():\n"
              "    import trainers.rollout, json\n"
              "    from .. import scripts\n"
              "    from ..envs import core\n")
    assert upward_imports("agents", source, "agents.sub.mod") == [(4, "benchmarks.run"), (6, "trainers.rollout")]
    assert upward_imports("trainers", source, "trainers.mod") == [(4, "benchmarks.run")]
    assert upward_imports("trainers", "from . import loop\n", "trainers.mod") == []  # its own layer
    assert imported_modules("from .core import ClawEnv\n", "envs.__init__") == [(1, "envs.core")]
    assert upward_imports("benchmarks", source, "benchmarks.mod") == []


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_imports_only_run_downward(layer: str) -> None:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, f"no modules under {layer}/"
    wrong = []
    for path in files:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)  # a package's own: pkg.__init__
        wrong += [f"{path.relative_to(ROOT)}:{line} imports {name}"
                  for line, name in upward_imports(layer, path.read_text(), module)]
    assert not wrong, (f"{layer}/ may import only {', '.join(LAYERS[: LAYERS.index(layer) + 1])}:\n  "
                       + "\n  ".join(wrong))
