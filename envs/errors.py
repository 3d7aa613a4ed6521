"""The errors clawgym raises, each with a message that says what to do."""

from __future__ import annotations

import gymnasium as gym


class ClawgymError(Exception):
    """Base of clawgym's own errors."""


class EnvError(ClawgymError):
    """Infrastructure failed (sandbox, browser, daemon): the episode is truncated with
    ``info["error"]`` and its trajectory is not trained on. Not the agent's fault."""


class EpisodeEndedError(ClawgymError, RuntimeError):
    """``step()`` after the episode terminated or was truncated."""

    def __init__(self) -> None:
        super().__init__("step() was called after the episode ended (terminated or truncated); "
                         "call reset() to start a new episode.")


class ResetNeeded(ClawgymError, gym.error.ResetNeeded, RuntimeError):
    """``step()`` before the first ``reset()`` (or after a reset that raised). Also a
    ``gymnasium.error.ResetNeeded``, so code written against Gymnasium catches it."""

    def __init__(self) -> None:
        super().__init__("step() was called before reset(); call reset() first.")
