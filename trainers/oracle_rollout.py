"""Episodes played by an env family's oracle (:mod:`envs.oracle`), recorded as a policy's rollout.

    for episode, note in play_episodes("bfcl", {"split": "train"}, jobs, parallel=4):
        ...   # a trainers.rollout.Episode; note: what the oracle had to say, or None

An oracle needs the env itself, not a vector of them, so each episode is played in an
in-process env, ``parallel`` envs at once, each made, used and closed in one worker thread
(Playwright's driver belongs to its thread), and becomes a :class:`trainers.rollout.Episode`
like a policy's: the oracle's messages are the completions, the env's ``next_state`` follows
each, the last info is ``final_info``. ``method=sft`` learns from these episodes
(``demos=oracle``), and ``benchmarks.run policy=oracle`` writes the same results files, the
resumable episode log and the summary as for a model.

An episode whose env fails (``EnvError``) is an env error as for a model; an oracle that
raises (it found no element, the patch did not parse) counts as a failure, ``stop_reason``
``oracle_failed``, with its message as the episode's note.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from envs.core import ClawEnv
from envs.errors import EnvError
from envs.messages import Message
from envs.oracle import FAMILIES, FamilyOracle, family_of

if TYPE_CHECKING:  # it loads torch (agents.policy does): only once episodes are played
    from trainers.rollout import Episode, Job


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
