"""Which files of an agent's diff are graded (envs.swe.patches): the rules on hand-picked
paths, and the parser against what git itself writes and against stray text."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.swe.patches import Layout, drop_reason, graded_patch

LAYOUT = Layout(test_paths=frozenset({"t/check_add.py"}),
                tops={"": frozenset({"calc", "src", "setup.py", "six.py"}), "src": frozenset({"pkg"})})


# path                                   new    why (None: graded)
@pytest.mark.parametrize("path, new, why", [
    ("calc/__init__.py", False, None),
    ("calc/impl/new_module.py", True, None),          # a new file inside the project: graded
    ("src/pkg/core.py", True, None),
    ("six.py", False, None),                          # an existing top-level module: graded
    ("setup.py", False, None),
    ("t/check_add.py", False, "a test file"),         # the test_patch touches it
    ("tests/helpers.py", False, "a test file"),
    ("calc/testing/util.py", False, "a test file"),
    ("calc/test_core.py", True, "a test file"),
    ("calc/core_test.py", False, "a test file"),
    ("tests", True, "a test file"),                   # tests/ replaced by a file or a link
    ("conftest.py", True, "conftest.py: pytest runs its hooks"),
    ("calc/sub/conftest.py", True, "conftest.py: pytest runs its hooks"),
    ("pytest.ini", True, "test-runner configuration"),
    ("calc/tox.ini", True, "test-runner configuration"),
    ("pyproject.toml", False, "test-runner configuration"),
    ("setup.cfg", False, "test-runner configuration"),
    (".local/lib/python3.11/site-packages/x.pth", True, "Python runs it at start-up"),
    ("calc/sitecustomize.py", True, "Python runs it at start-up"),
    ("calc/usercustomize/__init__.py", True, "Python runs it at start-up"),
    ("calc/forge-1.0.dist-info/entry_points.txt", True, "package metadata: its entry points load pytest plugins"),
    ("calc.egg-info/PKG-INFO", False, "package metadata: its entry points load pytest plugins"),
    ("calc/__pycache__/x.cpython-311.pyc", True, "compiled bytecode"),
    ("calc/x.pyc", True, "compiled bytecode"),
    ("pytest.py", True, "a new top-level file or folder: it could shadow an installed module"),
    ("_pytest/runner.py", True, "a new top-level file or folder: it could shadow an installed module"),
    ("src/pytest.py", True, "a new top-level file or folder: it could shadow an installed module"),
    (".git/hooks/pre-commit", True, "not a path in the repository"),
    ("calc/../x.py", True, "not a path in the repository"),
])
def test_drop_reason(path, new, why):
    assert drop_reason(path, new, LAYOUT) == why


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          input=input).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("patches")
    git(root, "init", "-q")
    (root / "calc").mkdir()
    (root / "calc" / "a.py").write_text("one\ntwo\nthree\n")
    (root / "calc" / "b.py").write_text("-- a comment\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def diff(repo: Path) -> str:
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary", "--no-renames", "--full-index", "HEAD").decode(
        "utf-8", errors="surrogateescape")


def reset(repo: Path) -> None:
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfdx")


def touched(repo: Path, patch: str) -> list[str]:
    """The paths ``git apply`` reads from ``patch`` (its own parser)."""
    out = git(repo, "apply", "--numstat", "-z", "-", input=patch.encode("utf-8", errors="surrogateescape"))
    return sorted(entry.split("\t", 2)[2] for entry in out.decode("utf-8", errors="surrogateescape").split("\0")
                  if entry.count("\t") >= 2)


def test_hooks_are_dropped_and_named_and_the_fix_is_kept(repo):
    reset(repo)
    (repo / "calc" / "a.py").write_text("one\n2\nthree\n")
    (repo / "conftest.py").write_text("import pytest\n")
    (repo / "calc" / "pytest.ini").write_text("[pytest]\n")
    graded = graded_patch(diff(repo), Layout(tops={"": frozenset({"calc"})}))
    assert touched(repo, graded.text) == ["calc/a.py"]
    assert graded.dropped == [("calc/pytest.ini", "test-runner configuration"),
                              ("conftest.py", "conftest.py: pytest runs its hooks")]
    assert (graded.added, graded.removed) == (1, 1)
    assert graded.dropped_summary() == ["calc/pytest.ini (test-runner configuration)",
                                        "conftest.py (conftest.py: pytest runs its hooks)"]


def test_a_second_patch_hidden_after_a_sections_hunks_is_dropped(repo):
    reset(repo)
    (repo / "calc" / "a.py").write_text("one\n2\nthree\n")
    hidden = "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import pytest\n"
    patch = diff(repo) + hidden
    assert "conftest.py" in touched(repo, patch)  # git apply would create it
    graded = graded_patch(patch, Layout(tops={"": frozenset({"calc"})}))
    assert graded.text == "" and graded.dropped == [
        ("a/calc/a.py b/calc/a.py", "its hunks do not add up (stray lines could patch another file)")]


def test_a_removed_line_that_looks_like_a_file_header_is_still_a_hunk_line(repo):
    reset(repo)
    (repo / "calc" / "b.py").write_text("++ a comment\n")  # "--- a comment" / "+++ a comment"
    graded = graded_patch(diff(repo), Layout(tops={"": frozenset({"calc"})}))
    assert graded.dropped == [] and touched(repo, graded.text) == ["calc/b.py"]


NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
                min_size=1, max_size=12).filter(lambda n: n not in (".", "..", ".git"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map("/".join),
                             st.one_of(st.text(max_size=200), st.binary(max_size=64)), min_size=1, max_size=4),
       edit_a=st.booleans())
def test_the_parser_reads_back_every_path_and_count_git_writes(repo, files, edit_a):
    reset(repo)
    written = {}
    for name, content in files.items():
        path = repo / "calc" / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        except OSError:  # a name that is a folder of another, or too long for the disk
            continue
        written[f"calc/{name}"] = path
    if edit_a:
        (repo / "calc" / "a.py").write_text("one\ntwo\n")
    patch = diff(repo)
    names = sorted(n for n in git(repo, "diff", "--cached", "--name-only", "-z", "HEAD").decode(
        "utf-8", errors="surrogateescape").split("\0") if n)
    graded = graded_patch(patch, Layout(tops={"": frozenset({"calc"})}))
    kept = sorted(touched(repo, graded.text)) if graded.text else []
    dropped = sorted(path for path, _ in graded.dropped)
    assert sorted(kept + dropped) == names
    assert all(drop_reason(path, True, Layout(tops={"": frozenset({"calc"})})) == why
               for path, why in graded.dropped)  # dropped by the rules, never as unreadable
    numstat = git(repo, "apply", "--numstat", "-", input=graded.text.encode("utf-8", "surrogateescape")) \
        if graded.text else b""
    counts = [line.split("\t")[:2] for line in numstat.decode(errors="replace").splitlines()]
    assert graded.added == sum(int(a) for a, _ in counts if a != "-")
    assert graded.removed == sum(int(r) for _, r in counts if r != "-")


STRAY = st.lists(st.sampled_from([
    "--- /dev/null", "+++ b/conftest.py", "--- a/calc/a.py", "+++ b/calc/a.py", "@@ -0,0 +1 @@",
    "@@ -1 +1 @@", "+import pytest", "-one", " two", "", "\\ No newline at end of file",
    "diff --git a/conftest.py b/conftest.py", "new file mode 100644", "GIT binary patch", "literal 0",
    "HcmV?d00001", "rename to conftest.py", "Binary files a/x and b/x differ"]), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stray=STRAY, at=st.integers(min_value=0, max_value=50))
def test_stray_lines_never_patch_a_file_that_was_not_kept(repo, stray, at):
    reset(repo)
    (repo / "calc" / "a.py").write_text("one\n2\nthree\n")
    lines = diff(repo).split("\n")
    at = min(at, len(lines))
    patch = "\n".join(lines[:at] + stray + lines[at:])
    graded = graded_patch(patch, Layout(tops={"": frozenset({"calc"})}))
    try:
        applied = touched(repo, graded.text) if graded.text else []
    except subprocess.CalledProcessError:
        applied = []  # git refuses it: nothing is patched
    assert set(applied) <= {"calc/a.py"}
