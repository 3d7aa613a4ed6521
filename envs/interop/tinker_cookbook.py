"""clawgym envs in tinker-cookbook's RL loop: ``rl.Env``, ``EnvGroupBuilder``, ``RLDataset``.

tinker-cookbook (``tinker_cookbook.rl``) trains on token-level envs: an ``Env`` hands out a
``tinker.ModelInput`` and a stop condition, takes the sampled token ids, and answers with a
``StepResult``. :class:`CookbookEnv` is one episode of any clawgym env in that shape, through
the cookbook's own renderer for the model:

- ``initial_observation``: ``reset``; the opening messages (the env's tools declared in its
  system message by ``renderer.create_conversation_prefix_with_tools``, or by a
  ``describe_tools`` function given to the env) rendered with
  ``renderer.build_generation_prompt``; the stop condition is ``renderer.get_stop_sequences()``.
- ``step``: ``renderer.parse_response(tokens)`` gives the assistant message; its parsed
  ``tool_calls`` become the OpenAI-style calls the env takes (ids ``call_<turn>_<i>``), a
  call the renderer could not parse is handed on as its raw text, so the env answers it as
  the malformed call it is (``invalid_action``). A reply that never reached the stop
  sequence (``max_tokens`` ran out) goes to the env as its decoded text. The env's reward is
  the step's reward; ``terminated`` or ``truncated`` ends the episode; the env's
  ``info["metrics"]`` are the step's metrics and ``task_id`` / ``stop_reason`` its logs.
  The next observation is the whole conversation so far, re-rendered, so the sampled reply
  is a prefix of it (the cookbook merges such turns into one datum).
- an ``info["error"]`` (the env's infrastructure failed: the contract says not to train on
  that trajectory) raises :class:`CookbookRolloutError`; the cookbook's
  ``rollout_error_tolerance`` then retries or stops, as it does for any failed rollout.

:class:`CookbookGroup` builds ``group_size`` envs on one task (the same reset seed and
``task_id``: GRPO's group), and closes them in ``cleanup``. :class:`CookbookDataset` yields
batches of groups, seeds running on from ``seed``, cycling through ``task_ids`` when given;
``CookbookDatasetBuilder`` is the ``chz`` config ``rl.train.Config.dataset_builder``
takes. Nothing here knows a family: any registered env name or alias works.

The renderer must match the model's chat template. SmolLM2-135M-Instruct (clawgym's default
model) uses ChatML (``<|im_start|>role\\n...<|im_end|>``): ``qwen3_instruct``
(:data:`SMOLLM2_RENDERER`) renders system / user / assistant turns token for token as its
template does (the conversation opening with a system message, as every clawgym env's
does), stops on ``<|im_end|>`` and reads ``<tool_call>{...}</tool_call>`` blocks, the
format clawgym's own text actions use. What is the renderer's, not the template's: tool
results go in as ``user`` turns wrapped in ``<tool_response>`` (SmolLM2's template would
write a ``tool`` turn), and the tools are declared in Qwen's ``# Tools`` block. Given
``describe_tools=agents.chat_format.describe_tools`` instead (as the example does), the
opening prompt is token for token the one clawgym's own trainer renders for SmolLM2.

Tested with tinker-cookbook 0.4.1 (``make tinker-cookbook``): the newest release whose
``tinker>=0.9.0`` admits the SDK 0.16.1 that the self-hosted skyrl-tx 0.3.0 server needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)

from envs.core import ClawEnv
from envs.messages import Message, parse_text_action, text_of
from envs.registration import make

if TYPE_CHECKING:
    from tinker_cookbook.tokenizer_utils import Tokenizer

SMOLLM2_RENDERER = "qwen3_instruct"
"""The cookbook renderer that matches SmolLM2-135M-Instruct's ChatML template."""

ToolPrompt = Callable[[list[dict[str, object]]], str]
"""Tool schemas -> the text that declares them in the system message (instead of the
renderer's own tool block), e.g. ``agents.chat_format.describe_tools``."""


class CookbookRolloutError(RuntimeError):
    """A clawgym step reported ``info["error"]``: the env's infrastructure failed, and the
    contract says not to train on the trajectory. Raised so the cookbook's rollout strategy
    (``rl.train.Config.rollout_error_tolerance``) retries or stops."""


# ---- messages: clawgym's (OpenAI-style dicts) <-> the renderer's ------------------------------
def to_renderer_message(message: Message, call_names: dict[str, str]) -> renderers.Message:
    """A clawgym message as the renderer's: text content; an assistant's ``tool_calls`` as
    ``renderers.ToolCall``; a tool result with its ``tool_call_id`` and the called function's
    ``name`` (``call_names``: call id -> name, from the assistant turns before it)."""
    out = renderers.Message(role=message["role"], content=text_of(message))
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [renderers.ToolCall(id=c.get("id"), function=renderers.ToolCall.FunctionBody(
            name=c["function"]["name"], arguments=c["function"]["arguments"])) for c in calls]
    if message["role"] == "tool" and message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
        if message["tool_call_id"] in call_names:
            out["name"] = call_names[message["tool_call_id"]]
    return out


def to_clawgym_action(message: renderers.Message, turn: int) -> Message:
    """The renderer's parsed assistant message as the action a clawgym env takes: its text
    (a ``<think>`` part kept as its text), its parsed calls as OpenAI-style ``tool_calls``, and
    each call it could not parse as clawgym's own parser reads the raw block (a call the env
    answers with what is wrong with it). Call ids are ``call_<turn>_<i>``."""
    content = message["content"]
    if isinstance(content, str):
        text = content
    else:
        text = "".join(p["text"] if p["type"] == "text" else f"<think>{p['thinking']}</think>"
                       for p in content if p["type"] in ("text", "thinking"))
    calls = [{"type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
             for c in message.get("tool_calls") or []]
    for unparsed in message.get("unparsed_tool_calls") or []:
        calls += parse_text_action(unparsed.raw_text).get("tool_calls") or []
    action: Message = {"role": "assistant", "content": text.strip() if calls else text}
    if calls:
        action["tool_calls"] = [{**c, "id": f"call_{turn}_{i}"} for i, c in enumerate(calls)]
    return action


def said_message(parsed: renderers.Message, action: Message) -> renderers.Message:
    """The assistant turn as the conversation keeps it: the renderer's parsed message with
    each parsed call given the id the env answers it by, and each block the renderer could
    not parse (which its renderers drop) kept in the text, so the next prompt shows the model
    the malformed call the env's reply is about."""
    said = renderers.Message(**{k: v for k, v in parsed.items() if k != "unparsed_tool_calls"})
    ids = [c["id"] for c in action.get("tool_calls") or []]
    if parsed.get("tool_calls"):
        said["tool_calls"] = [c.model_copy(update={"id": i}) for c, i in zip(parsed["tool_calls"], ids)]
    unparsed = "".join(u.raw_text for u in parsed.get("unparsed_tool_calls") or [])
    if unparsed:
        content = parsed["content"]
        said["content"] = (content + unparsed if isinstance(content, str)
                           else [*content, renderers.TextPart(type="text", text=unparsed)])
    return said


def tool_specs(tools: list[dict[str, object]]) -> list[renderers.ToolSpec]:
    """OpenAI function schemas (``info["tools"]``) as the renderer's ``ToolSpec``."""
    specs = []
    for schema in tools:
        fn = schema["function"]
        assert isinstance(fn, dict)
        specs.append(renderers.ToolSpec(name=fn["name"], description=fn.get("description") or "",
                                        parameters=fn.get("parameters") or {"type": "object", "properties": {}}))
    return specs


def opening_messages(renderer: renderers.Renderer, messages: list[Message], tools: list[dict[str, object]],
                     describe_tools: ToolPrompt | None = None) -> list[renderers.Message]:
    """The episode's first messages for ``renderer``: the env's system message (if any) and
    its tools through ``create_conversation_prefix_with_tools`` (or, given ``describe_tools``,
    its text appended to the system message), then the rest."""
    rest = [to_renderer_message(m, {}) for m in messages]
    if not tools:
        return rest
    system = text_of(messages[0]) if messages and messages[0]["role"] == "system" else ""
    if system:
        rest = rest[1:]
    if describe_tools is not None:
        block = describe_tools(tools)
        return [renderers.Message(role="system", content=f"{system}\n\n{block}" if system else block), *rest]
    try:
        prefix = renderer.create_conversation_prefix_with_tools(tool_specs(tools), system_prompt=system)
    except NotImplementedError:
        raise ValueError(f"the renderer {type(renderer).__name__} cannot declare tools, and this env offers "
                         f"{len(tools)}; pick one that can (for ChatML models such as SmolLM2: "
                         f"{SMOLLM2_RENDERER!r})") from None
    return [*prefix, *rest]


# ---- the token-level env ----------------------------------------------------------------------
class CookbookEnv(Env):
    """One episode of a clawgym env as tinker-cookbook's single-use token-level ``Env``.

    ``env``: the clawgym env (reset here; closed when the episode ends or by :meth:`close`).
    ``seed`` / ``task_id``: what ``reset`` gets. ``max_trajectory_tokens``: a conversation
    longer than this (the next prompt) ends the episode with metric ``context_overflow`` 1
    and the step's env reward kept (None: the env's own budgets only). ``describe_tools``:
    declares the tools in the system message instead of the renderer's tool block.
    """

    def __init__(self, env: ClawEnv, renderer: renderers.Renderer, *, seed: int | None = None,
                 task_id: str | None = None, max_trajectory_tokens: int | None = None,
                 describe_tools: ToolPrompt | None = None) -> None:
        self.env = env
        self.renderer = renderer
        self.describe_tools = describe_tools
        self.seed = seed
        self.task_id = task_id
        self.max_trajectory_tokens = max_trajectory_tokens
        self.messages: list[renderers.Message] = []
        """The conversation as the renderer sees it: what the next prompt is rendered from."""
        self.rewards: list[float] = []
        """The env's reward of each step so far."""
        self.stop_reason: str | None = None
        self.episode_task_id: str | None = None
        self._call_names: dict[str, str] = {}
        self._turn = 0

    @property
    def stop_condition(self) -> StopCondition:
        return self.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[tinker.ModelInput, StopCondition]:
        options = {"task_id": self.task_id} if self.task_id else None
        messages, info = await asyncio.to_thread(self.env.reset, seed=self.seed, options=options)
        self.episode_task_id = info["task_id"]
        self.messages = opening_messages(self.renderer, messages, info.get("tools") or [], self.describe_tools)
        return self.renderer.build_generation_prompt(self.messages), self.stop_condition

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        self._turn += 1
        parsed, termination = self.renderer.parse_response(list(action))
        if termination.is_clean:
            reply = to_clawgym_action(parsed, self._turn)
        else:  # no stop sequence (max_tokens ran out): the env reads the text as it reads any
            reply = parse_text_action(renderers.get_text_content(parsed), call_id_prefix=f"call_{self._turn}")
        self._call_names.update({c["id"]: c["function"]["name"] for c in reply.get("tool_calls") or []})
        obs, reward, terminated, truncated, info = await asyncio.to_thread(self.env.step, reply)
        if info.get("error"):
            self.close()
            raise CookbookRolloutError(f"{self.episode_task_id}: {info['error']}")
        self.rewards.append(reward)
        # an unclean parse is the decoded text alone, kept as the model wrote it
        self.messages.append(said_message(parsed, reply) if termination.is_clean else parsed)
        self.messages += [to_renderer_message(m, self._call_names) for m in obs]
        metrics: dict[str, float | int] = {**info.get("metrics", {}), "parse_clean": float(termination.is_clean)}
        logs: dict[str, str | int | float] = {"task_id": str(info["task_id"])}
        done = terminated or truncated
        if done:
            self.stop_reason = info.get("stop_reason")
            logs["stop_reason"] = str(self.stop_reason)
            self.close()
            return StepResult(reward, True, tinker.ModelInput.empty(), self.stop_condition, metrics, logs)
        prompt = self.renderer.build_generation_prompt(self.messages)
        if self.max_trajectory_tokens is not None and prompt.length > self.max_trajectory_tokens:
            metrics["context_overflow"] = 1.0
            self.stop_reason = "context_overflow"
            logs["stop_reason"] = self.stop_reason
            self.close()
            return StepResult(reward, True, tinker.ModelInput.empty(), self.stop_condition, metrics, logs)
        return StepResult(reward, False, prompt, self.stop_condition, metrics, logs)

    def close(self) -> None:
        """Release the clawgym env (idempotent)."""
        self.env.close()


# ---- groups, datasets -------------------------------------------------------------------------
@dataclass
class CookbookGroup(EnvGroupBuilder):
    """``group_size`` episodes of one task: each env is made from the registered ``env``
    (name or alias) with ``env_kwargs`` and reset with the same ``seed`` and ``task_id``.
    The env's reward is the whole reward (``compute_group_rewards`` adds nothing)."""

    env: str
    renderer: renderers.Renderer
    group_size: int
    seed: int
    env_kwargs: dict[str, object] = field(default_factory=dict)
    task_id: str | None = None
    max_trajectory_tokens: int | None = None
    describe_tools: ToolPrompt | None = None
    _made: list[CookbookEnv] = field(default_factory=list, init=False, repr=False)

    async def make_envs(self) -> Sequence[CookbookEnv]:
        made = [CookbookEnv(make(self.env, **self.env_kwargs).unwrapped, self.renderer, seed=self.seed,
                            task_id=self.task_id, max_trajectory_tokens=self.max_trajectory_tokens,
                            describe_tools=self.describe_tools)
                for _ in range(self.group_size)]
        self._made += made
        return made

    async def cleanup(self) -> None:
        for env in self._made:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - the cookbook asks cleanup never to raise
                pass

    def logging_tags(self) -> list[str]:
        return ["clawgym", self.env.rsplit("/", 1)[-1]]


class CookbookDataset(RLDataset):
    """``n_batches`` batches of ``batch_size`` groups. Group ``j`` of batch ``i`` resets with
    seed ``seed + i * batch_size + j`` and, when ``task_ids`` is given, the task at that index
    modulo its length (else the env draws one from the seed)."""

    def __init__(self, env: str, renderer: renderers.Renderer, *, batch_size: int, group_size: int,
                 n_batches: int, seed: int = 0, env_kwargs: dict[str, object] | None = None,
                 task_ids: Sequence[str] = (), max_trajectory_tokens: int | None = None,
                 describe_tools: ToolPrompt | None = None) -> None:
        for name, value in (("batch_size", batch_size), ("group_size", group_size), ("n_batches", n_batches)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.env, self.renderer = env, renderer
        self.batch_size, self.group_size, self.n_batches = batch_size, group_size, n_batches
        self.seed = seed
        self.env_kwargs = dict(env_kwargs or {})
        self.task_ids = list(task_ids)
        self.max_trajectory_tokens = max_trajectory_tokens
        self.describe_tools = describe_tools

    def get_batch(self, index: int) -> Sequence[CookbookGroup]:
        if not 0 <= index < self.n_batches:
            raise IndexError(f"batch {index} is outside 0..{self.n_batches - 1}")
        seeds = [self.seed + index * self.batch_size + j for j in range(self.batch_size)]
        return [CookbookGroup(self.env, self.renderer, self.group_size, s, self.env_kwargs,
                              self.task_ids[s % len(self.task_ids)] if self.task_ids else None,
                              self.max_trajectory_tokens, self.describe_tools) for s in seeds]

    def __len__(self) -> int:
        return self.n_batches


@chz.chz
class CookbookDatasetBuilder(RLDatasetBuilder):
    """The ``dataset_builder`` of ``rl.train.Config``: a :class:`CookbookDataset` over the
    clawgym env ``env`` (name or alias; ``env_kwargs_json``: its constructor arguments as a
    JSON object), rendered with ``renderer_name`` and the tokenizer of ``model_name`` (a
    hub name or a local directory). ``test_batches`` > 0 adds a test set of that many
    batches on seeds after the training ones."""

    env: str
    model_name: str
    renderer_name: str
    batch_size: int
    group_size: int
    n_batches: int
    seed: int = 0
    env_kwargs_json: str = "{}"
    task_ids: str = ""
    """Comma-separated task ids to cycle through (empty: drawn from each group's seed)."""
    test_batches: int = 0
    max_trajectory_tokens: int | None = None
    describe_tools: ToolPrompt | None = None
    """Declares the tools in the system message instead of the renderer's tool block."""

    async def __call__(self) -> tuple[CookbookDataset, CookbookDataset | None]:
        env_kwargs = json.loads(self.env_kwargs_json)
        if not isinstance(env_kwargs, dict):
            raise ValueError(f"env_kwargs_json must be a JSON object, got {self.env_kwargs_json!r:.200}")
        renderer = renderers.get_renderer(self.renderer_name, self.tokenizer())
        tasks = [t.strip() for t in self.task_ids.split(",") if t.strip()]
        common = dict(env=self.env, renderer=renderer, batch_size=self.batch_size, group_size=self.group_size,
                      env_kwargs=env_kwargs, task_ids=tasks, max_trajectory_tokens=self.max_trajectory_tokens,
                      describe_tools=self.describe_tools)
        train = CookbookDataset(n_batches=self.n_batches, seed=self.seed, **common)
        test = (CookbookDataset(n_batches=self.test_batches, seed=self.seed + self.n_batches * self.batch_size,
                                **common) if self.test_batches > 0 else None)
        return train, test

    def tokenizer(self) -> Tokenizer:
        from tinker_cookbook.tokenizer_utils import get_tokenizer

        return get_tokenizer(self.model_name)
