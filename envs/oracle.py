"""Each env family's oracle: the ground-truth agent that plays one of its tasks through the env.

    from envs.oracle import FAMILIES, family_of
    oracle = FAMILIES[family_of("bfcl")]             # toolcall's: the ground-truth calls
    note = oracle.play(env, "simple_python_0", 0)    # one seeded episode, reset included

An oracle needs the env itself, not a vector of them: it reads the task (the gold patch, the
reference solution, the page's state, the possible answers) and acts through the env's tools
as an agent would. The oracles are the families' own, beside their envs, not copies
(:data:`FAMILIES`):

- ``terminal`` (suites terminal, intercode): the task's reference solution through ``bash``,
  its stdout submitted (:func:`envs.terminal.verify.reference_run`);
- ``swe``: the gold patch applied through ``str_replace_editor``, then ``submit``
  (:func:`envs.swe.verify.gold_run`);
- ``gui`` (suite miniwob): the scripted MiniWoB oracles, which exist for the default subset
  only (:data:`envs.gui.oracles.ORACLES`);
- ``toolcall`` (bfcl, bfcl_multi, tau2, toolmath): the ground-truth calls
  (:func:`envs.toolcall.oracle.play`).

The chat env has none: its hidden preferences are judged, not defined by one right answer.
Each family's modules are imported only when its oracle plays. :mod:`trainers.oracle_rollout`
records an oracle's episodes as a policy's rollout (``method=sft``'s demonstrations,
``benchmarks.run policy=oracle``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _terminal(env: Any, task_id: str, seed: int) -> None:
    from envs.terminal.verify import reference_run

    reference_run(env, task_id, seed=seed)


def _swe(env: Any, task_id: str, seed: int) -> None:
    from envs.swe.verify import gold_run

    gold_run(env, task_id, seed=seed)


def _gui(env: Any, task_id: str, seed: int) -> str | None:
    from envs.gui.oracles import run_oracle

    result = run_oracle(env, task_id, seed)
    if result.error or result.matches:
        return None
    return f"the env's reward {result.reward:g} differs from MiniWoB's own {result.miniwob_reward:g}"


def _gui_tasks() -> set[str]:
    from envs.gui.oracles import ORACLES

    return set(ORACLES)


def _toolcall(env: Any, task_id: str, seed: int) -> None:
    from envs.toolcall.oracle import play

    play(env, task_id, seed=seed)


@dataclass(frozen=True)
class FamilyOracle:
    play: Callable[[Any, str, int], str | None]
    """Plays one seeded episode of a task on an env (reset included); the episode is read from
    the env's steps, and what it returns is a note to print (miniwob: a reward that differs
    from MiniWoB's own) or None."""
    tasks: Callable[[], set[str]] | None = None
    """The task ids that have an oracle; None: every task of the family."""
    other_tasks: str = ""
    """What to do when a run names tasks without one."""


WITHOUT_ORACLE = {
    "chat": "a reply is judged against hidden preferences, so no single reply is the answer",
}
"""Why a family has no oracle, for the error and for ``suite=all``'s skipped list."""

FAMILIES: dict[str, FamilyOracle] = {
    "terminal": FamilyOracle(_terminal),
    "swe": FamilyOracle(_swe),
    "gui": FamilyOracle(_gui, _gui_tasks, "MiniWoB's default subset: drop env_kwargs.tasks=, "
                                                 "or name tasks among these"),
    "toolcall": FamilyOracle(_toolcall),
}
"""The oracle of each env family, keyed by the package of the env's entry point (``envs.<family>``)."""


def family_of(env: str) -> str:
    """``bfcl`` -> ``toolcall``: the package under ``envs`` that an env alias or id is built from."""
    import gymnasium as gym

    from envs.registration import resolve  # importing envs registers them

    module = gym.spec(resolve(env)).entry_point.partition(":")[0].split(".")
    return module[1] if module[0] == "envs" and len(module) > 1 else ".".join(module)
