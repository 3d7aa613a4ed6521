"""SWE instances as data: SWE-bench's record schema, loaded from JSONL or JSON and validated.

One instance per line (JSONL), or a JSON list of records. The keys are SWE-bench's::

    instance_id        unique id, e.g. "toolz__toolz-mut-0042" (letters, digits, _ . -)
    repo               a local git repository (a path, absolute or relative to the file,
                       or a file:// URL), or SWE-bench's "owner/name" with a SWE-bench
                       image in the local Docker daemon (see ``envs.swe.repos``)
    base_commit        the commit the agent starts from (hex sha)
    problem_statement  the issue text the agent is given
    patch              the gold fix (a unified diff); ``check`` proves it resolves the instance
    test_patch         the tests that grade a fix (a unified diff, applied at grading)
    FAIL_TO_PASS       tests that fail at base_commit and pass with the fix (a list, or a
    PASS_TO_PASS       JSON-encoded list as in SWE-bench's HF files); pytest node ids
    version, created_at   informational (optional here)

plus clawgym's optional keys: ``project`` (one of the generator's projects: the repository
comes from ``envs.swe.projects``), ``install`` (bash run once in the sandbox on a fresh
checkout, cached; default none), ``test_cmd`` (default ``python3 -m pytest -rA -p
no:cacheprovider``; the test files are appended), ``test_files`` (default: the files the
test_patch touches, as SWE-bench's harness picks them), ``split`` (``train`` | ``heldout``;
default ``train``) and ``mutation`` (what the generator changed). Other keys
(``environment_setup_commit``, ``hints_text``, ``eval_script``, ...) are kept in
:attr:`Instance.record`.

Every problem is an :class:`InstanceError` naming the file, line and field, e.g.
``bugs.jsonl:3: FAIL_TO_PASS must be a non-empty list of test ids``; a file with several
bad records lists them all. A test id that grading could never find in the test log (one
with a space, which swebench's pytest log parser cuts at the first space) is loaded, with a
:class:`~envs.swe.log_keys.CutTestIdWarning` naming the record, the instance and the id.
"""

from __future__ import annotations

import json
import lzma
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from envs.swe.log_keys import CutTestIdWarning, unreadable_ids

DEFAULT_TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider"
"""How tests run when a record has no ``test_cmd``: ``-rA`` prints the per-test summary
lines swebench's pytest parser reads; no cache provider, so no ``.pytest_cache``."""
SPLITS = ("train", "heldout")
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml",
                 ".yaml", ".toml")
"""swebench's ``NON_TEST_EXTS``: test_patch files with these endings are not passed to the
test command (copied, not imported: the constants module is cheap, but this keeps
``instances`` importable without swebench)."""
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
            "FAIL_TO_PASS", "PASS_TO_PASS")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{7,64}$")
MAX_ERRORS_SHOWN = 20
_Bad = Callable[[str, str], None]  # (field, what is wrong) -> records the problem


class InstanceError(ValueError):
    """Records that cannot be used; the message names the file, line and field of each problem."""


@dataclass(frozen=True)
class Instance:
    """One SWE instance (a validated record)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    version: str = ""
    created_at: str = ""
    project: str | None = None
    install: str = ""
    test_cmd: str = DEFAULT_TEST_CMD
    test_files: tuple[str, ...] = ()
    split: str = "train"
    source: str = ""
    """Where the record came from, ``file:line``, for error messages."""
    base_dir: str = "."
    """The folder of the instance file: a relative ``repo`` path is relative to it."""
    record: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    """The record as read (every key, including ones clawgym does not use)."""

    @property
    def mutation(self) -> object:
        """What the generator changed (its own format), or None."""
        return self.record.get("mutation")

    def local_repo(self) -> Path | None:
        """The repository as a local path when ``repo`` names one (path or file:// URL)."""
        repo = self.repo.removeprefix("file://")
        if repo.startswith(("/", "./", "../", "~")) or self.repo.startswith("file://"):
            return (Path(self.base_dir) / Path(repo).expanduser()).resolve()
        candidate = Path(self.base_dir) / repo
        return candidate.resolve() if candidate.exists() else None


def changed_files(diff: str) -> list[str]:
    """Paths a unified diff leaves in place (added or modified; deleted files are left out)."""
    return [f.path for f in PatchSet(diff) if not f.is_removed_file]


def touched_files(diff: str) -> list[str]:
    """Every path a unified diff touches (added, modified or deleted)."""
    return [f.path for f in PatchSet(diff)]


def directives_of(test_patch: str) -> tuple[str, ...]:
    """The files swebench's harness would pass to the test command for ``test_patch``."""
    return tuple(p for p in changed_files(test_patch) if not p.endswith(NON_TEST_EXTS))


def patch_lines(diff: str) -> int:
    """Lines a diff adds plus lines it removes (0 for an empty or unparsable diff)."""
    try:
        return sum(f.added + f.removed for f in PatchSet(diff))
    except UnidiffParseError:
        return sum(1 for line in diff.splitlines()
                   if line[:1] in "+-" and not line.startswith(("+++", "---")))


# ---- reading ---------------------------------------------------------------------------
def read_records(path: str | Path) -> list[tuple[str, object]]:
    """``(where, record)`` for every record of a JSONL or JSON file, unvalidated.

    ``where`` is ``file:line`` (JSONL) or ``file[index]`` (a JSON list). A line that is
    not JSON is an :class:`InstanceError` naming it.
    """
    path = Path(path)
    try:
        # .xz: the shipped set is 16 MB as text (each test_patch re-adds whole test files)
        text = (lzma.open(path, "rt", encoding="utf-8").read() if path.suffix == ".xz"
                else path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InstanceError(f"{path}: no such instance file") from None
    except (OSError, UnicodeDecodeError, lzma.LZMAError) as exc:
        raise InstanceError(f"{path}: cannot read it: {exc}") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InstanceError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        return [(f"{path}[{i}]", item) for i, item in enumerate(items)]
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((f"{path}:{number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not a JSON object ({exc.msg} at column {exc.colno})")
    if problems:
        raise InstanceError(_joined(problems))
    return records


def load_instances(path: str | Path) -> list[Instance]:
    """Every instance of a JSONL/JSON file, validated; an :class:`InstanceError` lists every
    problem (file:line: field: what is wrong) and every duplicate id."""
    base_dir = str(Path(path).resolve().parent)
    instances, problems = [], []
    for where, record in read_records(path):
        try:
            instances.append(parse_instance(record, where, base_dir=base_dir))
        except InstanceError as exc:
            problems.append(str(exc))
    seen: dict[str, str] = {}
    for inst in instances:
        if inst.instance_id in seen:
            problems.append(f"{inst.source}: instance_id {inst.instance_id!r} is also used at "
                            f"{seen[inst.instance_id]}; ids must be unique")
        seen.setdefault(inst.instance_id, inst.source)
    if problems:
        raise InstanceError(_joined(problems))
    if not instances:
        raise InstanceError(f"{path}: holds no instances")
    return instances


def _joined(problems: list[str]) -> str:
    shown = problems[:MAX_ERRORS_SHOWN]
    more = len(problems) - len(shown)
    return "\n".join(shown + ([f"... and {more} more problems"] if more > 0 else []))


# ---- validation ------------------------------------------------------------------------
def parse_instance(record: object, where: str = "<record>", *, base_dir: str = ".") -> Instance:
    """One record -> :class:`Instance`; an :class:`InstanceError` names every bad field."""
    if not isinstance(record, dict):
        raise InstanceError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    problems: list[str] = []

    def bad(name: str, message: str) -> None:
        problems.append(f"{where}: {name} {message}")

    for name in REQUIRED:
        if name not in record:
            bad(name, "is missing")
    instance_id = _text(record, "instance_id", bad)
    if instance_id and not _ID_RE.match(instance_id):
        bad("instance_id", f"{instance_id!r} must be letters, digits, '_', '.' or '-'")
    repo = _text(record, "repo", bad)
    base_commit = _text(record, "base_commit", bad)
    if base_commit and not _SHA_RE.match(base_commit):
        bad("base_commit", f"{base_commit!r} must be a commit sha (7 to 64 lowercase hex digits)")
    problem_statement = _text(record, "problem_statement", bad)
    patch = _diff(record, "patch", bad)
    test_patch = _diff(record, "test_patch", bad)
    f2p = _tests(record, "FAIL_TO_PASS", bad, allow_empty=False)
    p2p = _tests(record, "PASS_TO_PASS", bad, allow_empty=True)
    overlap = sorted(set(f2p) & set(p2p))
    if overlap:
        bad("PASS_TO_PASS", f"repeats FAIL_TO_PASS test {overlap[0]!r}; a test is one or the other")
    split = record.get("split", "train")
    if split not in SPLITS:
        bad("split", f"{split!r} must be one of {', '.join(SPLITS)}")
    test_cmd = record.get("test_cmd", DEFAULT_TEST_CMD)
    if not isinstance(test_cmd, str) or not test_cmd.strip():
        bad("test_cmd", "must be a non-empty shell command (the test files are appended)")
    install = record.get("install") or ""
    if not isinstance(install, str):
        bad("install", f"must be a bash script (a string), got {type(install).__name__}")
    project = record.get("project")
    if project is not None and (not isinstance(project, str) or not project):
        bad("project", "must be the name of one of envs.swe.projects' projects")
    test_files = _test_files(record, test_patch, bad)
    version, created_at = (_optional_text(record, k, bad) for k in ("version", "created_at"))
    if problems:
        raise InstanceError("\n".join(problems))
    instance = Instance(
        instance_id=instance_id, repo=repo, base_commit=base_commit,
        problem_statement=problem_statement, patch=patch, test_patch=test_patch,
        fail_to_pass=f2p, pass_to_pass=p2p, version=version, created_at=created_at,
        project=project, install=install, test_cmd=str(test_cmd), test_files=test_files,
        split=str(split), source=where, base_dir=base_dir, record=dict(record),
    )  # fmt: skip
    for line in unreadable_ids(instance):  # loaded all the same: swebench's harness grades it so too
        warnings.warn(line, CutTestIdWarning, stacklevel=2)
    return instance


def _text(record: dict[str, object], name: str, bad: _Bad) -> str:
    value = record.get(name)
    if name in record and (not isinstance(value, str) or not value.strip()):
        bad(name, f"must be a non-empty string, got {_shown(value)}")
        return ""
    return value if isinstance(value, str) else ""


def _optional_text(record: dict[str, object], name: str, bad: _Bad) -> str:
    value = record.get(name, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # SWE-bench versions such as 3.0 sometimes arrive as numbers
    if value is None:
        return ""
    if not isinstance(value, str):
        bad(name, f"must be a string, got {_shown(value)}")
        return ""
    return value


def _diff(record: dict[str, object], name: str, bad: _Bad) -> str:
    value = _text(record, name, bad)
    if not value:
        return ""
    try:
        files = PatchSet(value)
    except UnidiffParseError as exc:
        bad(name, f"is not a unified diff: {exc}")
        return ""
    if not len(files):
        bad(name, "is not a unified diff (no 'diff --git' or '---'/'+++' file header)")
    return value


def _tests(record: dict[str, object], name: str, bad: _Bad, *, allow_empty: bool) -> tuple[str, ...]:
    value = record.get(name)
    if name not in record:
        return ()
    if isinstance(value, str):  # SWE-bench's HF files encode the lists as JSON strings
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            bad(name, "is a string but not a JSON-encoded list of test ids")
            return ()
    what = "a list of test ids" if allow_empty else "a non-empty list of test ids"
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value):
        bad(name, f"must be {what}, got {_shown(value)}")
        return ()
    if not value and not allow_empty:
        bad(name, f"must be {what}: with none, every patch would count as resolved")
        return ()
    if len(set(value)) != len(value):
        dup = next(t for t in value if value.count(t) > 1)
        bad(name, f"lists {dup!r} twice")
    return tuple(value)


def _test_files(record: dict[str, object], test_patch: str, bad: _Bad) -> tuple[str, ...]:
    value = record.get("test_files")
    if value is None:
        files = directives_of(test_patch) if test_patch else ()
        if test_patch and not files:
            bad("test_patch", "touches no test file (only deletions or data files); set "
                              "test_files to the files the test command should run")
        return files
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        bad("test_files", f"must be a non-empty list of paths relative to the repository, got {_shown(value)}")
        return ()
    for p in value:
        if p.startswith("/") or ".." in Path(p).parts:
            bad("test_files", f"path {p!r} must be relative to the repository root, without '..'")
    return tuple(value)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def select(instances: Iterable[Instance], split: str, task_ids: Iterable[str] = ()) -> list[str]:
    """The ids an env offers: ``task_ids`` when given (each must exist), else the split's
    (``train``, ``heldout`` or ``all``), in file order."""
    pool = {inst.instance_id: inst for inst in instances}
    wanted = list(task_ids)
    if wanted:
        missing = [i for i in wanted if i not in pool]
        if missing:
            raise ValueError(f"task_ids {missing[:5]} are not instances of the file; "
                             f"`python -m envs.swe list <file>` shows them")
        return wanted
    ids = [i for i, inst in pool.items() if split == "all" or inst.split == split]
    if not ids:
        raise ValueError(f"no instance is in split={split!r}; use split='all', or set `split` "
                         "in the records")
    return ids
