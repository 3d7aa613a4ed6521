"""The README is the front door: short, its links lead somewhere, and its quickstart runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _section_code(text: str, heading: str) -> str:
    """The first ```python block after ``## <heading>``."""
    section = text.split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under '## {heading}'"
    return match.group(1)


def test_readme_is_at_most_250_lines():
    lines = README.read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move reference and results into docs/"


def test_every_relative_link_in_the_readme_exists():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links no docs page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_quickstart_runs_as_written(tmp_path):
    code = _section_code(README.read_text(), "Quickstart")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"the README's quickstart failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    # One printed line per turn: the env answered each of the model's replies.
    turns = [line for line in done.stdout.splitlines() if line.strip()]
    assert 1 <= len(turns) <= 3, done.stdout
