"""``policy=oracle``: each family's own ground-truth agent, played through ``benchmarks.run``.

    python -m benchmarks.run suite=swe policy=oracle              # the gold patch, through the editor
    python -m benchmarks.run suite=all policy=oracle tasks=20     # every suite that has an oracle

An oracle needs the env itself, not a vector of them: it reads the task (the gold patch, the
reference solution, the page's state, the possible answers) and acts through the env's tools
as an agent would. So each episode is played in an in-process env, ``parallel`` envs at once,
each made, used and closed in one worker thread (Playwright's driver belongs to its thread),
and becomes a :class:`trainers.rollout.Episode` like a policy's: the oracle's messages are
the completions, the env's ``next_state`` follows each, the last info is ``final_info``. The
results files, the resumable episode log and the summary are then the same as for a model.

The oracles themselves are the families' own, not copies (:data:`FAMILIES`):

- ``terminal`` (suites terminal, intercode): the task's reference solution through ``bash``,
  its stdout submitted (:func:`envs.terminal.verify.reference_run`);
- ``swe``: the gold patch applied through ``str_replace_editor``, then ``submit``
  (:func:`envs.swe.verify.gold_run`);
- ``gui`` (suite miniwob): the scripted MiniWoB oracles, which exist for the default subset
  only (:data:`envs.gui.oracles.ORACLES`);
- ``toolcall`` (bfcl, bfcl_multi, tau2, toolmath): the ground-truth calls
  (:func:`envs.toolcall.oracle.play`); tau2's user is the scripted one unless
  ``env_kwargs.user=`` says otherwise, since there is no model to play it.

The chat env has none: its hidden preferences are judged, not defined by one right answer.
An episode whose env fails (``EnvError``) is an env error as for a model; an oracle that
raises (it found no element, the patch did not parse) counts as a failure, ``stop_reason``
``oracle_failed``, and its message is printed, as is a MiniWoB episode whose env reward
differs from MiniWoB's own ``WOB_RAW_REWARD_GLOBAL``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envs.core import ClawEnv
from envs.errors import EnvError
from envs.messages import Message
from trainers.config import ConfigError

if TYPE_CHECKING:  # both load torch (agents.policy does): only once episodes are played
    from agents.policy import Completion
    from benchmarks.run import Suite
    from trainers.rollout import Episode, Job


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
    a prompt, it acts through the env (:func:`play_episodes`)."""

    weight_version = 0

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None,
                 sampling: object) -> list[Completion]:
        raise TypeError("the oracle acts through the env, not from a prompt; play it with play_episodes")


class Recorder:
    """An env seen through its oracle: calls pass through to ``env``, and each step becomes a
    turn of ``episode`` (the oracle's message as the completion, the env's ``next_state`` after it,
    and the messages and tools a policy would have been prompted with as its context)."""

    def __init__(self, env: ClawEnv, episode: Episode) -> None:
        # names of their own: the oracle reads the env's (toolcall's env.episode)
        self._recorded_env, self._recorded = env, episode
        self._history: list[Message] = []  # what a policy would have seen: its prompt (method=sft)
        self._tools: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        self._recorded.turns.clear()
        self._recorded.stop_reason, self._recorded.error, self._recorded.final_info = "", None, {}
        obs, info = self._recorded_env.reset(seed=seed, options=options)
        self._history, self._tools = list(obs), list(info.get("tools") or [])
        return obs, info

    def step(self, action: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        from agents.policy import Completion
        from trainers.rollout import Turn

        obs, reward, terminated, truncated, info = self._recorded_env.step(action)
        completion = Completion(message=action, text="", prompt_ids=[], completion_ids=[], logprobs=[],
                                weight_version=0, finish_reason="oracle", temperature=0.0)
        self._recorded.turns.append(Turn(context=self._history, tools=self._tools, completion=completion,
                                         next_state=info.get("next_state", ""),
                                         next_role=str(obs[-1].get("role", "env")) if obs else "env",
                                         env_reward=float(reward), metrics=dict(info.get("metrics", {})),
                                         index=len(self._recorded.turns)))
        self._history = self._history + [action] + list(obs or [])  # rebuilt, as trainers.rollout does
        if info.get("tools") is not None:
            self._tools = list(info["tools"])
        if terminated or truncated:
            self._recorded.final_info = dict(info)
            self._recorded.stop_reason = info.get("stop_reason", "")
            self._recorded.error = info.get("error")
        return obs, reward, terminated, truncated, info

    def __getattr__(self, name: str) -> Any:  # the oracle reads the task, the page, the episode
        return getattr(self._recorded_env, name)


def play_one(oracle: FamilyOracle, env: ClawEnv, job: Job) -> tuple[Episode, str | None]:
    """One seeded episode of ``job.task_id`` with ``oracle`` on ``env``; the episode and a note to
    print: the oracle's own failure when it raised, or what it had to say, else None."""
    from trainers.rollout import Episode

    episode = Episode(task_id=str(job.task_id), group=job.group)
    note = None
    try:
        note = oracle.play(Recorder(env, episode), str(job.task_id), job.seed)
    except EnvError as exc:
        episode.error = episode.error or f"{type(exc).__name__}: {exc}"
        episode.stop_reason = "error"
    except Exception as exc:  # noqa: BLE001  (the oracle's own failure: an unsolved episode, said aloud)
        note = f"the oracle failed: {type(exc).__name__}: {exc}"
        episode.stop_reason = episode.stop_reason or "oracle_failed"  # an ended episode keeps its own
    if not episode.stop_reason:
        episode.stop_reason = "cut"  # the oracle stopped before the episode ended
    return episode, note


def play_episodes(env_id: str, env_kwargs: dict[str, Any], jobs: list[Job],
                  parallel: int) -> Iterator[tuple[Episode, str | None]]:
    """Play ``jobs`` with the oracle of ``env_id``'s family in up to ``parallel`` envs at once, each
    in its own thread; yields ``(episode, note or None)`` (:func:`play_one`) as each episode ends. An env
    that cannot be made stops the run with its error."""
    import envs

    oracle = FAMILIES[family_of(env_id)]
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    done: queue.SimpleQueue[tuple[Episode, str | None] | BaseException | None] = queue.SimpleQueue()
    stop = threading.Event()

    def work() -> None:
        env = None
        try:
            env = envs.make(env_id, **env_kwargs).unwrapped
            while not stop.is_set():
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    break
                done.put(play_one(oracle, env, job))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller's thread, which raises it)
            done.put(exc)
        finally:
            if env is not None:
                env.close()
            done.put(None)

    workers = [threading.Thread(target=work, name=f"oracle-{i}", daemon=True)
               for i in range(max(1, min(parallel, len(jobs))))]
    for worker in workers:
        worker.start()
    try:
        running = len(workers)
        while running:
            item = done.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        for worker in workers:
            worker.join()
