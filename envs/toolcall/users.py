"""Models that play a simulated user: any OpenAI-compatible endpoint, or the local policy.

A :class:`UserModel` turns the user's prompt (a system message with its instructions and
the conversation with roles flipped: the agent speaks as ``user``) into the user's next
words. Two implementations:

- :class:`EndpointUser` asks ``POST {endpoint}/chat/completions`` with the standard
  library only (as ``envs.chat.user.LLMUser`` does); a timeout, refused connection or
  malformed answer raises :class:`envs.EnvError`, which the env reports as an
  infrastructure failure (``info["error"]``, not trained on).
- :class:`agents.policy_user.PolicyUser` asks an in-process policy (``generate(prompts,
  tools, sampling)``), e.g. the very model being trained or evaluated; it lives with the
  policies, as the envs know no policy.

A policy cannot travel through ``gymnasium.make`` keyword arguments (envs are made by
name, possibly in worker processes), so a trainer or benchmark that wants its own model
to play the users of the envs it makes in this process binds it first
(``bind_user(PolicyUser(policy))``); envs built with ``user="policy"`` (or ``"auto"``)
then use it.
"""

from __future__ import annotations

from typing import Protocol

from envs.endpoint import completion_text
from envs.messages import Message


class UserModel(Protocol):
    def reply(self, messages: list[Message], seed: int) -> str:
        """The user's next message for the prompt ``messages``; ``seed`` from the env."""
        ...


_bound: UserModel | None = None


def bind_user(user: UserModel | None) -> None:
    """Let envs made in this process with ``user="policy"``/``"auto"`` have ``user`` play
    their simulated user (``None`` unbinds)."""
    global _bound
    _bound = user


def bound_user() -> UserModel | None:
    """The bound user model, or None when none is bound."""
    return _bound


class EndpointUser:
    """A model behind an OpenAI-compatible endpoint plays the user.

    Arguments:
        endpoint: a base URL, e.g. ``http://localhost:30000/v1``.
        model: the model name the endpoint serves.
        timeout_s: seconds to wait before giving up with :class:`envs.EnvError`.
        api_key: sent as a bearer token when given.
        temperature: sampling temperature (tau2's default is 0).
        max_tokens: longest reply.
    """

    def __init__(self, endpoint: str, model: str, *, timeout_s: float = 60.0,
                 api_key: str | None = None, temperature: float = 0.0, max_tokens: int = 512) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"user_endpoint must be an http(s) base URL such as "
                             f"http://localhost:30000/v1, got {endpoint!r}")
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens

    def reply(self, messages: list[Message], seed: int) -> str:
        body = {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "seed": seed, "messages": messages}
        return completion_text(self.url, body, api_key=self.api_key, timeout_s=self.timeout_s)
