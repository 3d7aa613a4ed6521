"""Oracle agents: replay each suite's ground truth, to prove the envs score it 100%.

    from envs.toolcall.oracle import play
    result = play(env, "simple_python_0")        # an OracleResult: reward, turns, info

An oracle is a generator per episode (:func:`script`): it yields one assistant message at
a time and is sent the observation that came back. What it replays:

- ``bfcl``: one call per possible-answer item, each parameter at its first acceptable
  value (left out when ``""`` marks it optional); Java/JavaScript values are written as
  source text that BFCL's own converters read back to that value; irrelevance questions
  get a text answer, ``live_relevance`` (no possible answers: any call passes) a call of
  the first function with schema-sampled arguments.
- ``bfcl_multi``: each turn's ground-truth calls in one message (in several where they are
  more than the env runs of one message), then a text message to end the turn (turns
  whose ground truth is empty get only the text).
- ``tau2``: the task's gold actions, then a message holding its ``communicate_info``.
- ``toolmath``: the problem's reference program through the ``python`` tool, then the
  tool's output as the boxed answer.

The *idle agent* (:func:`idle`) calls nothing and declines every turn; it must fail every
task except those where declining is the answer (:func:`declining_is_the_answer`).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.messages import Message
from envs.toolcall import bfcl_data
from envs.toolcall.bfcl_ast import check_parameter, language_of
from envs.toolcall.env import ToolCallEnv

Script = Generator[Message, list[Message], None]


@dataclass
class OracleResult:
    task_id: str
    reward: float
    turns: int
    stop_reason: str
    info: dict[str, Any] = field(default_factory=dict)


IDLE_MESSAGE: Message = {"role": "assistant", "content": "Sorry, I cannot help with that."}


def play(env: ToolCallEnv, task_id: str, seed: int = 0, max_turns: int = 200,
         agent_for: Callable[[ToolCallEnv], Script] | None = None) -> OracleResult:
    """Play ``task_id`` with the oracle (or ``agent_for(env)``, e.g. :func:`idle`); the
    episode's return and its last info."""
    obs, _info = env.reset(seed=seed, options={"task_id": task_id})
    agent = (agent_for or script)(env)
    action = next(agent)
    total, turns = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        turns += 1
        if terminated or truncated or turns >= max_turns:
            return OracleResult(task_id, total, turns, info.get("stop_reason", "cut"), info)
        action = agent.send(obs)


def script(env: ToolCallEnv) -> Script:
    """The oracle for the episode ``env`` is playing."""
    episode = env.episode
    if episode is None:
        raise RuntimeError("reset the env before asking for its oracle")
    suite = env.suite_name  # each suite's module is imported only when its env is made
    if suite == "bfcl":
        return _once(bfcl_answer(episode.entry, episode.tools))
    if suite == "bfcl_multi":
        return _turns(bfcl_multi_turn_messages(episode.entry, episode.backend_methods(),
                                               env.max_tool_calls))
    if suite == "tau2":
        return _tau2(episode)
    if suite == "toolmath":
        return _toolmath(episode)
    raise TypeError(f"no oracle for suite {suite!r}")


def idle(env: ToolCallEnv) -> Script:
    """The idle agent: no call, the same refusal every turn."""
    while True:
        yield dict(IDLE_MESSAGE)


def declining_is_the_answer(env: ToolCallEnv, task_id: str) -> bool:
    """Whether calling nothing is right on ``task_id``: BFCL's irrelevance questions, and
    tau2 tasks whose gold actions leave both databases as they were and that have nothing
    to communicate (a refusal the policy requires). ~0.2 s a tau2 task (its gold actions
    are run once)."""
    if env.suite_name == "bfcl":
        return "irrelevance" in bfcl_data.category_of(task_id)
    if env.suite_name == "tau2":
        from envs.toolcall.tau2_data import domain_tasks, fresh_db_hashes, gold_db_hashes

        domain, _, tau2_id = task_id.partition("_")
        criteria = domain_tasks(domain)[tau2_id].evaluation_criteria
        return (not criteria.communicate_info
                and gold_db_hashes(domain, tau2_id) == fresh_db_hashes(domain))
    return False


def _once(message: Message) -> Script:
    yield message


def _turns(messages: list[Message]) -> Script:
    for message in messages:
        yield message
    while True:  # the conversation should have ended; say so until the budget does
        yield {"role": "assistant", "content": "Done."}


def assistant_calls(calls: list[tuple[str, dict[str, Any]]], prefix: str = "oracle") -> Message:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"{prefix}_{i}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)]}


# ---- BFCL single-turn ---------------------------------------------------------------------
def bfcl_answer(entry: dict[str, Any], tools: list[dict[str, Any]]) -> Message:
    """The oracle's answer to a BFCL single-turn entry."""
    category = bfcl_data.category_of(entry["id"])
    if "irrelevance" in category:
        return {"role": "assistant", "content": "None of the available functions can do that."}
    if category == "live_relevance":
        from envs.spaces import _sample_json

        function = tools[0]["function"]
        args = _sample_json(function.get("parameters", {"type": "object"}), np.random.default_rng(0))
        return assistant_calls([(function["name"], args)])
    docs = {f["name"]: f for f in entry["checker_function"]}
    calls = []
    for item in entry["ground_truth"]:
        (name, params), = item.items()
        calls.append((bfcl_data.tool_name(name), _arguments(docs[name], params, category)))
    return assistant_calls(calls)


def _arguments(doc: dict[str, Any], params: dict[str, list[Any]], category: str) -> dict[str, Any]:
    required = set(doc["parameters"].get("required") or [])
    details = doc["parameters"]["properties"]
    args = {}
    for param, options in params.items():
        values = [o for o in options if o != ""]
        if not values and param in required:
            args[param] = ""  # BFCL's answer for a required string it wants left empty
            continue
        if not values or ("" in options and param not in required):
            continue
        args[param] = _value(param, details.get(param, {}), options, category)
    return args


def _value(param: str, detail: dict[str, Any], options: list[Any], category: str) -> Any:
    """The first acceptable value, in the form the agent writes it."""
    language = language_of(category)
    kind = detail.get("type")
    for option in (o for o in options if o != ""):
        if kind in ("dict", "HashMap") and isinstance(option, dict):
            option = _filled(option)  # a possible-answer dict: key -> acceptable values
        elif kind == "array" and detail.get("items", {}).get("type") == "dict" \
                and isinstance(option, list):
            option = [_filled(d) for d in option]
        if language.value == "python":
            return option
        for text in _source_texts(option):
            if check_parameter(param, text, detail, options, language).valid:
                return text
    # No source text reads back to any acceptable value (BFCL's converters cannot produce
    # it): answer the first one as JSON text, which BFCL's checker then fails.
    return json.dumps(next(o for o in options if o != ""))


def _filled(possible: dict[str, list[Any]]) -> dict[str, Any]:
    """A dict from a possible-answer dict (key -> acceptable values)."""
    return {k: next(v for v in values if v != "") for k, values in possible.items()
            if "" not in values and any(v != "" for v in values)}


def _source_texts(value: Any) -> Iterator[str]:
    """Java/JavaScript source texts that may read back to ``value`` (tried in order)."""
    if isinstance(value, bool):
        yield "true" if value else "false"
    elif isinstance(value, int):
        yield from (str(value), f"{value}L", f"{value}n")
    elif isinstance(value, float):
        yield from (repr(value), f"{value}f", f"{value:g}", f"{value:g}f")
    elif isinstance(value, str):
        yield from (value, f'"{value}"', f"'{value}'")
    elif isinstance(value, list):
        for style in itertools.product((False, True), ("", "L"), ("", "f")):
            body = ", ".join(_element(v, *style) for v in value)
            yield f"[{body}]"
            for element_type in ("int", "String", "double", "long", "boolean", "Object"):
                yield f"new {element_type}[]{{{body}}}"
            yield f"new ArrayList<>(Arrays.asList({body}))" if value else "new ArrayList<>()"
    elif isinstance(value, dict):
        for style in itertools.product((True, False), ("", "L"), ("", "f")):
            yield "{" + ", ".join(f"{k}: {_element(v, *style)}" for k, v in value.items()) + "}"
            puts = " ".join(f'put("{k}", {_element(v, *style)});' for k, v in value.items())
            yield f"new HashMap<String, String>() {{{{ {puts} }}}}" if value else "new HashMap<>()"


def _element(value: Any, quoted: bool, int_suffix: str, float_suffix: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if quoted else value
    if isinstance(value, int):
        return f"{value}{int_suffix}"
    if isinstance(value, float):
        return f"{value}{float_suffix}"
    return str(value)


# ---- BFCL multi-turn ----------------------------------------------------------------------
def bfcl_multi_turn_messages(entry: dict[str, Any], methods: dict[str, inspect.Signature],
                             per_message: int = 8) -> list[Message]:
    """The oracle's messages for a whole BFCL multi-turn entry: per turn, the ground-truth
    calls (arguments named by the backends' signatures) in messages of at most
    ``per_message`` calls (an env runs that many of one message), then ``Done.``"""
    messages = []
    for turn, calls in enumerate(entry["ground_truth"]):
        parsed = [parse_call(c, methods) for c in calls]
        for start in range(0, len(parsed), per_message):
            messages.append(assistant_calls(parsed[start:start + per_message],
                                            prefix=f"oracle_t{turn}_{start}"))
        messages.append({"role": "assistant", "content": "Done."})
    return messages


def parse_call(text: str, methods: dict[str, inspect.Signature]) -> tuple[str, dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` -> ``("mv", {...})``; positional arguments get
    their names from the method's signature."""
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    args = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    if node.args:
        names = [p for p in methods[name].parameters if p != "self"]
        for param, value in zip(names, node.args):
            args[param] = ast.literal_eval(value)
    return name, args


# ---- tau2 ----------------------------------------------------------------------------------
def _tau2(episode: Any) -> Script:
    actions = [a for a in episode.gold_actions() if a.requestor == "assistant"]
    for i, action in enumerate(actions):
        yield assistant_calls([(action.name, dict(action.arguments))], prefix=f"oracle_{i}")
    info = episode.communicate_info()
    closing = ("Here is what I found: " + "; ".join(info) + ".") if info else \
        "Thank you for contacting us. Is there anything else I can help you with?"
    for _ in itertools.count():
        yield {"role": "assistant", "content": closing}


# ---- toolmath ------------------------------------------------------------------------------
def _toolmath(episode: Any) -> Script:
    observation = yield assistant_calls([("python", {"code": episode.problem.solution_code})])
    output = observation[0]["content"] if observation else ""  # "exit code 0\n<printed>"
    lines = [line for line in output.splitlines()[1:] if line.strip()]
    answer = lines[-1].strip() if lines else episode.problem.answer_text
    yield {"role": "assistant", "content": f"The answer is \\boxed{{{answer}}}."}
