"""clawgym environments: one ``reset``/``step`` contract for terminal, GUI, SWE, tool-call
and personal-chat agents, with a Gymnasium registry, a checker, vector envs and sandboxes.

    import envs, gymnasium
    env = gymnasium.make("clawgym/GuessNumber-v0")      # or envs.make("guess")
    vec = envs.make_vec("guess", num_envs=8)            # thread backend by default
"""

from __future__ import annotations

from envs.checker import check_env
from envs.core import RESERVED_INFO_KEYS, ClawEnv, Opening, StopReason, Transition
from envs.errors import ClawgymError, EnvError, EpisodeEndedError, ResetNeeded
from envs.messages import AssistantTurn, InvalidAction, Message, ToolCall, tool_schema
from envs.registration import entries, load_plugins, make, register, register_builtin, resolve
from envs.spaces import ConversationSpace, MessageSpace
from envs.vector import BACKENDS, VectorEnv, make_vec

register_builtin()
load_plugins()

__all__ = [
    "BACKENDS", "RESERVED_INFO_KEYS", "AssistantTurn", "ClawEnv", "ClawgymError",
    "ConversationSpace", "EnvError", "EpisodeEndedError", "InvalidAction", "Message",
    "MessageSpace", "Opening", "ResetNeeded", "StopReason", "ToolCall", "Transition",
    "VectorEnv", "check_env", "entries", "make", "make_vec", "register", "resolve",
    "tool_schema",
]
