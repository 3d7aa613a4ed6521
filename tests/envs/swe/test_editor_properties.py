"""Properties of the editor's hostile inputs: any path or range an agent sends is an
observation, a path with a control character is refused, nothing is written outside
/workspace and /tmp, and a huge range costs no more than a small one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sandbox import Sandbox, make_sandbox
from envs.swe import sandbox_config
from envs.swe.editor import CLIPPED, COMMANDS, Editor, _view_range, argument_problem
from tests.helpers import DOCKER_SLOW_BACKENDS, require_backend

CONTROL = st.characters(min_codepoint=1, max_codepoint=31) | st.just("\x7f")


@given(before=st.text(max_size=20), control=CONTROL, after=st.text(max_size=20),
       command=st.sampled_from(COMMANDS))
def test_a_path_with_a_control_character_is_always_refused(before, control, after, command):
    problem = argument_problem({"command": command, "path": "/" + before + control + after,
                                "file_text": "", "old_str": "x", "new_str": "", "insert_line": 0})
    assert problem is not None and problem.startswith("Error: `path`")


@given(path=st.text(max_size=30).filter(lambda p: not p.startswith("/")))
def test_a_relative_path_is_refused(path):
    problem = argument_problem({"command": "view", "path": path})
    assert problem is not None and problem.startswith("Error:")


@given(first=st.integers(), last=st.integers(), n_lines=st.integers(min_value=0, max_value=10**12))
def test_a_view_range_is_refused_or_lies_within_the_file(first, last, n_lines):
    chosen = _view_range([first, last], n_lines)
    if not isinstance(chosen, str):
        start, end = chosen
        assert 1 <= start <= end <= n_lines
        assert start == first and end == (n_lines if last == -1 or last > n_lines else last)


@pytest.fixture(scope="module", params=DOCKER_SLOW_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Both backends, docker's run of the properties marked slow (about a minute there)."""
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="module")
def sandbox(backend: str) -> Iterator[Sandbox]:
    made = make_sandbox(backend, sandbox_config())
    made.put_file("/workspace/pkg/mod.py", "def f(x):\n    return x\n")
    yield made
    made.close()


SEGMENTS = st.sampled_from(["..", ".", "workspace", "tmp", "etc", "usr", "pkg", "mod.py", "new.py", "", "ü x"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=6), command=st.sampled_from(COMMANDS))
def test_no_path_writes_outside_the_writable_places(sandbox, parts, command):
    path = "/" + "/".join(parts)
    arguments = {"command": command, "path": path, "file_text": "X = 1\n", "old_str": "return x",
                 "new_str": "return x + 1", "insert_line": 0}
    text, changed = Editor().run(sandbox, arguments)
    assert isinstance(text, str)
    if changed:
        resolved = sandbox.exec(f"realpath -m -- '{path}'").stdout.strip()
        assert resolved.startswith(("/workspace/", "/tmp/")), (path, resolved, text)
    else:
        assert command == "view" or text.startswith("Error:"), text


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(min_value=-(2**70), max_value=2**70), last=st.integers(min_value=-(2**70), max_value=2**70))
def test_any_view_range_is_an_observation_of_bounded_size(sandbox, first, last):
    editor = Editor(max_chars=500)
    text = editor.run(sandbox, {"command": "view", "path": "/workspace/pkg/mod.py", "view_range": [first, last]})[0]
    assert text.startswith(("Error: invalid `view_range`", "Here's the result of running `cat -n`"))
    assert len(text) <= 500 + 1 + len(CLIPPED)
