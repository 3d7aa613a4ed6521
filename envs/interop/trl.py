"""TRL: train on any clawgym env with TRL's ``GRPOTrainer`` (TRL 1.16, its ``rollout_func``).

In short::

    from trl import GRPOConfig, GRPOTrainer
    from envs.interop.trl import EnvRollout, env_return, task_dataset

    rollout = EnvRollout(lambda: envs.make("guess"), render=render_prompt)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_return,
                          train_dataset=task_dataset(envs.make("guess")), rollout_func=rollout,
                          args=GRPOConfig(...))

**Why ``rollout_func``.** TRL 1.16 documents two ways to train on an environment:
``environment_factory`` (TRL owns the loop: it samples, parses tool calls with the
tokenizer's response template, calls one Python method per call, and ends the episode at the
first reply without one) and ``rollout_func`` ("when ``environment_factory`` doesn't fit":
the function owns the loop and returns token ids). A clawgym env does not fit the first: its
tools are JSON schemas, not methods; it takes a whole assistant message per step (several
calls, or text) and answers with any messages (a user's reply, a reminder), not only tool
results; it parses the model's text itself; and the default model's chat template renders no
tools, which TRL's environment mode refuses. So the env owns the loop here, through the
contract alone (:mod:`envs.core`; nothing family-specific), and TRL owns the rest: sampling
(``trainer._generate_single_turn``, the call TRL's own tool loop makes, so vLLM,
continuous batching and the config's sampling settings all apply), the loss, the optimizer.

**One episode, one TRL sample.** The prompt is the env's opening, rendered once; the
completion is every assistant turn's generated token ids (exactly as sampled: never decoded
and re-encoded) with the env's messages between them, rendered by the chat template
(``env_mask`` 0: TRL's loss skips them). Each turn's text goes to ``env.step`` as a string, so
the env parses tool calls its own way. The episode ends when the env ends it, when a turn
stops without an end-of-turn token, or when ``max_completion_length`` (TRL's budget for the
whole episode, env tokens included) leaves no room for the env's reply. Its reward is the
env's return (the sum of its step rewards); an episode whose env failed (``info["error"]``
or an ``EnvError`` on reset) gets ``None``, which TRL 1.16 keeps out of the group baseline
and trains with advantage 0, the contract's "not trained on".

**What TRL cannot carry.** Per-turn rewards (GRPO scores a whole sample: the return is one
number), an env's ``info`` beyond the return, task, stop reason and turns (logged as extra
columns), images (a text-only prompt column; a VLM's image tokens are not built here), and
the env's own truncation grading when TRL's token budget, not the env, ends an episode.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import gymnasium as gym

from envs.errors import EnvError
from envs.messages import Message, parse_text_action, text_of

if TYPE_CHECKING:  # named in full in annotations, so the docs link (or knowingly skip) them
    import datasets
    import transformers
    import trl

TRL_VERSION = "1.16.0"
"""The release this adapter is written against (the ``trl`` extra pins it): ``rollout_func``
and ``_generate_single_turn`` are experimental or private in TRL and may change."""
TASK_KEY = "clawgym_task"
"""The key, on a prompt's first message, naming the episode's task: ``rollout_func`` gets
the prompts only, not the dataset's other columns. Chat templates read ``role`` and
``content`` and ignore it."""
ENV_STOP_BUDGET = "max_completion_length"
"""``stop_reason`` of an episode that TRL's token budget, not the env, ended."""


class Render(Protocol):
    """Messages and tool schemas -> the prompt text, ending where the assistant's reply begins
    (``agents.chat_format.render_prompt`` has this shape)."""

    def __call__(self, tokenizer: transformers.PreTrainedTokenizerBase, messages: list[Message],
                 tools: list[dict[str, Any]] | None) -> str: ...


def native_render(tokenizer: transformers.PreTrainedTokenizerBase, messages: list[Message],
                  tools: list[dict[str, Any]] | None) -> str:
    """The tokenizer's own chat template, tools passed natively. A template that ignores
    ``tools`` (SmolLM2's) would hide them from the model, so it is refused."""
    if tools and "tools" not in (tokenizer.chat_template or ""):
        raise ValueError("this tokenizer's chat template ignores tools, so the model would never see the env's "
                         "tools; pass render=agents.chat_format.render_prompt (clawgym's rendering, which "
                         "describes them in the system prompt) or a tokenizer whose template takes tools")
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                         tokenize=False)


def task_dataset(env: gym.Env, task_ids: Sequence[str] | None = None,
                 seeds: Sequence[int] = (0,)) -> datasets.Dataset:
    """One row per (task, seed): ``prompt`` is the env's opening (text only) with the task
    under :data:`TASK_KEY` on its first message. ``task_ids`` default to all the env's
    (``env.task_ids()``); an env that generates its tasks (no ids) gets one row per seed.
    The env is reset once per row here, and again by the rollout with the same seed and task."""
    from datasets import Dataset

    claw = env.unwrapped
    catalog = list(task_ids) if task_ids is not None else claw.task_ids()
    keys = [(t, s) for t in catalog for s in seeds] if catalog else [(None, s) for s in seeds]
    if not keys:
        raise ValueError("task_dataset needs at least one task id and one seed")
    rows = []
    for task_id, seed in keys:
        opening, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        prompt = [{"role": m["role"], "content": text_of(m)} for m in opening]
        prompt[0][TASK_KEY] = json.dumps({"task_id": task_id, "seed": seed})
        rows.append({"prompt": prompt, "task_id": info["task_id"]})
    env.close()
    return Dataset.from_list(rows)


@dataclass
class Episode:
    """One rollout: what TRL gets (``prompt_ids``, ``completion_ids``, ``env_mask``) and what
    the env said."""

    task_id: str | None
    seed: int | None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    """1 on the model's tokens (trained), 0 on the env's messages rendered between turns."""
    logprobs: list[float] | None = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    """The conversation as rendered: the opening, then each turn's parsed reply and the env's answer."""
    env_return: float = 0.0
    turns: int = 0
    stop_reason: str = ""
    error: str | None = None
    done: bool = False

    @property
    def reward(self) -> float | None:
        """The env's return; None (unscorable for TRL) when the env failed."""
        return None if self.error is not None else self.env_return


class EnvRollout:
    """A TRL ``rollout_func`` that plays clawgym episodes: ``EnvRollout(make_env)(prompts, trainer)``.

    Arguments:
        make_env: builds one env (called once per concurrent episode; envs are reused).
        render: messages and tools -> prompt text (default :func:`native_render`; for SmolLM2
            and other templates without tools, ``agents.chat_format.render_prompt``).
        env_workers: threads stepping and resetting envs (they are I/O bound: sandboxes, browsers).
    """

    def __init__(self, make_env: Callable[[], gym.Env], render: Render = native_render, env_workers: int = 8) -> None:
        if env_workers < 1:
            raise ValueError(f"env_workers must be >= 1, got {env_workers}")
        self.make_env = make_env
        self.render = render
        self.env_workers = env_workers
        self._envs: list[gym.Env] = []
        self.episodes: list[Episode] = []
        """The last call's episodes, in TRL's order (one per completion)."""

    # ---- what TRL calls -----------------------------------------------------------------
    def __call__(self, prompts: list[list[Message]], trainer: trl.GRPOTrainer) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        while len(self._envs) < len(prompts):
            self._envs.append(self.make_env())
        episodes = [Episode(*_task_of(p)) for p in prompts]
        group = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        # only the envs run in threads (they wait on sandboxes and browsers); tokenizers stay on this one
        with ThreadPoolExecutor(min(self.env_workers, len(episodes))) as pool:
            openings = list(pool.map(_reset, self._envs, episodes))
            tools = [self._open(e, opening, tokenizer) for e, opening in zip(episodes, openings)]
            first = True
            while live := [i for i, e in enumerate(episodes) if not e.done]:
                ids = [episodes[i].prompt_ids + episodes[i].completion_ids for i in live]
                # the first turn's prompts come in groups of identical ones, as in TRL's own first
                # call (vLLM samples each group from one prompt); later turns have their own histories
                whole_groups = first and len(live) == len(episodes)
                generated, logprobs = trainer._generate_single_turn(ids, None, {}, group if whole_groups else 1)
                first = False
                texts = [t.strip() for t in tokenizer.batch_decode(generated, skip_special_tokens=True)]
                steps = list(pool.map(lambda i, text: self._envs[i].step(text), live, texts))
                for k, i in enumerate(live):
                    self._record(episodes[i], generated[k], logprobs[k] if logprobs else None, texts[k],
                                 steps[k], tools[i], tokenizer, trainer)
        self.episodes = episodes
        return {"prompt_ids": [e.prompt_ids for e in episodes],
                "completion_ids": [e.completion_ids for e in episodes],
                "logprobs": [e.logprobs for e in episodes] if all(e.logprobs is not None for e in episodes)
                else None,
                "env_mask": [e.env_mask for e in episodes],
                "env_return": [e.reward for e in episodes],
                "env_task_id": [e.task_id or "" for e in episodes],
                "env_stop_reason": [e.stop_reason for e in episodes],
                "env_turns": [e.turns for e in episodes]}

    def close(self) -> None:
        """Close every env this rollout made."""
        for env in self._envs:
            env.close()
        self._envs.clear()

    # ---- one episode --------------------------------------------------------------------
    def _open(self, episode: Episode, opening: tuple[list[Message], dict[str, Any]] | None,
              tokenizer: transformers.PreTrainedTokenizerBase) -> list[dict[str, Any]]:
        """The episode's prompt ids from the env's opening; its tools."""
        if opening is None:  # the task's setup failed: nothing to train on, one masked token for TRL
            episode.prompt_ids, episode.completion_ids = [tokenizer.eos_token_id], [tokenizer.eos_token_id]
            episode.env_mask, episode.logprobs = [0], [0.0]
            return []
        messages, info = opening
        tools = info.get("tools") or []
        episode.task_id = info["task_id"]
        episode.messages = list(messages)
        episode.prompt_ids = _encode(tokenizer, self.render(tokenizer, episode.messages, tools))
        return tools

    def _record(self, episode: Episode, generated: list[int], logprobs: list[float] | None, text: str,
                step: tuple[list[Message], float, bool, bool, dict[str, Any]], tools: list[dict[str, Any]],
                tokenizer: transformers.PreTrainedTokenizerBase, trainer: trl.GRPOTrainer) -> None:
        """Append one turn's tokens and, unless the episode ends, the env's answer to them."""
        budget = trainer.max_completion_length - len(episode.completion_ids)
        generated = generated[:budget]
        episode.completion_ids += generated
        episode.env_mask += [1] * len(generated)
        if episode.logprobs is not None:
            episode.logprobs = episode.logprobs + logprobs[:budget] if logprobs is not None else None
        answer, reward, terminated, truncated, info = step
        episode.turns += 1
        episode.env_return += float(reward)
        if info.get("error"):
            episode.error = str(info["error"])
        if terminated or truncated:
            episode.stop_reason, episode.done = info.get("stop_reason", ""), True
            return
        if not generated or generated[-1] not in trainer.eos_token_ids:
            # cut by the budget: no end-of-turn token to hang the env's answer on
            episode.stop_reason, episode.done = ENV_STOP_BUDGET, True
            return
        before = [*episode.messages, parse_text_action(text)]
        suffix = self._between_turns(tokenizer, before, answer, tools, generated[-1])
        if len(episode.completion_ids) + len(suffix) >= trainer.max_completion_length:
            episode.stop_reason, episode.done = ENV_STOP_BUDGET, True
            return
        episode.messages = before + answer
        episode.completion_ids += suffix
        episode.env_mask += [0] * len(suffix)
        if episode.logprobs is not None:
            episode.logprobs = episode.logprobs + [0.0] * len(suffix)

    def _between_turns(self, tokenizer: transformers.PreTrainedTokenizerBase, before: list[Message],
                       answer: list[Message], tools: list[dict[str, Any]], end_id: int) -> list[int]:
        """The token ids after the model's end-of-turn token: the env's ``answer`` rendered,
        then the next assistant header. Read off the rendered text after the reply's end (the
        token the model stopped on), so the model's own ids are never re-tokenized."""
        head = self.render(tokenizer, before[:-1], tools)
        full = self.render(tokenizer, before + answer, tools)
        end = tokenizer.decode([end_id])
        at = full.find(end, len(head)) if full.startswith(head) else -1
        if at < 0:
            raise ValueError(f"the chat template does not render a conversation as a prefix of its continuation "
                             f"(or ends an assistant turn without {end!r}); multi-turn episodes need both")
        return _encode(tokenizer, full[at + len(end):])


def _reset(env: gym.Env, episode: Episode) -> tuple[list[Message], dict[str, Any]] | None:
    """The env's opening for the episode's task and seed; None (and the episode over, with the
    error) when the env could not set the task up."""
    try:
        return env.reset(seed=episode.seed, options={"task_id": episode.task_id} if episode.task_id else None)
    except EnvError as exc:
        episode.error, episode.stop_reason, episode.done = f"{type(exc).__name__}: {exc}", "error", True
        return None


def _encode(tokenizer: transformers.PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _task_of(prompt: list[Message]) -> tuple[str | None, int | None]:
    """``(task_id, seed)`` from a :func:`task_dataset` prompt; a clear error for any other."""
    marker = prompt[0].get(TASK_KEY) if prompt and isinstance(prompt[0], dict) else None
    if not marker:
        raise ValueError(f"a prompt without {TASK_KEY!r} on its first message: build the dataset with "
                         "envs.interop.trl.task_dataset(env), which names each row's task there")
    task = json.loads(marker)
    return task["task_id"], task["seed"]


def env_return(env_return: list[float | None], env_task_id: list[str], env_stop_reason: list[str],
               env_turns: list[int], log_extra: Callable[[str, list[Any]], None] | None = None,
               **_: Any) -> list[float | None]:
    """The reward function: each episode's env return (None where the env failed), with its
    task, stop reason and turns added to TRL's completions table."""
    if log_extra is not None:
        log_extra("task_id", env_task_id)
        log_extra("stop_reason", env_stop_reason)
        log_extra("turns", env_turns)
    return list(env_return)
