"""Any clawgym env as a SkyRL-gym ``BaseTextEnv``, registered with ``skyrl_gym.register``.

Importing this module registers the id ``clawgym`` (:data:`SKYRL_ID`) in SkyRL-gym's
registry, so ``skyrl_gym.make("clawgym", env_config=..., extras=...)`` gives a
:class:`ClawgymTextEnv` over the clawgym env that ``env`` names. SkyRL's generator makes one
env per trajectory that way, with ``env_config`` from its ``skyrl_gym.<env_class>`` config
block and ``extras`` from the dataset row; a key in ``extras`` wins over ``env_config``:

``env``
    The clawgym env: an alias (``guess``), an id (``clawgym/GuessNumber-v0``) or
    ``module:id`` (see :func:`envs.registration.resolve`). Required.
``env_kwargs``
    Constructor arguments of that env (``{"low": 1, "high": 50}``).
``task_id``, ``seed``
    What ``reset`` gets: ``options={"task_id": ...}`` and ``seed`` (both optional).
``max_turns``
    SkyRL's generator sets it on every trajectory; it becomes the env's own ``max_turns``
    (every clawgym env takes it), so the env truncates the episode there as SkyRL expects.
``tools_in_prompt``
    SkyRL's generator renders the conversation with the tokenizer's chat template and no
    ``tools=``, so a model would never see the env's tool schemas. By default (true)
    ``init`` appends them to the system message in the Hermes format that Qwen and
    SmolLM2 templates use, with the ``<tool_call>`` convention the env parses a text
    action by. False leaves the opening messages exactly as the env sent them.

What is carried: the env's opening messages (``init``; the dataset row's own prompt is
not used: the env poses the task), each text action as the env's ``step`` parses it
(``<tool_call>`` blocks become tool calls), the new messages as observations (``tool``
messages keep their ``tool_call_id``), the env's per-step reward, ``done`` as
``terminated or truncated``, and ``info`` (``task_id``, ``stop_reason``, ``metrics``,
``next_state``, ``error``) as ``metadata``. ``get_metrics`` gives the env's metrics of the
first and last turn (``first/<k>``, ``last/<k>``), the episode's return and turns.
Not carried: token ids (SkyRL tokenizes itself), images in observations (a text env
interface), and terminated vs truncated (SkyRL has one ``done``; ``metadata`` keeps
``stop_reason``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from envs.core import ClawEnv
from envs.messages import Message
from envs.registration import make, resolve

SKYRL_ID = "clawgym"
"""The id this module registers in SkyRL-gym's registry."""
ENTRY_POINT = "envs.interop.skyrl_gym:ClawgymTextEnv"
_KEYS = ("env", "env_kwargs", "task_id", "seed", "max_turns", "tools_in_prompt")
_INFO_KEYS = ("task_id", "stop_reason", "metrics", "next_state", "error")


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The env's tool schemas as the Hermes tool section of a system prompt."""
    schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{schemas}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def with_tools(messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
    """``messages`` with :func:`tools_block` appended to the system message (or a system
    message holding it put first, where the env opens without one)."""
    if not tools:
        return messages
    block = tools_block(tools)
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def _settings(env_config: Mapping[str, Any] | None, extras: Mapping[str, Any] | None) -> dict[str, Any]:
    """``env_config`` overlaid by ``extras``, keeping only the keys this adapter reads."""
    settings: dict[str, Any] = {}
    for source, what in ((env_config, "env_config"), (extras, "extras")):
        if source is None:
            continue
        if not isinstance(source, Mapping):  # an omegaconf DictConfig is a Mapping
            raise TypeError(f"{what} must be a mapping, got {type(source).__name__}")
        settings.update({k: source[k] for k in _KEYS if k in source})
    if not isinstance(settings.get("env"), str) or not settings["env"]:
        raise ValueError("ClawgymTextEnv needs `env`, the clawgym env to run (an alias such as "
                         "'guess' or an id; `python -m envs list` shows them), in the dataset "
                         "row's extras or the env_config")
    return settings


class ClawgymTextEnv(BaseTextEnv):
    """A clawgym env behind SkyRL-gym's text interface; the module docstring says what is
    carried. Constructed by ``skyrl_gym.make("clawgym", env_config=..., extras=...)``."""

    def __init__(self, env_config: Mapping[str, Any] | None = None,
                 extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = _settings(env_config, extras)
        self.env_id = resolve(settings["env"])
        kwargs = dict(settings.get("env_kwargs") or {})
        if settings.get("max_turns") is not None:
            kwargs["max_turns"] = int(settings["max_turns"])
        self.env = make(self.env_id, **kwargs)
        if not isinstance(self.env.unwrapped, ClawEnv):
            raise TypeError(f"{self.env_id} is not a clawgym env ({type(self.env.unwrapped).__name__})")
        self.max_turns = self.env.unwrapped.max_turns
        self.task_id: str | None = settings.get("task_id")
        self.seed: int | None = settings.get("seed")
        self.tools_in_prompt = bool(settings.get("tools_in_prompt", True))
        self.tools: list[dict[str, Any]] = []
        self.env_return = 0.0
        self._first_metrics: dict[str, float] = {}
        self._last_metrics: dict[str, float] = {}

    def init(self, prompt: list[Message] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Reset the env; return its opening messages (``prompt``, the dataset row's, is not
        used) and ``{"task_id", "tools"}``."""
        options = {"task_id": self.task_id} if self.task_id is not None else None
        messages, info = self.env.reset(seed=self.seed, options=options)
        self.turns, self.env_return = 0, 0.0
        self._first_metrics, self._last_metrics = {}, {}
        self.tools = info.get("tools", [])
        if self.tools_in_prompt:
            messages = with_tools(messages, self.tools)
        return messages, {"task_id": info["task_id"], "tools": self.tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model output through the env's ``step``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.env_return += reward
        metrics = info.get("metrics", {})
        if self.turns == 1:
            self._first_metrics = dict(metrics)
        self._last_metrics = dict(metrics)
        return BaseTextEnvStepOutput(observations=obs, reward=reward, done=terminated or truncated,
                                     metadata={k: info[k] for k in _INFO_KEYS if k in info})

    def get_metrics(self) -> dict[str, Any]:
        return {"env_return": self.env_return, "turns": self.turns,
                **{f"first/{k}": v for k, v in self._first_metrics.items()},
                **{f"last/{k}": v for k, v in self._last_metrics.items()}}

    def close(self) -> None:
        self.env.close()


def register(skyrl_id: str = SKYRL_ID) -> str:
    """Register :class:`ClawgymTextEnv` in SkyRL-gym's registry as ``skyrl_id`` (done for
    ``clawgym`` when this module is imported); a second call for the same id is a no-op."""
    if skyrl_id not in skyrl_gym.registry:
        skyrl_gym.register(id=skyrl_id, entry_point=ENTRY_POINT)
    elif (known := skyrl_gym.registry[skyrl_id].entry_point) != ENTRY_POINT:
        raise ValueError(f"SkyRL-gym id {skyrl_id!r} already names {known!r}; "
                         "register clawgym's adapter under another id")
    return skyrl_id


register()
