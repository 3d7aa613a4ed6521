"""GuessNumber: the smallest complete clawgym env, for tests, tutorials and smoke runs."""

from __future__ import annotations

from typing import Any

from envs.core import ClawEnv, Opening, StopReason, Transition
from envs.messages import AssistantTurn, tool_schema


class GuessNumberEnv(ClawEnv):
    """Guess a secret integer with a ``guess`` tool; the env answers higher or lower.

    ## Description
    The env draws a secret integer in ``[low, high]``. Each turn the agent calls
    ``guess(number)`` and gets back ``higher``, ``lower`` or ``correct``. Binary search
    solves the default range in at most 7 turns; a random agent rarely does.

    ## Observation
    Reset: a system message (rules) and a user message (the range). Step: one ``tool``
    message per tool call, or a ``user`` reminder when the turn had no tool call.

    ## Action
    An assistant message calling ``guess`` with ``{"number": int}``.

    ## Reward
    1.0 on the turn the secret is guessed, else 0.0.

    ## Episode End
    Terminated (``solved``) on a correct guess. Truncated (``max_turns``) after
    ``max_turns`` turns.

    ## Arguments
    ``low``, ``high`` (the range, default 1..100), ``max_turns`` (default 10), and the
    :class:`ClawEnv` arguments. ``options={"task_id": "guess-42"}`` fixes the secret.

    ## Version History
    v0: initial version.
    """

    tools = [tool_schema("guess", "Guess the secret number.",
                         {"number": {"type": "integer", "description": "your guess"}})]

    def __init__(self, low: int = 1, high: int = 100, max_turns: int = 10, **kwargs: Any) -> None:
        if low > high:
            raise ValueError(f"low must be <= high, got low={low}, high={high}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.low, self.high = low, high
        self._secret = low

    def task_ids(self) -> list[str]:
        return [f"guess-{n}" for n in range(self.low, self.high + 1)]

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if task_id is None:
            self._secret = int(self.np_random.integers(self.low, self.high + 1))
        else:
            try:
                self._secret = int(task_id.removeprefix("guess-"))
            except ValueError:
                raise ValueError(f"task_id must look like 'guess-<n>', got {task_id!r}") from None
            if not self.low <= self._secret <= self.high:
                raise ValueError(f"task {task_id!r} is outside the range {self.low}..{self.high}")
        messages = [
            {"role": "system", "content": "You are playing a guessing game. Call the `guess` "
                                          "tool with an integer; you will hear higher or lower."},
            {"role": "user", "content": f"I picked an integer between {self.low} and {self.high}. "
                                        "Find it in as few guesses as you can."},
        ]
        return Opening(messages, task_id=f"guess-{self._secret}")

    def _act(self, turn: AssistantTurn) -> Transition:
        if not turn.tool_calls:
            return Transition([{"role": "user", "content": "Call the `guess` tool with a number."}])
        replies, solved = [], False
        for call in turn.tool_calls:
            value = call.arguments.get("number")
            if isinstance(value, bool) or not isinstance(value, int):
                answer = f"Error: `number` must be an integer, got {value!r}."
            elif value == self._secret:
                answer, solved = "correct", True
            else:
                answer = "higher" if value < self._secret else "lower"
            replies.append({"role": "tool", "tool_call_id": call.id, "content": answer})
        return Transition(replies, reward=1.0 if solved else 0.0,
                          stop=StopReason.SOLVED if solved else None,
                          metrics={"solved": float(solved)})
