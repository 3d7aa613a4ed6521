"""BFCL's backends in the tool process: calls are method calls, and the strings BFCL's
checker evaluates are written only from validated calls."""

from __future__ import annotations

import ast
import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.toolcall import bfcl_data
from envs.toolcall.bfcl_backends import BFCLBackends, RefusedCall, backend_class, replay_text

ECHO = inspect.signature(backend_class("GorillaFileSystem").echo)
SCALARS = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text())
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8)


@pytest.mark.parametrize("key", ["a=1);import os;os.system('x')#", "__class__", "_private", "file name",
                                 "content)#", "lambda", "", "x" * 200, "self"])
def test_an_undeclared_or_unsafe_argument_name_is_refused(key):
    with pytest.raises(RefusedCall, match="has no argument"):
        replay_text("echo", {"content": "a", key: 1}, ECHO)


@pytest.mark.parametrize("name", ["echo; import os", "__import__", "_load_scenario", "echo(1)#", "print"])
def test_a_name_that_is_not_an_offered_public_method_is_refused(name):
    backends = BFCLBackends()
    backends.op_open("multi_turn_base_15", 1000)
    with pytest.raises(RefusedCall, match="is not a function of this conversation"):
        backends.method(name, {})
    assert backends.op_call(name, {}) == {"ran": False, "result":
                                          f"Error: `{name}` is not a function of this conversation"}


@settings(max_examples=200, derandomize=True, deadline=None)
@given(content=JSON, file_name=st.text())
def test_the_checker_s_text_is_one_call_of_literals_even_after_bfcl_rewrites_it(content, file_name):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import _process_method_calls

    arguments = {"content": content, "file_name": file_name}
    text = replay_text("echo", arguments, ECHO)
    methods = {"echo": "fs_instance", "ls": "fs_instance", "cd": "fs_instance"}
    rewritten = _process_method_calls(text, methods)
    for source in (text, rewritten):  # what BFCL's checker hands to eval()
        call = ast.parse(source, mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        assert [k.arg for k in call.keywords] == ["content", "file_name"]
        [ast.literal_eval(k.value) for k in call.keywords]  # raises unless every value is a literal
    assert ast.unparse(ast.parse(rewritten, mode="eval").body.func) in ("fs_instance.echo",)
    keywords = ast.parse(text, mode="eval").body.keywords
    assert [ast.literal_eval(k.value) for k in keywords] == [content, file_name]


def test_bfcl_s_own_data_has_no_call_the_checks_refuse():
    backends = BFCLBackends()
    from envs.toolcall.oracle import parse_call

    backends.op_open("multi_turn_long_context_38", 100_000)
    methods = {n: inspect.signature(m) for n, m in inspect.getmembers(backend_class("GorillaFileSystem"))
               if not n.startswith("_")}
    for call in bfcl_data.entry("multi_turn_long_context_38")["ground_truth"][0]:
        name, arguments = parse_call(call, methods)
        assert replay_text(name, arguments, inspect.signature(backends.method(name, arguments))) == \
            f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
