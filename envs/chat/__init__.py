"""The personal-chat family: a simulated user with hidden preferences about the form of a
reply (length, format, wording, naming) reacts to the agent's answer, and the agent learns
those preferences from the reaction. ``clawgym/Chat-v0`` (alias ``chat``).

    env = envs.make("chat", persona="student")
    obs, info = env.reset(seed=0)            # [system, user request]
    obs, reward, terminated, truncated, info = env.step("Sure, Sam. Two minutes.")
"""

from __future__ import annotations

from envs.chat.catalog import CatalogError, Persona, Request, load_personas, load_requests
from envs.chat.env import PersonalChatEnv
from envs.chat.preferences import PREFERENCE_KINDS, Preference, build_preference

__all__ = ["PREFERENCE_KINDS", "CatalogError", "PersonalChatEnv", "Persona", "Preference",
           "Request", "build_preference", "load_personas", "load_requests"]
