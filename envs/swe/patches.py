"""What of an agent's diff is graded: its changes to the project's source, and nothing that
could change how the tests run or how their results are reported.

SWE-bench applies the whole model patch and restores only the files the test_patch
touches, so a patch that adds a root ``conftest.py`` whose hook marks failed reports as
passed, a ``pytest.ini`` with ``addopts = -p myplugin``, a ``.pth`` file in the user
site-packages (``$HOME`` is ``/workspace``) or a ``pytest.py`` that shadows the real one
is graded with its hook in place. Here each file of the diff is kept or dropped by its
path alone (:func:`drop_reason`), before what is kept is applied to a fresh copy of the
repository (:mod:`envs.swe.grading`):

==========================================  ===================================================
dropped                                     why
==========================================  ===================================================
the files the test_patch touches; anything  test code: the tests graded are the test_patch's
in or named ``test``, ``tests``,
``testing``; ``test_*.py``, ``*_test.py``
``conftest.py`` anywhere                    pytest imports it and runs its hooks
``pytest.ini``, ``.pytest.ini``,            the test runner's configuration (``addopts``,
``pytest.toml``, ``.pytest.toml``,          ``-p`` plugins, ``python_files``)
``tox.ini``, ``setup.cfg``,
``pyproject.toml``, anywhere
``sitecustomize``, ``usercustomize``,       Python runs them at start-up
``*.pth``
``*.dist-info``, ``*.egg-info``,            installed-package metadata: its ``pytest11``
``*.egg-link``, ``*.egg``                   entry points load plugins
``__pycache__``, ``*.pyc``, ``*.pyo``       bytecode Python can run instead of the source
a new file or folder at the top level, or   it can shadow an installed module (``pytest.py``,
at the top of a ``PYTHONPATH`` folder of    ``_pytest/``, ``pluggy/``) or add a user site
``test_cmd``                                (``.local/``)
``.git`` paths; a section git would not     not a file of the repository; text that can
have written                                hide a second file's patch
==========================================  ===================================================

Files the repository's pristine ignore rules ignore (install outputs, caches) never enter
the diff (:func:`envs.swe.grading.model_patch`), whatever the agent wrote in
``.gitignore``. What is kept is the project's source, tests of it excluded; the verdict
lists what was dropped, and the system prompt tells the agent so.

The limit no path rule lifts: the kept source runs inside the test process (the tests
import it), so source code written to patch pytest at import time can forge results
(SWE-bench's harness shares it). The grader's canary tests (:mod:`envs.swe.canary`) catch
such source unless it recognizes them.
"""

from __future__ import annotations

import functools
import re
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

TEST_NAMES = frozenset({"test", "tests", "testing"})
CONFTEST = "conftest.py"
RUNNER_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                           "setup.cfg", "pyproject.toml"})
STARTUP = frozenset({"sitecustomize", "usercustomize"})
METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".egg")
MAX_DROPPED_SHOWN = 20
"""Dropped paths a verdict names (the rest are counted): info stays bounded."""

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HEADER_LINES = ("index ", "old mode ", "new mode ", "deleted file mode ", "new file mode ")
_BASE85 = re.compile(r"[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclass(frozen=True)
class Layout:
    """What the rules need to know of an instance: the paths its test_patch touches and
    the names at the top of each folder Python imports from first."""

    test_paths: frozenset[str] = frozenset()
    tops: dict[str, frozenset[str]] = field(default_factory=lambda: {"": frozenset()})
    """Folder ("" for the root, else a ``PYTHONPATH`` entry) -> the names in it at base."""


@dataclass
class GradedPatch:
    """The part of a diff that is graded, and what was left out."""

    text: str
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) per file section left out, in patch order."""
    added: int = 0
    removed: int = 0

    @property
    def lines(self) -> int:
        return self.added + self.removed

    def dropped_summary(self) -> list[str]:
        """``path (why)`` for the first dropped files, then how many more: bounded."""
        shown = [f"{path[:200]} ({why})" for path, why in self.dropped[:MAX_DROPPED_SHOWN]]
        more = len(self.dropped) - MAX_DROPPED_SHOWN
        return shown + ([f"and {more} more"] if more > 0 else [])


def drop_reason(path: str, new: bool, layout: Layout) -> str | None:
    """Why the diff of ``path`` is not graded (None: it is); ``new``: the diff creates it."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
        return "not a path in the repository"
    name = parts[-1]
    stem, suffix = (name[:-3], ".py") if name.endswith(".py") else (name, "")
    if (path in layout.test_paths or any(p in TEST_NAMES for p in parts[:-1]) or stem in TEST_NAMES
            or (suffix and (stem.startswith("test_") or stem.endswith("_test")))):
        return "a test file"
    if name == CONFTEST:
        return "conftest.py: pytest runs its hooks"
    if name in RUNNER_CONFIG:
        return "test-runner configuration"
    if name.endswith(".pth") or any(p in STARTUP or p.removesuffix(".py") in STARTUP for p in parts):
        return "Python runs it at start-up"
    if any(p.endswith(METADATA_SUFFIXES) for p in parts):
        return "package metadata: its entry points load pytest plugins"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "compiled bytecode"
    if new:
        for folder, names in layout.tops.items():
            inside = parts if not folder else parts[len(folder.split("/")):]
            if (not folder or path.startswith(folder + "/")) and inside[0] not in names:
                return "a new top-level file or folder: it could shadow an installed module"
    return None


def graded_patch(patch: str, layout: Layout) -> GradedPatch:
    """Keep the file sections of ``patch`` whose path is graded; drop and name the rest."""
    kept: list[str] = []
    result = GradedPatch("")
    starts = [m.start() for m in re.finditer(r"^diff --git ", patch, re.M)]
    if patch[: starts[0] if starts else len(patch)].strip():
        result.dropped.append(("(text before the first file)", "not part of a git diff"))
    for k, start in enumerate(starts):
        section = patch[start: starts[k + 1] if k + 1 < len(starts) else len(patch)]
        parsed = _parse_section(section)
        if isinstance(parsed, str):
            result.dropped.append((section.split("\n", 1)[0][11:][:200], parsed))
            continue
        path, new, added, removed = parsed
        why = drop_reason(path, new, layout)
        if why is not None:
            result.dropped.append((path, why))
            continue
        kept.append(section if section.endswith("\n") else section + "\n")
        result.added += added
        result.removed += removed
    result.text = "".join(kept)
    return result


def layout_of(test_patch_paths: list[str], test_cmd: str, workspace_tar: Path) -> Layout:
    """The :class:`Layout` of an instance from its test_patch, ``test_cmd`` and prepared tar."""
    folders = [""] + _pythonpath(test_cmd)
    tops = _tar_tops(str(workspace_tar), workspace_tar.stat().st_mtime_ns, tuple(folders))
    return Layout(frozenset(test_patch_paths), tops)


# ---- parsing what git writes ----------------------------------------------------------------
def _parse_section(section: str) -> tuple[str, bool, int, int] | str:
    """(path, creates it, lines added, lines removed) of one ``diff --git`` section, or why
    it is not one git writes (no renames, copies or stray text that ``git apply`` or
    ``patch`` would read as another file's patch)."""
    lines = section.split("\n")
    path = _header_path(lines[0][len("diff --git "):])
    if path is None:
        return "an unreadable `diff --git` line"
    i, new = 1, False
    while i < len(lines) and lines[i].startswith(_HEADER_LINES):
        new = new or lines[i].startswith("new file mode ")
        i += 1
    end = len(lines)
    while end > i and lines[end - 1] == "":
        end -= 1
    body = lines[i:end]
    if not body or (len(body) == 1 and body[0].startswith("Binary files ")):
        return path, new, 0, 0
    if body[0] == "GIT binary patch":
        return (path, new, 0, 0) if _binary_ok(lines[i + 1:]) else "a malformed binary patch"
    if len(body) < 2 or _name(body[0], "--- ") not in (f"a/{path}", "/dev/null") \
            or _name(body[1], "+++ ") not in (f"b/{path}", "/dev/null"):
        return "its ---/+++ lines do not name its file"
    counted = _hunks(body[2:])
    if counted is None:
        return "its hunks do not add up (stray lines could patch another file)"
    return (path, new, *counted)


def _hunks(lines: list[str]) -> tuple[int, int] | None:
    """(added, removed) if ``lines`` are whole hunks and nothing else, else None."""
    added = removed = 0
    j = 0
    while j < len(lines):
        m = _HUNK.match(lines[j])
        if not m:
            return None
        old = int(m[2]) if m[2] is not None else 1
        new = int(m[4]) if m[4] is not None else 1
        j += 1
        while old > 0 or new > 0:
            if j >= len(lines):
                return None
            kind = lines[j][:1]
            if kind in (" ", ""):  # git apply reads an empty line as empty context
                old, new = old - 1, new - 1
            elif kind == "-":
                old, removed = old - 1, removed + 1
            elif kind == "+":
                new, added = new - 1, added + 1
            elif kind != "\\":
                return None
            if old < 0 or new < 0:
                return None
            j += 1
        while j < len(lines) and lines[j].startswith("\\"):
            j += 1
    return added, removed


def _binary_ok(lines: list[str]) -> bool:
    """Whether ``lines`` are one or two ``literal``/``delta`` blocks of base85 and blank lines."""
    blocks, j = 0, 0
    while j < len(lines) and lines[j]:
        if not re.fullmatch(r"(literal|delta) \d+", lines[j]) or blocks == 2:
            return False
        blocks, j = blocks + 1, j + 1
        while j < len(lines) and lines[j]:
            if not _BASE85.fullmatch(lines[j]):
                return False
            j += 1
        j += 1  # the blank line that ends a block
    return blocks > 0 and all(not line for line in lines[j:])


def _header_path(rest: str) -> str | None:
    """The one path of ``a/<path> b/<path>`` (C-quoted when git quotes it), else None."""
    if rest.startswith('"'):
        first = _unquote(rest)
        if first is None or not first[1].startswith(" "):
            return None
        a, tail = first[0], first[1][1:]
        second = _unquote(tail) if tail.startswith('"') else (tail, "")
        if second is None or second[1]:
            return None
        b = second[0]
    else:
        if rest.endswith('"') or len(rest) % 2 == 0:
            return None
        half = (len(rest) - 5) // 2
        a, sep, b = rest[:2 + half], rest[2 + half], rest[3 + half:]
        if sep != " ":
            return None
    if not (a.startswith("a/") and b.startswith("b/") and a[2:] == b[2:] and a[2:]):
        return None
    return a[2:]


def _name(line: str, prefix: str) -> str | None:
    """The file name of a ``---``/``+++`` line (git adds a tab after a name with a space)."""
    if not line.startswith(prefix):
        return None
    token = line[len(prefix):]
    if token.startswith('"'):
        parsed = _unquote(token)
        return parsed[0] if parsed is not None and not parsed[1].strip("\t") else None
    return token[:-1] if token.endswith("\t") else token


def _unquote(text: str) -> tuple[str, str] | None:
    """Git's C-style quoted name at the start of ``text``: (the name, the rest), else None."""
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return out.decode("utf-8", errors="surrogateescape"), text[i + 1:]
        if c != "\\":
            out += c.encode("utf-8", errors="surrogateescape")
            i += 1
        elif text[i + 1:i + 2] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", text[i + 1:i + 4]):
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            return None
    return None


# ---- the instance's layout ------------------------------------------------------------------
def _pythonpath(test_cmd: str) -> list[str]:
    """Relative ``PYTHONPATH`` folders ``test_cmd`` sets (``PYTHONPATH=src python -m pytest``)."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        words = test_cmd.split()
    folders = []
    for word in words:
        if word.startswith("PYTHONPATH="):
            for entry in word.removeprefix("PYTHONPATH=").split(":"):
                entry = entry.removeprefix("./").strip("/")
                if entry and entry != "." and not entry.startswith(("$", "..")) and ".." not in entry.split("/"):
                    folders.append(entry)
    return folders


@functools.lru_cache(maxsize=64)
def _tar_tops(tar: str, mtime_ns: int, folders: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """The names at the top of each folder of a prepared workspace tar (members ``./name``).
    Cached per tar file and modification time: a tar is read once per process."""
    del mtime_ns  # part of the cache key only
    tops: dict[str, set[str]] = {folder: set() for folder in folders}
    with tarfile.open(tar, mode="r:") as archive:
        for member in archive:
            parts = PurePosixPath(member.name.removeprefix("./")).parts
            for folder in folders:
                depth = len(PurePosixPath(folder).parts)
                if len(parts) > depth and list(parts[:depth]) == list(PurePosixPath(folder).parts):
                    tops[folder].add(parts[depth])
    return {folder: frozenset(names) for folder, names in tops.items()}


__all__ = ["GradedPatch", "Layout", "drop_reason", "graded_patch", "layout_of"]
