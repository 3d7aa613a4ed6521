"""The judges (PRM): lexical, env oracle, the self-judge on the real model, an HTTP endpoint."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from agents.adapters import LoraSettings
from agents.model_cache import resolve_model_dir
from agents.policy import Completion, TransformersPolicy
from tests.helpers import chat_completions_server
from trainers.config import JudgeConfig, TrainConfig
from trainers.judge import (
    HINT_SYSTEM,
    JUDGE_SYSTEM,
    LABELS,
    EndpointJudge,
    EnvJudge,
    LexicalJudge,
    ModelJudge,
    TurnToJudge,
    Verdict,
    judge_messages,
    make_judge,
)
from trainers.judge_parsing import majority_vote
from trainers.loop import Trainer
from trainers.rollout import Episode, Turn

ASK = [{"role": "system", "content": "You are a helpful personal assistant."},
       {"role": "user", "content": "How long should I boil an egg for a runny yolk?"}]
THANKS = TurnToJudge(ASK, "Boil it for six minutes.", "Perfect, thanks. That's exactly what I needed.")
CORRECTION = TurnToJudge(ASK, "Eggs are a great source of protein! Here is a long essay about hens...",
                         "Too long. Three sentences max, please.")
TOOL_ERROR = TurnToJudge(ASK, '<tool_call>{"name": "bash", "arguments": {"cmd": "pytest"}}</tool_call>',
                         "exit code 2\nERROR: file or directory not found: tests", "tool")
TOOL_OK = TurnToJudge(ASK, '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>',
                      "exit code 0\nnotes.txt", "tool")
SHRUG = TurnToJudge(ASK, "Six minutes.", "Hmm.")
TURNS = [THANKS, CORRECTION, TOOL_ERROR, TOOL_OK, SHRUG]


# ---- lexical and env judges -------------------------------------------------------------
def test_lexical_judge_reads_thanks_corrections_and_tool_errors():
    judge = LexicalJudge(JudgeConfig(kind="lexical"))
    verdicts = judge.judge(TURNS)
    assert [v.score for v in verdicts] == [1, -1, -1, 1, 0]
    assert all(v.parsed and v.votes == [v.score] and v.hint is None for v in verdicts)


def test_lexical_corrections_outrank_thanks_and_become_hints():
    mixed = TurnToJudge(ASK, "Here you go!", "Thanks, but please no exclamation marks.")
    short = TurnToJudge(ASK, "Here you go!", "No.")
    verdicts = LexicalJudge(JudgeConfig(kind="lexical")).judge([THANKS, CORRECTION, mixed, short], want_hints=True)
    assert [v.score for v in verdicts] == [1, -1, -1, -1]
    # the correction in the user's own words is the hint; too short a correction is none
    assert [v.hint for v in verdicts] == [None, "Too long. Three sentences max, please.",
                                          "Thanks, but please no exclamation marks.", None]


def test_env_judge_is_the_sign_of_the_env_reward():
    turns = [TurnToJudge(ASK, "a", "Please write formally, not casually.", env_reward=r) for r in (2.5, -0.1, 0.0)]
    verdicts = EnvJudge(JudgeConfig(kind="env")).judge(turns, want_hints=True)
    assert [v.score for v in verdicts] == [1, -1, 0]
    # judge.hints=next_state: only the turn this judge scores -1 gets its next state as the hint
    assert [v.hint for v in verdicts] == [None, "Please write formally, not casually.", None]


def test_make_judge_picks_the_configured_kind():
    assert isinstance(make_judge(JudgeConfig(kind="lexical"), None), LexicalJudge)
    assert isinstance(make_judge(JudgeConfig(kind="env"), None), EnvJudge)
    endpoint = make_judge(JudgeConfig(kind="endpoint", endpoint="http://127.0.0.1:9/v1/"), None)
    assert isinstance(endpoint, EndpointJudge) and endpoint.url == "http://127.0.0.1:9/v1/chat/completions"


# ---- the self-judge on the real model ---------------------------------------------------
@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy(lora=LoraSettings(rank=8, alpha=16))


@pytest.fixture(scope="module")
def self_judge(policy) -> ModelJudge:
    judge = make_judge(JudgeConfig(kind="self", mode="logprob", hints="next_state"), policy)
    assert isinstance(judge, ModelJudge)
    return judge


def test_logprob_self_judge_scores_and_calibration(self_judge):
    prior = self_judge._prior
    assert prior is not None and len(prior) == len(LABELS)
    assert all(lp < 0 for lp in prior)
    verdicts = self_judge.judge(TURNS)
    assert len(verdicts) == len(TURNS)
    raw = self_judge._label_logprobs(TURNS)
    for verdict, logps in zip(verdicts, raw):
        assert verdict.score in (1, 0, -1) and verdict.parsed and verdict.votes == [verdict.score]
        calibrated = [lp - pr for lp, pr in zip(logps, prior)]
        assert verdict.score == LABELS[calibrated.index(max(calibrated))]  # argmax after calibration
    assert self_judge.judge([]) == []


def test_logprob_self_judge_hints_come_from_negative_next_states(self_judge):
    verdicts = self_judge.judge(TURNS, want_hints=True)
    for t, verdict in zip(TURNS, verdicts):
        expected = t.next_state.strip() if verdict.score < 0 and len(t.next_state.strip()) > 10 else None
        assert verdict.hint == expected


def test_label_scores_match_teacher_forced_scoring(self_judge, policy):
    # the judge's fast path (one next-token distribution) agrees with plain scoring
    prompt = self_judge._prompt_ids(judge_messages(CORRECTION), "\\boxed{")
    fast = self_judge._label_logprobs([CORRECTION])[0]
    labels = self_judge._label_ids
    slow = [s[0] for s in policy.score([prompt] * len(labels), [[token] for token in labels], adapter=False)]
    assert fast == pytest.approx(slow, abs=1e-3)


def test_self_judge_ignores_the_adapter(self_judge, policy):
    before = self_judge._label_logprobs([THANKS, CORRECTION])
    state, version = policy.trainable_state(), policy.weight_version
    generator = torch.Generator().manual_seed(1)
    policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.05 if "lora_B" in k else v
                                 for k, v in state.items()}, version=version + 1)
    policy._prefix_cache = None  # the judge's cached few-shot prefix must be recomputed too
    try:
        after = self_judge._label_logprobs([THANKS, CORRECTION])
    finally:
        policy.load_trainable_state(state, version)
    for b, a in zip(before, after):
        assert a == pytest.approx(b, abs=1e-4)


def test_generate_mode_votes_and_majority(policy):
    judge = ModelJudge(policy, JudgeConfig(kind="self", mode="generate", votes=2))
    assert judge._prior is None  # calibration belongs to logprob mode
    verdicts = judge.judge([CORRECTION])
    for verdict in verdicts:
        assert len(verdict.votes) == 2
        assert all(v in (1, 0, -1, None) for v in verdict.votes)
        assert verdict.score == majority_vote(verdict.votes)
        assert verdict.parsed == any(v is not None for v in verdict.votes)


def test_generate_mode_unparsed_votes_give_score_0(policy):
    # At temperature 50 the samples are noise: no vote holds a \boxed{...} score.
    judge = ModelJudge(policy, JudgeConfig(kind="self", mode="generate", votes=2, temperature=50.0))
    (verdict,) = judge.judge([THANKS])
    assert verdict.votes == [None, None]
    assert verdict.score == 0 and not verdict.parsed
    # the loop counts it as unparsed and leaves the turn without a judge score
    scored = _turn(THANKS)
    stand_in = SimpleNamespace(judge=judge, config=TrainConfig(method="grpo", judge=judge.config))
    episodes = [Episode("t", 0, [scored])]
    Trainer._judge(stand_in, episodes)  # type: ignore[arg-type]
    metrics = Trainer._judge_metrics(stand_in, episodes)  # type: ignore[arg-type]
    assert metrics["judge/unparsed"] == 1
    assert metrics["judge/score_mean"] == 0
    assert scored.judge_score is None


def test_separate_judge_model_from_a_directory():
    judge = make_judge(JudgeConfig(kind="model", model=str(resolve_model_dir("default"))), None)
    assert isinstance(judge, ModelJudge)
    assert not judge.policy.lora.enabled
    verdicts = judge.judge([THANKS, TOOL_ERROR])
    assert [v.score in (1, 0, -1) for v in verdicts] == [True, True]


def _turn(t: TurnToJudge) -> Turn:
    """A rollout turn for ``t``; its judge_score starts as a sentinel the loop must overwrite."""
    completion = Completion({"role": "assistant", "content": t.response}, t.response, [1], [2], [-1.0], 0, "stop")
    return Turn(t.context, [], completion, t.next_state, t.next_role, t.env_reward, {}, 0, judge_score=5)


# ---- an OpenAI-compatible endpoint --------------------------------------------------------
HINTS = ["\\boxed{1} [HINT_START]Short.[HINT_END]",
         "\\boxed{1} Because they asked before. [HINT_START]Keep replies to three sentences at most.[HINT_END]",
         "\\boxed{-1} [HINT_START]A longer hint that must be ignored because its vote is negative.[HINT_END]"]


def _judge_replies(body: dict[str, Any]) -> list[str]:
    system = body["messages"][0]["content"]
    if system == JUDGE_SYSTEM:
        if body["n"] == 1:
            return ["\\boxed{-1}"]
        return ["I think the user corrects it. \\boxed{-1}"] * (body["n"] - 1) + ["\\boxed{1}"]
    if system == HINT_SYSTEM:
        return HINTS[: body["n"]]
    return ["?"]


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_completions_server(_judge_replies) as stub:
        yield stub


def test_endpoint_judge_votes_and_hint(server):
    url, received = server
    config = JudgeConfig(kind="endpoint", endpoint=url, endpoint_model="judge-7b", votes=3, hints="judge")
    verdicts = EndpointJudge(config, timeout_s=10).judge([CORRECTION, THANKS], want_hints=True)
    assert [v.score for v in verdicts] == [-1, -1]
    assert verdicts[0].votes == [-1, -1, 1] and verdicts[0].parsed
    assert verdicts[0].hint == "Keep replies to three sentences at most."
    asked = [r["body"] for r in received]
    assert len(asked) == 4  # a score request and a hint request per turn
    assert {r["path"] for r in received} == {"/v1/chat/completions"}
    assert all(r["n"] == 3 and r["model"] == "judge-7b" and r["temperature"] == 0.6 for r in asked)
    case = [r for r in asked if r["messages"][0]["content"] == JUDGE_SYSTEM][0]["messages"][-1]["content"]
    assert "What came next (user)" in case  # the judge sees the next state with its role


def test_endpoint_judge_next_state_hints_ask_only_for_scores(server):
    url, received = server
    config = JudgeConfig(kind="endpoint", endpoint=url, votes=1, hints="next_state")
    (verdict,) = EndpointJudge(config, timeout_s=10).judge([CORRECTION], want_hints=True)
    assert verdict.score == -1 and verdict.votes == [-1]
    assert verdict.hint == CORRECTION.next_state
    assert [r["body"]["messages"][0]["content"] for r in received] == [JUDGE_SYSTEM]


def test_unreachable_endpoint_gives_unparsed_verdicts():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = JudgeConfig(kind="endpoint", endpoint=f"http://127.0.0.1:{port}/v1", hints="judge")
    verdicts = EndpointJudge(config, timeout_s=5).judge([THANKS, CORRECTION], want_hints=True)
    assert verdicts == [Verdict(0, [], None, parsed=False)] * 2

