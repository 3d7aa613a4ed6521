"""Test ids as swebench's log parsers record them, and why an id is not found in a test log.

swebench grades a FAIL_TO_PASS or PASS_TO_PASS id by looking it up in the status map its
log parser makes of the test output (exactly, or by prefix for an id cut inside ``[...]``:
``swebench.harness.grading._resolve_case``); an id it does not find counts as failed. Its pytest parsers
(``parse_log_pytest``, ``parse_log_pytest_options`` and their aliases) key each ``-rA``
status line by its second whitespace-separated word, so ``PASSED t.py::test_x[a b]`` is
recorded as ``t.py::test_x[a``, and an id with a space in it is never found, however
the test ends. SWE-bench's own data holds such ids cut, as the parsers recorded them.

:func:`key_of` asks the parser itself what it records for an id, so the rules stay
swebench's: :func:`not_found` says, for each failed id the log does not name, why and what
to change in the instance; :func:`unreadable_ids` is the warning loading gives for an id
with a space that the instance's parser cannot record (:class:`CutTestIdWarning`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swebench.types import TestSpec

    from envs.swe.instances import Instance

LogParser = Callable[[str, "TestSpec"], dict[str, str]]


class CutTestIdWarning(UserWarning):
    """An instance lists a test id its log parser records under another key: grading will
    never find it, so it always counts as failed."""


def log_parser_name(instance: Instance) -> str:
    """The swebench log parser of ``instance``: its record's ``log_parser``, else pytest's."""
    from envs.swe.grading import swebench_harness  # imported here: grading imports this module

    parser = str(instance.record.get("log_parser") or "parse_log_pytest")
    return parser if parser in swebench_harness().PARSER_REGISTRY else "parse_log_pytest"


def swebench_spec(instance: Instance) -> TestSpec:
    """swebench's ``TestSpec`` of ``instance`` as its grading reads it (no image, no script)."""
    from envs.swe.grading import swebench_harness

    sb = swebench_harness()
    return sb.TestSpec(instance_id=instance.instance_id, image="", eval_script_list=[],
                       repo=instance.repo, version=instance.version,
                       FAIL_TO_PASS=list(instance.fail_to_pass), PASS_TO_PASS=list(instance.pass_to_pass),
                       log_parser=log_parser_name(instance),
                       eval_type=str(instance.record.get("eval_type") or sb.constants.EvalType.PASS_AND_FAIL.value))


def key_of(parser: LogParser, test_id: str, spec: TestSpec) -> str | None:
    """The key ``parser`` records for a ``PASSED`` line of ``test_id``; None when it reads
    no test from such a line (a parser of another runner's output)."""
    keys = list(parser(f"PASSED {test_id}\n", spec))
    return keys[0] if len(keys) == 1 else None


def _parser_words(name: str) -> str:
    """How a message names parser ``name``: "swebench's pytest log parser (name)" for the
    pytest family, else "swebench's log parser name"."""
    from envs.swe.canary import PYTEST_LOG_PARSERS
    from envs.swe.grading import swebench_harness

    registry = swebench_harness().PARSER_REGISTRY
    if registry[name] in {registry[n] for n in PYTEST_LOG_PARSERS}:
        return f"swebench's pytest log parser ({name})"
    return f"swebench's log parser {name}"


def _recorded_as(test_id: str, key: str, parser_name: str) -> str:
    """Why ``test_id`` is recorded as ``key``, in one clause."""
    if key == test_id.split()[0]:
        return f"{_parser_words(parser_name)} cuts test ids at the first space and records this one as {key!r}"
    return f"{_parser_words(parser_name)} records this id as {key!r}"


def not_found(failed: dict[str, Iterable[str]], status_map: dict[str, str], spec: TestSpec) -> dict[str, str]:
    """Each id of ``failed`` (list name -> its failed ids) that swebench does not find in
    ``status_map``, made by ``spec``'s log parser -> why, and what to change in the
    instance, in one clause."""
    from envs.swe.grading import swebench_harness

    sb = swebench_harness()
    parser_name = spec.log_parser
    parser = sb.PARSER_REGISTRY[parser_name]
    missing = {(name, t): key_of(parser, t, spec) for name, tests in failed.items() for t in tests
               if sb.grading._resolve_case(t, status_map) is None}  # noqa: SLF001 (swebench's lookup)
    shared = Counter(key for key in missing.values() if key is not None)
    why: dict[str, str] = {}
    for (name, test_id), key in missing.items():
        if key is None or key == test_id:
            why[test_id] = (f"no status line of the log names it (it did not run, or ran under "
                            f"another id), so fix the id in {name} or the instance's test_files")
            continue
        seen = f"{status_map[key]} in this log" if key in status_map else "not in this log either"
        one = f", one status for all {shared[key]} ids cut to it" if shared[key] > 1 else ""
        why[test_id] = f"{_recorded_as(test_id, key, parser_name)} ({seen}{one}), so write that id in {name} instead"
    return why


def unreadable_ids(instance: Instance) -> list[str]:
    """One line per FAIL_TO_PASS or PASS_TO_PASS id with a space that the instance's log
    parser records under another key (grading never finds it); empty without swebench."""
    spaced = [(name, t) for name, tests in (("FAIL_TO_PASS", instance.fail_to_pass),
                                            ("PASS_TO_PASS", instance.pass_to_pass))
              for t in tests if any(c.isspace() for c in t)]
    if not spaced:
        return []
    try:
        spec = swebench_spec(instance)
    except ImportError:
        return []  # nothing can be graded without swebench; the env says so when it grades
    from envs.swe.grading import swebench_harness

    sb, name = swebench_harness(), spec.log_parser
    lines = []
    for field, test_id in spaced:
        key = key_of(sb.PARSER_REGISTRY[name], test_id, spec)
        # found in a log holding only its own status line? (swebench's lookup, prefixes and all)
        if key is not None and sb.grading._resolve_case(test_id, {key: "PASSED"}) is None:  # noqa: SLF001
            lines.append(f"{instance.source}: instance {instance.instance_id}: {field} id {test_id!r} can never "
                         f"be found in the test log (it always counts as failed): "
                         f"{_recorded_as(test_id, key, name)}, so write that id in {field} instead")
    return lines


__all__ = ["CutTestIdWarning", "key_of", "log_parser_name", "not_found", "swebench_spec", "unreadable_ids"]
