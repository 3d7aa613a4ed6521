"""tinker-cookbook over clawgym envs (envs.interop.tinker_cookbook): the renderer against
SmolLM2's own chat template, scripted episodes of ``guess`` through the cookbook's own
rollout function, and one iteration of the cookbook's RL training (``rl.train.main``) against
the real self-hosted skyrl-tx Tinker server, started as tests/trainers/test_tinker.py starts it.

Every test is marked ``tinker_cookbook`` (opt-in: ``make tinker-cookbook`` installs the
library; the training test also needs `make tinker`'s server). Without the library they
skip, saying why; under ``CI=true`` they fail instead when ``-m`` selected the marker. The
training test spends most of its minutes in the server's JAX compiling (the persistent
cache in .venv-tinker/jax-cache spares later runs most of it).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from envs.core import ClawEnv, Opening, Transition
from envs.errors import EnvError
from envs.messages import AssistantTurn
from envs.registration import register_with_gymnasium
from tests.trainers.test_tinker import server  # noqa: F401 - the real skyrl-tx server, started as there

pytestmark = pytest.mark.tinker_cookbook
MARKER = "tinker_cookbook"


def _require_cookbook(config: pytest.Config) -> None:
    if importlib.util.find_spec("tinker_cookbook") is not None:
        return
    reason = "tinker-cookbook is absent from .venv: run `make tinker-cookbook`"
    if os.environ.get("CI") == "true" and MARKER in (config.getoption("-m") or ""):
        pytest.fail(f"CI=true with -m {MARKER} requires tinker-cookbook: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tokenizer(request: pytest.FixtureRequest):
    _require_cookbook(request.config)
    from transformers import AutoTokenizer

    from agents.model_cache import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir("default"))


@pytest.fixture(scope="module")
def renderer(tokenizer):
    from tinker_cookbook import renderers

    from envs.interop.tinker_cookbook import SMOLLM2_RENDERER

    return renderers.get_renderer(SMOLLM2_RENDERER, tokenizer)


def test_the_chosen_renderer_writes_smollm2s_chat_template_token_for_token(tokenizer, renderer):
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Guess a number."}]
    expected = tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
    expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
    assert renderer.build_generation_prompt(conversation).to_ints() == expected
    assert renderer.get_stop_sequences() == [tokenizer.convert_tokens_to_ids("<|im_end|>")]


# ---- scripted episodes through the cookbook's rollout function ----------------------------
def _scripted(tokenizer, replies: list[str]):
    """A cookbook TokenCompleter that answers each prompt with the next reply's tokens
    (log-probs 0) and keeps the prompts it was shown, decoded."""
    from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs

    class Scripted(TokenCompleter):
        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def __call__(self, model_input, stop):
            self.prompts.append(tokenizer.decode(model_input.to_ints()))
            tokens = tokenizer.encode(replies[len(self.prompts) - 1], add_special_tokens=False)
            return TokensWithLogprobs(tokens, [0.0] * len(tokens))

    return Scripted()


def _guess(n: int) -> str:
    return f'<tool_call>{json.dumps({"name": "guess", "arguments": {"number": n}})}</tool_call><|im_end|>'


def _one_group(renderer, replies_of_policy, **dataset_kwargs: Any):
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from envs.interop.tinker_cookbook import CookbookDataset

    dataset = CookbookDataset("guess", renderer, batch_size=1, group_size=1, n_batches=1, **dataset_kwargs)
    (group,) = dataset.get_batch(0)
    return asyncio.run(do_group_rollout(group, replies_of_policy)), group


def test_a_scripted_agent_that_solves_guess_gets_the_envs_reward_through_the_cookbook_rollout(tokenizer, renderer):
    policy = _scripted(tokenizer, ['hmm <tool_call>{"name": guess}</tool_call><|im_end|>', _guess(50), _guess(25),
                                   _guess(42)])
    result, group = _one_group(renderer, policy, task_ids=["guess-42"])
    (trajectory,) = result.trajectories_G
    steps = trajectory.transitions
    assert [s.reward for s in steps] == [0.0, 0.0, 0.0, 1.0]
    assert [s.episode_done for s in steps] == [False, False, False, True]
    assert result.get_total_rewards() == [1.0]
    assert steps[0].metrics["invalid_action"] == 1.0  # the unparseable call: the env's answer, not a crash
    assert steps[-1].metrics["solved"] == 1.0 and steps[-1].logs == {"task_id": "guess-42", "stop_reason": "solved"}
    # the env's tools are declared in the system turn; its answers come back as tool responses
    assert '"name": "guess"' in policy.prompts[0] and policy.prompts[0].startswith("<|im_start|>system\n")
    assert "Error: unknown tool" in policy.prompts[1] and '{"name": guess}' in policy.prompts[1]
    assert policy.prompts[2].endswith("<tool_response>\nlower\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert policy.prompts[3].endswith("<tool_response>\nhigher\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert all(later.startswith(earlier) for earlier, later in zip(policy.prompts, policy.prompts[1:]))


def test_an_agent_that_never_guesses_right_is_truncated_with_no_reward(tokenizer, renderer):
    policy = _scripted(tokenizer, [_guess(1)] * 3)
    result, _ = _one_group(renderer, policy, task_ids=["guess-3"], env_kwargs={"high": 3, "max_turns": 3})
    (trajectory,) = result.trajectories_G
    assert [s.reward for s in trajectory.transitions] == [0.0, 0.0, 0.0]
    assert trajectory.transitions[-1].episode_done and trajectory.transitions[-1].logs["stop_reason"] == "max_turns"


def test_a_reply_cut_at_max_tokens_still_reaches_the_env_as_text(tokenizer, renderer):
    cut = '<tool_call>{"name": "guess", "arguments": {"num'  # no closing tag, no <|im_end|>: max_tokens ran out
    policy = _scripted(tokenizer, [cut, '<tool_call>{"name": "guess", "arguments": {"number": 2}}'])
    result, _ = _one_group(renderer, policy, task_ids=["guess-2"], env_kwargs={"high": 3})
    first, second = result.trajectories_G[0].transitions
    assert first.metrics["parse_clean"] == 0.0 and first.metrics["invalid_action"] == 1.0 and not first.episode_done
    assert cut in policy.prompts[1] and "not valid JSON" in policy.prompts[1]  # the model sees what it wrote
    assert second.reward == 1.0 and second.metrics["parse_clean"] == 0.0 and second.logs["stop_reason"] == "solved"


def test_a_tool_prompt_of_ones_own_replaces_the_renderers_tool_block(tokenizer, renderer):
    from envs.interop.tinker_cookbook import CookbookDataset

    def one_line(tools):
        return "Tools: " + ", ".join(t["function"]["name"] for t in tools)

    (group,) = CookbookDataset("guess", renderer, batch_size=1, group_size=1, n_batches=1,
                               describe_tools=one_line).get_batch(0)
    (env,) = asyncio.run(group.make_envs())
    prompt = tokenizer.decode(asyncio.run(env.initial_observation())[0].to_ints())
    assert "you will hear higher or lower.\n\nTools: guess<|im_end|>\n<|im_start|>user\n" in prompt
    assert "<tools>" not in prompt


def test_with_clawgyms_tool_prompt_the_opening_is_what_clawgyms_own_trainer_renders(tokenizer, renderer):
    import envs
    from agents.chat_format import describe_tools, render_prompt
    from envs.interop.tinker_cookbook import CookbookDataset

    (group,) = CookbookDataset("guess", renderer, batch_size=1, group_size=1, n_batches=1,
                               describe_tools=describe_tools).get_batch(0)
    (env,) = asyncio.run(group.make_envs())
    tokens = asyncio.run(env.initial_observation())[0].to_ints()
    messages, info = envs.make("guess").unwrapped.reset(seed=group.seed)
    assert tokens == tokenizer(render_prompt(tokenizer, messages, info["tools"]), add_special_tokens=False)["input_ids"]


class _BrokenEnv(ClawEnv):
    """Fails as infrastructure does (an EnvError in ``_act``), which no real env does on demand."""

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        return Opening([{"role": "user", "content": "say anything"}], task_id="broken")

    def _act(self, turn: AssistantTurn) -> Transition:
        raise EnvError("the sandbox went away")


if "clawgymtest/Broken-v0" not in gym.registry:
    register_with_gymnasium("clawgymtest/Broken-v0", f"{__name__}:_BrokenEnv")


def test_an_infrastructure_failure_raises_so_the_cookbooks_rollout_strategy_decides(tokenizer, renderer):
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from envs.interop.tinker_cookbook import CookbookDataset, CookbookRolloutError

    (group,) = CookbookDataset("clawgymtest/Broken-v0", renderer, batch_size=1, group_size=2,
                               n_batches=1).get_batch(0)
    with pytest.raises(CookbookRolloutError, match="broken: EnvError: the sandbox went away"):
        asyncio.run(do_group_rollout(group, _scripted(tokenizer, ["hello<|im_end|>"] * 2)))


def test_a_group_is_one_task_and_batches_run_on_through_the_seeds(renderer):
    from envs.interop.tinker_cookbook import CookbookDataset

    dataset = CookbookDataset("guess", renderer, batch_size=2, group_size=3, n_batches=2, seed=10)
    assert len(dataset) == 2 and [g.seed for g in dataset.get_batch(1)] == [12, 13]
    envs_of_group = asyncio.run(dataset.get_batch(0)[0].make_envs())
    tasks = {asyncio.run(e.initial_observation()) and e.episode_task_id for e in envs_of_group}
    assert len(envs_of_group) == 3 and len(tasks) == 1
    cycled = CookbookDataset("guess", renderer, batch_size=2, group_size=1, n_batches=1, task_ids=["guess-7", "guess-9"])
    assert [g.task_id for g in cycled.get_batch(0)] == ["guess-7", "guess-9"]
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        CookbookDataset("guess", renderer, batch_size=1, group_size=0, n_batches=1)


# ---- one iteration of the cookbook's RL training on a real Tinker server ------------------
@pytest.fixture(scope="module")
def cookbook(request: pytest.FixtureRequest) -> None:
    _require_cookbook(request.config)


@pytest.mark.timeout(3600)
def test_one_iteration_of_the_cookbooks_rl_training_on_guess_takes_a_step_on_the_server(
        cookbook, server, tmp_path, tmp_path_factory):
    """The example's config, one iteration: 2 tasks x 4 episodes of up to 3 turns sampled on the
    server, the env's rewards, then forward_backward + optim_step. The server must log the
    optimizer step for this run's model, and the sampled policy must have moved exactly when
    some group's returns differed (GRPO's advantages are zero in a group whose returns agree,
    and Adam then moves nothing)."""
    import tinker
    from tinker_cookbook.rl import train

    example = _example()
    model = example.served_model()
    log = tmp_path / "run"
    args = argparse.Namespace(steps=1, batch_size=2, group_size=4, high=3, max_tokens=40, lr=1e-3, lora_rank=8, seed=0,
                              renderer=example.SMOLLM2_RENDERER, tool_prompt="clawgym", out=str(log))
    asyncio.run(train.main(example.config_for(args, model)))

    (metrics,) = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(line) for line in next(log.rglob("train_rollout_summaries.jsonl")).read_text().splitlines()]
    (final,) = [json.loads(line) for line in (log / "checkpoints.jsonl").read_text().splitlines()]
    print(json.dumps({k: v for k, v in metrics.items() if not k.startswith("time/")}, indent=1))

    assert len(rollouts) == 8 and metrics["env/all/total_episodes"] == 8, "2 groups of 4 episodes"
    for episode in rollouts:
        last = episode["steps"][-1]
        assert last["episode_done"] and last["logs"]["stop_reason"] in ("solved", "max_turns")
        assert episode["total_reward"] == (1.0 if last["logs"]["stop_reason"] == "solved" else 0.0)  # guess's own
    model_id = final["state_path"].removeprefix("tinker://").split("/")[0]
    # the server fixture's log (pytest also links its folder as tinker-statecurrent)
    (server_log,) = {p.resolve() for p in tmp_path_factory.getbasetemp().glob("tinker-state*/server.log")}
    assert f"Applied optimizer step for model {model_id}" in " ".join(server_log.read_text().split())

    service = tinker.ServiceClient()
    probe = tinker.ModelInput.from_ints(_probe_tokens(model))
    base = service.create_sampling_client(base_model=model).compute_logprobs(probe).result()
    trained = service.create_sampling_client(model_path=final["sampler_path"]).compute_logprobs(probe).result()
    base, trained = [v for v in base if v is not None], [v for v in trained if v is not None]
    assert len(base) == len(trained) == probe.length - 1
    moved = float(np.max(np.abs(np.subtract(base, trained))))
    if metrics["env/all/by_group/frac_mixed"] > 0:
        assert moved > 1e-3, f"a group's returns differed, yet the policy did not move ({moved:.2e})"
    else:
        assert moved < 1e-4, f"every group's returns agreed (no advantage), yet the policy moved ({moved:.2e})"


def _example():
    """examples/interop/tinker_cookbook_guess.py as a module: the test runs the example's own config."""
    path = Path(__file__).resolve().parents[2] / "examples" / "interop" / "tinker_cookbook_guess.py"
    spec = importlib.util.spec_from_file_location("tinker_cookbook_guess", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _probe_tokens(model: str) -> list[int]:
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    return get_tokenizer(model).encode("<|im_start|>user\nGuess a number.<|im_end|>\n<|im_start|>assistant\nMy guess:",
                                       add_special_tokens=False)
