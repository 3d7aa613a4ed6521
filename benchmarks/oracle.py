"""``policy=oracle``: each family's own ground-truth agent, played through ``benchmarks.run``.

    python -m benchmarks.run suite=swe policy=oracle              # the gold patch, through the editor
    python -m benchmarks.run suite=all policy=oracle tasks=20     # every suite that has an oracle

The oracles are the env families' own (:mod:`envs.oracle`: the reference solution, the gold
patch, the MiniWoB scripts, the ground-truth calls), played in in-process envs and recorded as
a policy's episodes (:func:`trainers.oracle_rollout.play_episodes`); the results files, the
resumable episode log and the summary are then the same as for a model. This module holds
what is the benchmark's own: which suites have an oracle, refusing those without one by
name, tau2's user (the scripted one unless ``env_kwargs.user=`` says otherwise, since there
is no model to play it) and the player that stands where a policy would. An oracle that raises counts as a
failure (``stop_reason`` ``oracle_failed``) and its message is printed, as is a MiniWoB
episode whose env reward differs from MiniWoB's own ``WOB_RAW_REWARD_GLOBAL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envs.messages import Message
from envs.oracle import FAMILIES, WITHOUT_ORACLE, FamilyOracle, family_of
from trainers.config import ConfigError

if TYPE_CHECKING:  # annotations only: agents.policy loads torch, and benchmarks.run imports this module
    from agents.policy import Completion
    from benchmarks.run import Suite


def suites_with_oracle(suites: dict[str, Suite]) -> list[str]:
    """The names of ``suites`` (``benchmarks.run.SUITES``) whose env family has an oracle."""
    return [name for name, suite in suites.items() if family_of(suite.env) in FAMILIES]


def why_no_oracle(suite: str, suites: dict[str, Suite]) -> str:
    """Why ``suite`` has no oracle, in a few words."""
    family = family_of(suites[suite].env)
    return WITHOUT_ORACLE.get(family, f"no oracle is written for the {family} env family")


def family_oracle(suite: str, suites: dict[str, Suite]) -> FamilyOracle:
    """The oracle of ``suite``'s family, or a ConfigError naming the suites that have one."""
    oracle = FAMILIES.get(family_of(suites[suite].env))
    if oracle is None:
        raise ConfigError(f"suite={suite} has no oracle ({why_no_oracle(suite, suites)}); policy=oracle "
                          f"runs on {', '.join(suites_with_oracle(suites))}")
    return oracle


def env_overrides(suite_kwargs: dict[str, Any], env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Env arguments the oracle needs: tau2's user is scripted (or the endpoint of
    ``env_kwargs.user_endpoint=``), as no evaluated model is there to play it."""
    if suite_kwargs.get("user") != "policy":
        return {}
    if env_kwargs.get("user") == "policy":
        raise ConfigError("env_kwargs.user=policy has the evaluated model play tau2's user, and policy=oracle "
                          "has none; drop it (a scripted user) or pass env_kwargs.user_endpoint= and user_model=")
    if "user" in env_kwargs:
        return {}
    return {"user": "endpoint" if env_kwargs.get("user_endpoint") else "scripted"}


def check_tasks(suite: str, suites: dict[str, Suite], task_ids: list[str]) -> None:
    """A ConfigError if a task of the run has no oracle, naming those and the ones that do."""
    oracle = family_oracle(suite, suites)
    if oracle.tasks is None:
        return
    have = oracle.tasks()
    missing = [t for t in task_ids if t not in have]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ConfigError(f"policy=oracle: {len(missing)} task{'s' if len(missing) > 1 else ''} of suite={suite} "
                          f"{'have' if len(missing) > 1 else 'has'} no oracle ({shown}); the tasks with one are "
                          f"{', '.join(sorted(have))} ({oracle.other_tasks})")


class OraclePlayer:
    """What ``benchmarks.run`` holds where a policy would be: the oracle writes no replies from
    a prompt, it acts through the env (:func:`trainers.oracle_rollout.play_episodes`)."""

    weight_version = 0

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None,
                 sampling: object) -> list[Completion]:
        raise TypeError("the oracle acts through the env, not from a prompt; "
                        "play it with trainers.oracle_rollout.play_episodes")
