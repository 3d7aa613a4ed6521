"""The docs site builds without a warning: ``make docs``'s checks on every test run.

Sphinx runs with ``make docs``'s flags (``-W -n --keep-going``: every warning is an error and
every cross-reference must resolve) but the ``dummy`` builder, into a temporary folder: it
reads every page, runs autodoc over every module and resolves every reference as the HTML
build does, and skips rendering HTML, which costs more than half of ``make docs``'s time.
The one check only the HTML writer made, code blocks that their lexer cannot read, is run
under ``dummy`` by ``docs/_ext/clawgym_checks.py``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_docs_build_has_no_warnings(tmp_path: Path) -> None:
    missing = [name for name in ("sphinx", "myst_parser", "furo") if importlib.util.find_spec(name) is None]
    require(not missing, f"the docs extra is not installed ({', '.join(missing)}): "
                         "pip install -e '.[docs]' (make setup does)")
    command = [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "dummy",
               "-d", str(tmp_path / "doctrees"), "docs", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=840)
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0 and not warnings, (
        f"the docs build gave {len(warnings)} warning(s), and `make docs` fails on each "
        f"(exit code {done.returncode}; {' '.join(command)}):\n"
        + "\n".join(warnings or done.stderr.splitlines()[-40:]))
