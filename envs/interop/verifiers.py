"""Any clawgym env as a verifiers (0.4.0) environment: ``vf-eval``, GEPA and prime-rl run it.

verifiers 0.4.0 composes an environment from a *taskset* (the tasks), an *env* (how one
task becomes one episode, ``Env.run``) and each seat's *harness* (the program that calls
the model). It finds them by id: ``--env.taskset.id clawgym-verifiers`` imports the module
``clawgym_verifiers`` and takes the ``Taskset``, ``Env`` and ``Harness`` subclasses its
``__all__`` exports, all three defined here (``make verifiers`` puts that module and the
repo on ``.venv-verifiers``' path: verifiers needs openai<3, so it cannot share ``.venv``)::

    vf-eval clawgym-verifiers --env.taskset.env guess -m <model> \\
        --client.base-url http://127.0.0.1:30000/v1 --client.api-key-var OPENAI_API_KEY -n 5 --no-push

and in Python, :func:`load_environment` builds the same environment from keyword arguments.

:class:`ClawgymTaskset` poses the env's own tasks (``task_ids()``, or ``seeds`` seeds for an
env that generates its tasks). :class:`ClawgymEnv` plays one: it makes the clawgym env,
resets it, and is the run's user: the env's opening messages are the prompt, each model
reply is one ``step``, the env's new messages are the next turn, until the episode ends.
:class:`ClawgymHarness` makes exactly one model call per turn, in process, through the
rollout's interception endpoint (so verifiers records every token as it does for any
harness), with the env's tool schemas as the request's ``tools``.

What is carried: the opening messages, tool schemas as native ``tools``, each reply as an
assistant message with its native ``tool_calls`` (a reply's ``<tool_call>`` text that the
endpoint did not parse stays text, as any env step with a message would treat it), the
env's ``tool`` and ``user`` messages (images as content parts) as the next turn, and
the env's return as the reward ``env_return``. The trace's metrics are the env's metrics
of the first and last turn (``first/<k>``, ``last/<k>``) and ``turns``; ``trace.info``
keeps ``task_id``, ``stop_reason`` and each step's reward (``step_rewards``). An env's
infrastructure failure (``info["error"]``) fails the rollout, so it is not trained on.
Not carried: per-step rewards as separate training signals (verifiers scores a rollout
once), and ``terminated`` vs ``truncated`` (``stop_reason`` says which).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import Field
from verifiers.v1.dialects import parse_message
from verifiers.v1.dialects.chat import message_to_wire

from envs.core import ClawEnv
from envs.messages import Message
from envs.registration import make, resolve

__all__ = ["ClawgymData", "ClawgymTasksetConfig", "ClawgymTask", "ClawgymTaskset", "ClawgymEnvConfig",
           "ClawgymEnv", "ClawgymHarnessConfig", "ClawgymHarness", "load_environment"]

TASKSET_ID = "clawgym-verifiers"
"""The taskset id verifiers knows clawgym by (the module ``clawgym_verifiers``)."""


class ClawgymData(vf.TaskData):
    """One task: which env, how to reset it, and (set when the episode starts) its tools."""

    env: str
    """The clawgym env: an alias, an id or ``module:id`` (:func:`envs.registration.resolve`)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = None
    seed: int | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The env's tool schemas from ``reset``; the harness sends them as ``tools``."""


class ClawgymTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: the clawgym env and which of its tasks to pose."""

    env: str = "guess"
    """The clawgym env (``python -m envs list``)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Its constructor arguments (``--env.taskset.env-kwargs '{"high": 10}'``)."""
    task_ids: list[str] = Field(default_factory=list)
    """The tasks to pose; empty: every task of the env's catalog (``task_ids()``)."""
    seeds: int = Field(100, ge=1)
    """Tasks posed by seed (0, 1, ...) when the env has no catalog (its tasks are generated)."""


class ClawgymTask(vf.Task[ClawgymData]):
    pass


class ClawgymTaskset(vf.Taskset[ClawgymTask, ClawgymTasksetConfig]):
    """The env's tasks, in catalog order; task ``i`` is reset with seed ``i``."""

    def load(self) -> Iterator[ClawgymTask]:
        config = self.config
        env_id = resolve(config.env)
        probe = make(env_id, **config.env_kwargs)  # constructors are cheap: no sandbox starts
        try:
            if not isinstance(probe.unwrapped, ClawEnv):
                raise TypeError(f"{env_id} is not a clawgym env ({type(probe.unwrapped).__name__})")
            task_ids = list(config.task_ids) or probe.unwrapped.task_ids()
        finally:
            probe.close()
        common = {"env": env_id, "env_kwargs": dict(config.env_kwargs)}
        if task_ids:
            for seed, task_id in enumerate(task_ids):
                yield ClawgymTask(ClawgymData(id=task_id, name=task_id, task_id=task_id, seed=seed, **common),
                                  config.task)
        else:
            for seed in range(config.seeds):
                yield ClawgymTask(ClawgymData(name=f"{env_id}#seed{seed}", seed=seed, **common), config.task)


class ClawgymEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The seat the model plays (``--env.player.*``). Its harness runs in this process and
    executes nothing (the clawgym env runs the tools, in its own sandbox), so it needs no box."""


def to_action(message: vf.AssistantMessage) -> Message:
    """A model reply as the clawgym action: an assistant message with its tool calls."""
    action: Message = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        action["tool_calls"] = [{"id": call.id, "type": "function",
                                 "function": {"name": call.name, "arguments": call.arguments}}
                                for call in message.tool_calls]
    return action


def reply_of(segment: vf.Segment) -> vf.AssistantMessage:
    """The model's reply in a segment (the harness makes one call per segment)."""
    for message in reversed(segment.messages):
        if isinstance(message, vf.AssistantMessage):
            return message
    raise RuntimeError("the turn returned no assistant message")


class ClawgymEnv(vf.Env[ClawgymEnvConfig]):
    """One task, one clawgym episode: the env is the run's user (see the module docstring)."""

    async def run(self, task: ClawgymTask, agents: vf.Agents) -> None:
        data = task.data
        env = await asyncio.to_thread(make, data.env, **data.env_kwargs)
        try:
            options = {"task_id": data.task_id} if data.task_id is not None else None
            opening, info = await asyncio.to_thread(env.reset, seed=data.seed, options=options)
            task = task.with_data(prompt=[parse_message(m) for m in opening], tools=info["tools"])
            rewards: list[float] = []
            metrics: list[dict[str, float]] = []
            stop_reason = None
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()  # the prompt (the env's opening) speaks first
                while not segment.terminated:
                    obs, reward, terminated, truncated, info = await asyncio.to_thread(
                        env.step, to_action(reply_of(segment)))
                    rewards.append(float(reward))
                    metrics.append(info.get("metrics", {}))
                    stop_reason = info.get("stop_reason")
                    if info.get("error"):
                        raise RuntimeError(f"the clawgym env failed (not the agent's fault): {info['error']}")
                    if terminated or truncated:
                        break
                    if not obs:
                        raise RuntimeError(f"{data.env} answered a step with no message and did not end the episode")
                    segment = await interaction.turn(obs)
            trace = interaction.trace
            trace.record_reward("env_return", sum(rewards))
            trace.record_metric("turns", len(rewards))
            if metrics:
                trace.record_metrics({f"first/{k}": v for k, v in metrics[0].items()})
                trace.record_metrics({f"last/{k}": v for k, v in metrics[-1].items()})
            trace.info.update(task_id=info["task_id"], stop_reason=stop_reason, step_rewards=rewards)
        finally:
            await asyncio.to_thread(env.close)


class ClawgymHarnessConfig(vf.HarnessConfig):
    pass


class ClawgymHarness(vf.Harness[ClawgymHarnessConfig]):
    """One chat-completions call per segment, made in this process through the rollout's
    interception endpoint, with the task's tools. Nothing runs in the runtime."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str,
                     secret: str, mcp_urls: dict[str, str], data: vf.TaskData,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        tools = data.tools if isinstance(data, ClawgymData) else []
        async with AsyncOpenAI(base_url=endpoint, api_key=secret) as client:
            await client.chat.completions.create(model=ctx.model, messages=messages,
                                                 **({"tools": tools} if tools else {}))
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def load_environment(env_id: str = "guess", *, env_kwargs: dict[str, Any] | None = None,
                     task_ids: list[str] | None = None, seeds: int = 100,
                     player: vf.AgentConfig | None = None) -> ClawgymEnv:
    """The verifiers environment over clawgym env ``env_id`` (what ``vf-eval
    clawgym-verifiers --env.taskset.env <env_id>`` loads): its taskset poses ``task_ids``
    (default: the env's catalog, or ``seeds`` seeds), ``player`` overrides the seat."""
    taskset = ClawgymTasksetConfig(id=TASKSET_ID, env=env_id, env_kwargs=env_kwargs or {},
                                   task_ids=task_ids or [], seeds=seeds)
    config = ClawgymEnvConfig(taskset=taskset, **({"player": player} if player is not None else {}))
    return vf.load_environment(config)
