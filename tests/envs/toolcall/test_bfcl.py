"""BFCL v4 single-turn: the AST checker agrees with the wheel's on ground truth (all pass)
and on mutated answers (all fail); episodes score what BFCL scores."""

from __future__ import annotations

import copy
import json

import pytest

from envs.toolcall import bfcl_data
from envs.toolcall.bfcl import decode_calls, score
from envs.toolcall.bfcl_ast import check, standardize
from envs.toolcall.env import ToolCallEnv
from envs.toolcall.oracle import bfcl_answer, play
from tests.envs.toolcall.wheel_checkers import wheel_verdict
from tests.helpers import cpu_growth

AST_CATEGORIES = [c for c in bfcl_data.SINGLE_TURN if c not in bfcl_data.RELEVANCE]

KNOWN_UNSATISFIABLE = {
    # Ground truth no answer can meet under BFCL's own checker (the wheel agrees):
    "simple_java_36": "ArrayList of `any` items: BFCL's Java converter only makes strings, "
                      "the answer holds 42 and true",
    "simple_java_65": "same: ArrayList of `any` items, the answer holds true",
    "live_simple_106-63-0": "required array 'auto_loan_payment_start' has no acceptable value",
    "live_simple_112-68-0": "required array 'acc_routing_start' has no acceptable value",
    "live_multiple_862-181-3": "the answer uses 'journey_start_time', which the function lacks",
    "live_multiple_964-207-0": "the answer omits the required 'statement' and names 'question'",
}


def oracle_calls(entry: dict) -> list[dict]:
    tools = bfcl_data.to_openai_tools(entry["function"])
    return decode_calls(bfcl_answer(entry, tools))


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_ground_truth_passes_both_checkers(category):
    failed = []
    for entry in bfcl_data.entries(category):
        calls = oracle_calls(entry)
        mine = check(entry["checker_function"], calls, entry["ground_truth"], category).valid
        assert mine == wheel_verdict(entry, calls, category), entry["id"]
        if not mine:
            failed.append(entry["id"])
    assert set(failed) == {i for i in KNOWN_UNSATISFIABLE if bfcl_data.category_of(i) == category}


def _wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 987_654
    if isinstance(value, str):
        return value + "qq9"
    if isinstance(value, list):
        return [*value, "qq9"]
    if isinstance(value, dict):
        return {**value, "qq9": 1}
    return "qq9"


def _mutations(entry: dict, calls: list[dict]):
    """(kind, mutated calls) for a wrong value, a missing argument and an extra call."""
    docs = {bfcl_data.tool_name(f["name"]): f for f in entry["checker_function"]}
    (name, args), = calls[0].items()
    if args:
        param = next(iter(args))
        changed = copy.deepcopy(calls)
        source_text = bfcl_data.category_of(entry["id"]) in ("simple_java", "simple_javascript")
        # Java/JavaScript converters search the text, so a suffix can leave the value intact.
        changed[0][name][param] = "qq9" if source_text else _wrong(args[param])
        yield "wrong value", changed
    required = [p for p in docs[name]["parameters"].get("required", []) if p in args]
    (gt_name, gt_params), = entry["ground_truth"][0].items()
    must = required or [p for p in args if "" not in gt_params.get(p, [""])]
    if must:
        dropped = copy.deepcopy(calls)
        del dropped[0][name][must[0]]
        yield "missing argument", dropped
    yield "extra call", [*copy.deepcopy(calls), copy.deepcopy(calls[0])]


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_mutated_answers_fail_both_checkers(category):
    counts = {"wrong value": 0, "missing argument": 0, "extra call": 0}
    entries = [e for e in bfcl_data.entries(category) if e["id"] not in KNOWN_UNSATISFIABLE]
    for entry in entries:
        for kind, calls in _mutations(entry, oracle_calls(entry)):
            mine = check(entry["checker_function"], calls, entry["ground_truth"], category).valid
            assert not mine, (kind, entry["id"], calls)
            assert not wheel_verdict(entry, calls, category), (kind, entry["id"])
            counts[kind] += 1
    assert counts["extra call"] == len(entries)
    assert counts["wrong value"] >= 0.95 * len(entries), counts
    assert counts["missing argument"] >= 0.5 * len(entries), counts


def test_relevance_categories_score_whether_a_call_was_made():
    irrelevant = bfcl_data.entries("irrelevance")[0]
    relevant = bfcl_data.entries("live_relevance")[0]
    call = [{bfcl_data.tool_name(irrelevant["function"][0]["name"]): {}}]
    assert score(irrelevant, None).valid and not score(irrelevant, call).valid
    assert not score(relevant, None).valid
    assert score(relevant, [{bfcl_data.tool_name(relevant["function"][0]["name"]): {}}]).valid


def test_standardize_follows_bfcl():
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"
    assert standardize("It's") == 'it"s'


def test_decode_calls_is_bfcl_s_fc_decoder():
    def message(*arguments):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": a}}
            for i, a in enumerate(arguments)]}
    assert decode_calls(message('{"x": 1}', '{}')) == [{"f": {"x": 1}}, {"f": {}}]
    assert decode_calls(message('{"x": 1}', '{oops')) is None  # one bad call: no call at all
    assert decode_calls({"role": "assistant", "content": "hi"}) is None
    # a malformed action's tool_calls can be anything: no call, never a crash (found by
    # test_step_properties' mutated messages: an object() there raised TypeError)
    for odd in (object(), 3, "f", {"function": {"name": "f", "arguments": "{}"}}, [None], [3]):
        assert decode_calls({"role": "assistant", "content": None, "tool_calls": odd}) is None


def tool_call(name: str, arguments: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.fixture(scope="module")
def env():
    made = ToolCallEnv(suite="bfcl", split="all", categories="simple_python,irrelevance,parallel")
    yield made
    made.close()


def test_an_episode_is_one_answer_scored_by_bfcl(env):
    obs, info = env.reset(options={"task_id": "simple_python_1"})
    assert obs == [{"role": "user", "content": "Calculate the factorial of 5 using math functions."}]
    assert [t["function"]["name"] for t in info["tools"]] == ["math_factorial"]
    obs, reward, terminated, truncated, info = env.step(tool_call("math_factorial", '{"number": 5}'))
    assert (reward, terminated, truncated, info["stop_reason"]) == (1.0, True, False, "submitted")
    assert info["next_state"] == "correct" and info["metrics"]["solved"] == 1.0
    env.reset(options={"task_id": "simple_python_1"})
    *_, reward, _, _, info = env.step(tool_call("math_factorial", '{"number": 6}'))
    assert reward == 0.0 and "Invalid value for parameter 'number': 6" in info["verdict"]


def test_schema_errors_are_reported_but_bfcl_decides_the_score(env):
    env.reset(options={"task_id": "simple_python_1"})
    obs, reward, *_, info = env.step(tool_call("math_factorial", '{"number": "5"}'))
    assert obs[0]["content"] == ("Error: argument 'number' must be an integer, got string '5' "
                                 "(in a call to `math_factorial`).")
    assert info["metrics"]["invalid_action"] == 1.0 and reward == 0.0
    assert info["error_type"] == "type_error:simple"


def test_malformed_json_is_no_call_as_in_bfcl(env):
    env.reset(options={"task_id": "irrelevance_0"})
    name = env.tools[0]["function"]["name"]
    obs, reward, terminated, truncated, info = env.step(tool_call(name, "{oops"))
    assert info["metrics"]["invalid_action"] == 1.0
    assert (reward, terminated) == (1.0, True)  # BFCL cannot decode it: no call, which is right here
    env.reset(options={"task_id": "simple_python_1"})
    *_, reward, terminated, truncated, info = env.step(tool_call("math_factorial", "{oops"))
    assert (reward, terminated, truncated) == (0.0, True, False)


def test_parallel_calls_match_in_any_order(env):
    env.reset(options={"task_id": "parallel_0"})
    message = bfcl_answer(bfcl_data.entry("parallel_0"), env.tools)
    message["tool_calls"].reverse()
    *_, reward, _, _, _info = env.step(message)
    assert reward == 1.0


def test_java_values_are_source_text():
    entry = bfcl_data.entry("simple_java_1")
    tools = bfcl_data.to_openai_tools(entry["function"])
    assert {p["type"] for p in tools[0]["function"]["parameters"]["properties"].values()} == {"string"}
    args = json.loads(bfcl_answer(entry, tools)["tool_calls"][0]["function"]["arguments"])
    assert args["useShortName"] == "true"
    assert score(entry, [{tools[0]["function"]["name"]: args}]).valid


def test_long_java_source_text_is_refused_before_bfcl_s_converter_backtracks_on_it():
    # BFCL's HashMap converter backtracks on unclosed `put("a", `: 4,000 characters took
    # 4.3 s of CPU, 10,000 took 29 s, and a parallel question converts each value per answer.
    entry = bfcl_data.entry("simple_java_64")
    tools = bfcl_data.to_openai_tools(entry["function"])
    name = tools[0]["function"]["name"]
    args = json.loads(bfcl_answer(entry, tools)["tool_calls"][0]["function"]["arguments"])
    assert score(entry, [{name: args}]).valid

    def meta(n: int) -> str:
        return "new HashMap<String, String>() {{" + 'put("a", ' * n + "}}"

    def verdict(text: str):
        return score(entry, [{name: {**args, "meta": text}}])

    refused = verdict(meta(200))
    assert not refused.valid and "characters of source text; clawgym reads at most 1,000" in refused.message
    assert cpu_growth(verdict, meta, 20) < 4 * 16  # cubic before: 16 ** 3 times the CPU


def test_tools_are_converted_as_bfcl_s_openai_handler_does():
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    assert bfcl_data._OPENAPI == GORILLA_TO_OPENAPI
    tool = bfcl_data.to_openai_tools([{"name": "a.b", "description": "d", "parameters": {
        "type": "dict", "required": ["x"], "properties": {
            "x": {"type": "float", "description": "x."}, "y": {"type": "tuple", "items": {"type": "integer"}},
            "z": {"type": "dict", "properties": {"w": {"type": "any", "description": ""}}}}}}])[0]
    assert tool["function"]["name"] == "a_b"
    props = tool["function"]["parameters"]["properties"]
    assert tool["function"]["parameters"]["type"] == "object"
    assert props["x"] == {"type": "number", "format": "float", "description": "x. This is a float type value."}
    assert props["y"]["type"] == "array" and props["z"]["properties"]["w"]["type"] == "string"


@pytest.mark.slow
def test_the_oracle_scores_every_satisfiable_question_through_the_env():
    env = ToolCallEnv(suite="bfcl", split="all")
    failed = [t for t in env.task_ids() if play(env, t).reward != 1.0]
    assert set(failed) == set(KNOWN_UNSATISFIABLE)
