"""A policy plays the simulated user: it is sampled on the user's prompt without tools, and its
reply's text is the user's next message."""

from __future__ import annotations

from dataclasses import dataclass

from agents.policy import SamplingParams
from agents.policy_user import PolicyUser


@dataclass
class FakeCompletion:
    message: dict
    text: str


class CannedPolicy:
    def __init__(self, message: dict, text: str = "") -> None:
        self.message, self.text = message, text
        self.calls: list[tuple] = []

    def generate(self, prompts, tools, sampling):
        self.calls.append((prompts, tools, sampling))
        return [FakeCompletion(self.message, self.text) for _ in prompts]


def test_the_policy_is_asked_without_tools_at_the_users_sampling_and_its_content_is_the_reply() -> None:
    policy = CannedPolicy({"role": "assistant", "content": "  Where is my order? ###STOP###\n"})
    prompt = [{"role": "system", "content": "You are a customer."}, {"role": "user", "content": "Hi!"}]
    assert PolicyUser(policy, max_new_tokens=64).reply(prompt, seed=3) == "Where is my order? ###STOP###"
    assert policy.calls == [([prompt], None, SamplingParams(temperature=0.0, max_new_tokens=64))]


def test_a_reply_without_text_content_falls_back_to_the_completions_text() -> None:
    policy = CannedPolicy({"role": "assistant", "content": None, "tool_calls": []}, text=" I want a refund. ")
    assert PolicyUser(policy, temperature=0.7).reply([{"role": "user", "content": "Hi!"}], seed=0) == "I want a refund."
    assert policy.calls[0][2] == SamplingParams(temperature=0.7, max_new_tokens=256)
