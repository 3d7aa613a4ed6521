"""Properties of every tool that runs in the tool-call family (BFCL multi-turn's eight
backends, tau2's airline and retail tools, toolmath's ``python``): a hostile argument name
(not an identifier, a dunder, quotes and parentheses, code) is refused and never reaches
the tool; a hostile magnitude (huge integers and floats, long strings, long or deep
lists) is refused or runs with a bounded answer; no tool message is longer than the
suite's clip.

The default suite walks every tool once per kind of hostility (deterministic, a few
seconds) plus a few generated examples; ``-m slow`` runs many more.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.toolcall.env import ToolCallEnv
from envs.toolcall.oracle import assistant_calls
from tests.helpers import require_backend

SUITES = {
    # suite: (env arguments, tasks whose tools cover every backend or domain)
    "bfcl_multi": ({"split": "all"}, ["multi_turn_base_15", "multi_turn_base_101",
                                      "multi_turn_base_152", "multi_turn_base_52"]),
    "tau2": ({"split": "all", "user": "scripted", "max_errors": 10**6, "max_turns": 10**6},
             ["airline_3", "retail_37"]),
}
HOSTILE_NAMES = ["__import__('os').system('id > /tmp/clawgym_marker')) #",
                 "a=1);import os;os.system('x')#", "__class__", "__init__", "self", "x')\n(",
                 'a"b', "f(x)", "", " ", "1a", "ünïcode-ß", "lambda"]


def hostile_values() -> dict[str, list[Any]]:
    deep: Any = 1
    for _ in range(60):
        deep = [deep]
    return {"integer": [10**6 + 1, -10**300, int("9" * 4300)], "number": [1e7, -1e308, 10.0**300],
            "string": ["x" * 20_001, "'" * 25_000], "array": [list(range(10_000)), deep, [[]] * 7_000],
            "object": [{str(i): i for i in range(3_000)}], "boolean": [10**9]}


class Player:
    """Plays calls on one env, resetting to a task whenever needed."""

    def __init__(self, suite: str) -> None:
        kwargs, self.task_ids = SUITES[suite]
        self.suite = suite
        self.env = ToolCallEnv(suite=suite, **kwargs)
        self.task_id: str | None = None
        self.tools = {t: self._reset(t) for t in self.task_ids}

    def _reset(self, task_id: str) -> dict[str, dict[str, Any]]:
        _, info = self.env.reset(options={"task_id": task_id})
        self.task_id = task_id
        return {t["function"]["name"]: t["function"]["parameters"] for t in info["tools"]}

    def ran(self) -> int:
        episode = self.env.episode
        if self.suite == "bfcl_multi":
            return sum(len(step) for turn in episode.executed for step in turn)
        return len(episode.calls)

    def call(self, task_id: str, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The tool message, and whether the call ran."""
        if self.task_id != task_id or self.env.episode is None:
            self._reset(task_id)
        before = self.ran()
        obs, _, terminated, truncated, _ = self.env.step(assistant_calls([(name, arguments)]))
        ran = self.env.episode is not None and self.ran() > before
        if terminated or truncated:
            self.task_id = None
        return obs[0]["content"], ran

    def every_tool(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [(t, name, schema) for t, tools in self.tools.items() for name, schema in tools.items()]


@pytest.fixture(scope="module", params=list(SUITES))
def player(request):
    made = Player(request.param)
    yield made
    made.env.close()


def filled(schema: dict[str, Any]) -> dict[str, Any]:
    """Plain valid values for a tool's required arguments."""
    plain = {"string": "a", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    values = {}
    for key in schema.get("required", []):
        spec = schema["properties"][key]
        kind = spec.get("type", "string")
        kind = kind if isinstance(kind, str) else kind[0]
        values[key] = spec["enum"][0] if spec.get("enum") else plain.get(kind, "a")
    return values


def clip_of(player: Player) -> int:
    return player.env.suite.max_output_chars


def check_name(player: Player, task_id: str, tool: str, schema: dict[str, Any], key: str) -> None:
    if key in schema.get("properties", {}):
        return
    content, ran = player.call(task_id, tool, {**filled(schema), key: 1})
    assert content.startswith(f"Error: `{tool}` has no argument"), content[:200]
    assert not ran


def check_value(player: Player, task_id: str, tool: str, schema: dict[str, Any], key: str,
                value: Any) -> bool:
    """Whether the call ran."""
    content, ran = player.call(task_id, tool, {**filled(schema), key: value})
    assert len(content) <= clip_of(player)
    if not ran:
        assert content.startswith("Error"), content[:200]
    return ran


def test_every_tool_refuses_hostile_names_and_bounds_hostile_values(player):
    values = hostile_values()
    ran = refused = 0
    for i, (task_id, tool, schema) in enumerate(player.every_tool()):
        check_name(player, task_id, tool, schema, HOSTILE_NAMES[i % len(HOSTILE_NAMES)])
        for key, spec in schema.get("properties", {}).items():
            kind = spec.get("type") if isinstance(spec.get("type"), str) else "string"
            options = values.get(kind, values["string"])
            refused += not check_value(player, task_id, tool, schema, key, options[i % len(options)])
            if kind == "string":  # just inside the bounds: the tool runs (tau2 echoes ids in errors)
                ran += check_value(player, task_id, tool, schema, key, "'" * 19_000)
    assert ran >= 10 and refused >= 50  # both paths were walked


names = st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(min_size=0, max_size=12),
                  st.from_regex(r"\A__[a-z]{1,8}__\Z"), st.from_regex(r"\A[a-z]{1,4}[()'\"=;#][a-z ]{0,4}\Z"))
magnitudes = st.one_of(st.integers(10**6 + 1, 10**4000).map(lambda n: n * (-1) ** (n % 2)),
                       st.floats(min_value=1e6 + 1, max_value=1e308),
                       st.integers(20_001, 40_000).map(lambda n: "'" * n),
                       st.integers(10_000, 20_000).map(lambda n: list(range(n))),
                       st.integers(1, 63).map(lambda n: json.loads("[" * n + "]" * n)))


def _property(examples: int):
    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(player, data):
        task_id, tool, schema = data.draw(st.sampled_from(player.every_tool()))
        check_name(player, task_id, tool, schema, data.draw(names))
        if schema.get("properties"):
            key = data.draw(st.sampled_from(sorted(schema["properties"])))
            check_value(player, task_id, tool, schema, key, data.draw(magnitudes))
    return run


test_generated_hostile_calls = _property(15)
test_many_generated_hostile_calls = pytest.mark.slow(_property(500))


@pytest.mark.bwrap
def test_toolmath_s_python_refuses_hostile_names_and_long_programs():
    require_backend("bwrap")
    env = ToolCallEnv(suite="toolmath", sandbox="bwrap", split="all")
    env.reset(options={"task_id": "toolmath-train-00000"})
    for key in HOSTILE_NAMES[:4]:
        obs, *_, info = env.step(assistant_calls([("python", {"code": "print(1)", key: 1})]))
        assert obs[0]["content"].startswith("Error: `python` has no argument")
        assert info["metrics"]["python_runs"] == 0.0
    obs, *_, info = env.step(assistant_calls([("python", {"code": "#" * 20_001})]))
    assert obs[0]["content"].startswith("Error: the arguments of `python` are")
    assert info["metrics"]["python_runs"] == 0.0
    obs, *_ = env.step(assistant_calls([("python", {"code": "print('y' * 10**6)"})]))
    assert len(obs[0]["content"]) <= env.episode.max_output_chars and "characters cut" in obs[0]["content"]
    env.close()
