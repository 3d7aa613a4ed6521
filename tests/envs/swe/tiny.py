"""A tiny real SWE instance, built in a temp dir: a Python package in a local git repo with
a bug at base_commit, its gold patch, and a test_patch that adds the failing test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CALC = '''"""Small arithmetic helpers."""


def add(a, b):
    """Return a + b."""
    return a - b


def mul(a, b):
    """Return a * b."""
    return a * b
'''

TESTS = '''from calc import mul


def test_mul():
    assert mul(3, 4) == 12
'''

GOLD_PATCH = """diff --git a/calc/__init__.py b/calc/__init__.py
--- a/calc/__init__.py
+++ b/calc/__init__.py
@@ -3,7 +3,7 @@
 
 def add(a, b):
     \"\"\"Return a + b.\"\"\"
-    return a - b
+    return a + b
 
 
 def mul(a, b):
"""

TEST_PATCH = """diff --git a/tests/test_calc.py b/tests/test_calc.py
--- a/tests/test_calc.py
+++ b/tests/test_calc.py
@@ -1,5 +1,13 @@
-from calc import mul
+from calc import add, mul
 
 
 def test_mul():
     assert mul(3, 4) == 12
+
+
+def test_add():
+    assert add(2, 3) == 5
+
+
+def test_add_zero():
+    assert add(0, 7) == 7
"""

NEW_TEST_PATCH = """diff --git a/tests/test_add.py b/tests/test_add.py
new file mode 100644
--- /dev/null
+++ b/tests/test_add.py
@@ -0,0 +1,5 @@
+from calc import add
+
+
+def test_add():
+    assert add(2, 3) == 5
"""
"""A test_patch that adds a test file (as most SWE-bench test_patches do)."""

F2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_zero"]
P2P = ["tests/test_calc.py::test_mul"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(root: Path) -> tuple[Path, str]:
    """The repo with a correct first commit, then the bug (base_commit) and a later fix
    commit that must never reach the agent. Returns (repo, base_commit)."""
    repo = root / "calc-repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc" / "__init__.py").write_text(CALC.replace("a - b", "a + b"))
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / ".gitignore").write_text("*.egg-info/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc: add and mul")
    (repo / "calc" / "__init__.py").write_text(CALC)
    git(repo, "commit", "-q", "-am", "refactor add")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "__init__.py").write_text(CALC.replace("a - b", "a + b"))
    git(repo, "commit", "-q", "-am", "fix add (the gold patch)")
    return repo, base


def record(repo: Path, base: str, **extra: object) -> dict[str, object]:
    return {"instance_id": "calc__calc-1", "repo": str(repo), "base_commit": base,
            "problem_statement": "add(2, 3) returns -1; it should return 5.",
            "patch": GOLD_PATCH, "test_patch": TEST_PATCH, "FAIL_TO_PASS": F2P,
            "PASS_TO_PASS": P2P, "version": "0.1", "created_at": "2024-01-01T00:00:00Z", **extra}


def write_instances(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
