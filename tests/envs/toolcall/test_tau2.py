"""tau2-bench: the wheel's domains and tools, a user behind a real HTTP endpoint, tau2's reward."""

from __future__ import annotations

import pytest

from envs.errors import EnvError
from envs.toolcall import tau2, users
from envs.toolcall.env import ToolCallEnv
from envs.toolcall.oracle import assistant_calls, play
from tests.helpers import chat_completions_server

TASK = "retail_37"  # four gold actions (one modifies an order), communicate 'camera', '481.50'


def scripted_user(body: dict) -> list[str]:
    """Opens with the request, then leaves on the agent's next words."""
    said = [m for m in body["messages"] if m["role"] == "assistant"]  # the user's own, flipped
    return ["Hi, I'd like to exchange an item in a pending order."] if not said else ["Thanks! ###STOP###"]


@pytest.fixture
def user_endpoint():
    with chat_completions_server(scripted_user) as (url, received):
        yield url, received


def make(url: str, **kwargs) -> ToolCallEnv:
    return ToolCallEnv(suite="tau2", split="all", user_endpoint=url, user_model="scripted", **kwargs)


def gold_calls(env: ToolCallEnv) -> list[dict]:
    return [assistant_calls([(a.name, dict(a.arguments))], prefix=f"g{i}")
            for i, a in enumerate(env.episode.gold_actions())]


def test_the_oracle_s_actions_earn_reward_1(user_endpoint):
    url, received = user_endpoint
    env = make(url)
    result = play(env, TASK)
    assert (result.reward, result.stop_reason) == (1.0, "user_left")
    assert result.info["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    assert result.info["user"] == "endpoint"
    first = received[0]["body"]["messages"]
    assert first[0]["role"] == "system" and "<scenario>" in first[0]["content"]
    assert "User Simulation Guidelines" in first[0]["content"]
    assert first[1] == {"role": "user", "content": tau2.FIRST_AGENT_MESSAGE}  # roles flipped
    env.close()


def test_a_wrong_action_earns_0(user_endpoint):
    url, _ = user_endpoint
    env = make(url)
    obs, info = env.reset(options={"task_id": TASK})
    assert [m["role"] for m in obs] == ["system", "assistant", "user"]
    assert "<policy>" in obs[0]["content"]
    calls = gold_calls(env)
    write = calls[-1]
    assert write["tool_calls"][0]["function"]["name"] == "modify_pending_order_items"
    for message in calls[:-1]:
        env.step(message)
    wrong = dict(write, tool_calls=[dict(write["tool_calls"][0])])
    arguments = env.episode.gold_actions()[-1].arguments
    wrong["tool_calls"][0]["function"] = {"name": "cancel_pending_order", "arguments":
                                          f'{{"order_id": "{arguments["order_id"]}", "reason": "no longer needed"}}'}
    obs, *_ = env.step(wrong)
    assert '"status": "cancelled"' in obs[0]["content"]
    *_, reward, terminated, _, info = env.step({"role": "assistant", "content": "The camera is 481.50."})
    assert (reward, terminated) == (0.0, True)
    assert info["reward_breakdown"] == {"DB": 0.0, "COMMUNICATE": 1.0}
    env.close()


def test_not_saying_what_must_be_said_earns_0(user_endpoint):
    url, _ = user_endpoint
    env = make(url)
    env.reset(options={"task_id": TASK})
    for message in gold_calls(env):
        env.step(message)
    *_, reward, _, _, info = env.step({"role": "assistant", "content": "Done, your camera is swapped."})
    assert reward == 0.0 and info["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": 0.0}
    env.close()


def test_tool_errors_and_bad_calls_are_observations(user_endpoint):
    url, _ = user_endpoint
    env = make(url)
    env.reset(options={"task_id": TASK})
    obs, *_, info = env.step(assistant_calls([("get_order_details", {"order_id": "#W0000000"})]))
    assert obs[0]["content"].startswith("Error") and info["metrics"]["call_errors"] == 1.0
    obs, *_, info = env.step(assistant_calls([("get_order_details", {})]))
    assert obs[0]["content"] == ("Error: `get_order_details` is missing the required argument "
                                 "'order_id'.") and info["metrics"]["invalid_action"] == 1.0
    env.close()


def test_an_unreachable_user_endpoint_is_an_env_error():
    env = make("http://127.0.0.1:9/v1", user_timeout_s=2)
    with pytest.raises(EnvError, match="did not answer"):
        env.reset(options={"task_id": TASK})


class EchoUser:
    """Stands in for a model playing the user: always asks about its order."""

    def __init__(self) -> None:
        self.prompts: list[list[dict]] = []

    def reply(self, messages: list[dict], seed: int) -> str:
        self.prompts.append(messages)
        return "Where is my order? ###STOP###"


def test_the_bound_user_plays_the_user():
    env = ToolCallEnv(suite="tau2", split="all", user="policy")
    with pytest.raises(EnvError, match="bind_user"):
        env.reset(options={"task_id": TASK})
    user = EchoUser()
    users.bind_user(user)
    try:
        obs, info = env.reset(options={"task_id": TASK})
        assert obs[-1]["content"] == "Where is my order? ###STOP###"
        assert user.prompts[0][0]["role"] == "system"
        auto = ToolCallEnv(suite="tau2", split="all")
        auto.reset(options={"task_id": TASK})
        *_, info = auto.step({"role": "assistant", "content": "Hello"})
        assert info["user"] == "policy"
    finally:
        users.bind_user(None)


def test_the_scripted_user_and_splits():
    env = ToolCallEnv(suite="tau2", split="heldout", domain="airline", user="scripted")
    assert len(env.task_ids()) == 20 and all(t.startswith("airline_") for t in env.task_ids())
    obs, info = env.reset(options={"task_id": "airline_0"})
    assert "emma_kim_9957" in obs[-1]["content"]
    *_, terminated, truncated, info = env.step({"role": "assistant", "content": "Sorry, I cannot."})
    assert terminated and info["user"] == "scripted"
    assert len(ToolCallEnv(suite="tau2", split="train").task_ids()) == 30 + 74
    with pytest.raises(ValueError, match="dual control"):
        ToolCallEnv(suite="tau2", domain="telecom")


def test_prompts_are_tau2_s_own():
    from pathlib import Path

    root = Path(tau2.tau2()["data_dir"]).parent
    agent = (root / "agent" / "llm_agent.py").read_text()
    assert f'AGENT_INSTRUCTION = """\n{tau2.AGENT_INSTRUCTION}\n""".strip()' in agent
    assert tau2.AGENT_SYSTEM_PROMPT in agent
    assert tau2.USER_SYSTEM_PROMPT in (root / "user" / "user_simulator.py").read_text()
    assert f'"{tau2.FIRST_AGENT_MESSAGE}"' in (root / "orchestrator" / "orchestrator.py").read_text()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # every task; minutes on a busy 2-core machine
def test_the_oracle_scores_every_task_with_the_scripted_user():
    env = ToolCallEnv(suite="tau2", split="all", user="scripted")
    failed = [t for t in env.task_ids() if play(env, t).reward != 1.0]
    assert failed == []


CANDIDATES = "The total could be any of: " + ", ".join(str(n) for n in range(100)) + "."


@pytest.mark.parametrize("communicate, reply, reward, upstream", [
    ("strict", CANDIDATES, 0.0, 1.0),            # a list of candidates is not an answer
    ("upstream", CANDIDATES, 1.0, 1.0),          # tau2's substring test: "4" is in the list
    ("strict", "You can bring 4 suitcases in total: 2 free per passenger.", 1.0, 1.0),
    ("strict", "You can bring 14 suitcases.", 0.0, 1.0),  # "4" is in "14" only as a substring
])
def test_communicating_a_value_takes_the_value_not_a_list_of_guesses(communicate, reply, reward, upstream):
    # airline_3 is scored on DB (its gold actions only read) and COMMUNICATE ('4'): before
    # this rule, the list of 0-99 with no tool call at all scored 1.
    env = ToolCallEnv(suite="tau2", split="all", user="scripted", communicate=communicate)
    env.reset(options={"task_id": "airline_3"})
    *_, got, terminated, _, info = env.step({"role": "assistant", "content": reply})
    assert terminated and (got, info["reward_upstream"]) == (reward, upstream)
    assert info["metrics"]["reward/upstream"] == upstream
    assert info["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": reward}
    env.close()
