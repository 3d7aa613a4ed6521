"""The simulated user: reads the assistant's reply and answers the way people do.

Both users get the programmatic verdict (which preferences the reply met, in the
persona's order) and answer with one message:

- :class:`ScriptedUser` thanks the assistant when every preference is met, and otherwise
  corrects the *first* unmet one ("Too long. Two sentences, please."). Phrasings are drawn
  with the env's ``np_random``, so the same seed gives the same words.
- :class:`LLMUser` asks a model behind an OpenAI-compatible endpoint to play the persona,
  told the verdict so its reaction agrees with the metrics. It uses the standard library
  only (``urllib``); a timeout, refused connection or malformed answer raises
  :class:`envs.EnvError`, which the env reports as an infrastructure failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from envs.chat.catalog import Persona
from envs.chat.preferences import Preference
from envs.endpoint import completion_text
from envs.messages import Message, text_of

DEFAULT_PRAISE = (
    "Perfect, thanks.",
    "That's exactly what I needed. Thank you.",
    "Great, that works for me. Thanks.",
    "Thanks, that's just right.",
    "Nice, thank you. That's how I like it.",
)


@dataclass(frozen=True)
class Verdict:
    """Which of the episode's preferences a reply met, in the order they are checked."""

    preferences: tuple[Preference, ...]
    met: tuple[bool, ...]

    @property
    def all_met(self) -> bool:
        return all(self.met)

    @property
    def first_unmet(self) -> Preference | None:
        return next((p for p, ok in zip(self.preferences, self.met) if not ok), None)

    def as_dict(self) -> dict[str, bool]:
        return {p.kind: ok for p, ok in zip(self.preferences, self.met)}


def judge(preferences: Sequence[Preference], response: str) -> Verdict:
    """Check every preference against ``response``."""
    return Verdict(tuple(preferences), tuple(p.check(response) for p in preferences))


class SimulatedUser(Protocol):
    """Writes the user's next message, given the verdict on the assistant's last reply."""

    def reply(self, persona: Persona, conversation: Sequence[Message],
              verdict: Verdict, rng: np.random.Generator) -> str: ...


def _pick(options: Sequence[str], rng: np.random.Generator) -> str:
    return options[int(rng.integers(len(options)))]


class ScriptedUser:
    """Praise when every preference is met, else a correction for the first unmet one."""

    def reply(self, persona: Persona, conversation: Sequence[Message],
              verdict: Verdict, rng: np.random.Generator) -> str:
        unmet = verdict.first_unmet
        if unmet is None:
            return _pick(persona.praise or DEFAULT_PRAISE, rng)
        return _pick(unmet.corrections, rng)


_LLM_INSTRUCTIONS = (
    "You are role-playing a person chatting with an AI assistant. Stay in character and "
    "write only that person's next message: one or two short sentences, no quotes, no "
    "labels. The assistant does not know the person's preferences; never list them all.")


class LLMUser:
    """A model plays the persona through ``POST {endpoint}/chat/completions``.

    Arguments:
        endpoint: an OpenAI-compatible base URL, e.g. ``http://localhost:30000/v1``.
        model: the model name the endpoint serves.
        timeout_s: seconds to wait for the answer before giving up with :class:`envs.EnvError`.
        api_key: sent as a bearer token when given (local servers seldom need one).
        temperature: sampling temperature of the user model; its seed comes from the env.
    """

    def __init__(self, endpoint: str, model: str, *, timeout_s: float = 60.0,
                 api_key: str | None = None, temperature: float = 0.7) -> None:
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.temperature = temperature

    def prompt(self, persona: Persona, conversation: Sequence[Message],
               verdict: Verdict) -> list[Message]:
        """The messages sent to the user model (exposed for tests and debugging)."""
        wants = "\n".join(f"- {p.describe()}" for p in persona.preferences)
        system = (f"{_LLM_INSTRUCTIONS}\n\nWho you are: {persona.description}\n\n"
                  f"How you like answers (hidden from the assistant):\n{wants}")
        lines = [f"{'You' if m['role'] == 'user' else 'Assistant'}: {text_of(m)}"
                 for m in conversation if m["role"] in ("user", "assistant")]
        unmet = verdict.first_unmet
        if unmet is None:
            task = ("The assistant's last reply met all your preferences. Thank it briefly, "
                    "in your own words.")
        else:
            task = (f"The assistant's last reply did not meet this preference: {unmet.describe()} "
                    "Tell it so in your own words, as this person would, and ask it to fix that.")
        user = "The conversation so far:\n\n" + "\n\n".join(lines) + f"\n\n{task}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def reply(self, persona: Persona, conversation: Sequence[Message],
              verdict: Verdict, rng: np.random.Generator) -> str:
        body = {"model": self.model, "temperature": self.temperature, "max_tokens": 200,
                "seed": int(rng.integers(1 << 31)),
                "messages": self.prompt(persona, conversation, verdict)}
        return completion_text(self.url, body, api_key=self.api_key, timeout_s=self.timeout_s)
