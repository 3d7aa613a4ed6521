"""Rollout collection: a vector env and a policy play episodes, turn by turn.

Jobs (one per episode) run in waves of ``vec.num_envs``. Every step of a wave generates
for all active members in one batch (rollouts are decode-bound: batch them wide), then
steps the vector env with ``None`` for members whose episode ended, so a GRPO group's
finished members wait for the rest. Each turn keeps the exact prompt and completion ids,
log-probs and weight version the policy returned, plus the next state it led to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.policy import Completion, SamplingParams
from envs.messages import Message
from envs.vector import VectorEnv

if TYPE_CHECKING:
    from trainers.progress import EpisodeProgress


@dataclass
class Turn:
    context: list[Message]
    """The messages the policy saw (its prompt)."""
    tools: list[dict[str, Any]]
    completion: Completion
    next_state: str
    next_role: str
    env_reward: float
    metrics: dict[str, float]
    index: int
    """0 for the episode's first turn."""
    judge_score: int | None = None
    hint: str | None = None
    reward: float = 0.0
    teacher_reward: float | None = None
    """``opd_gate=replay``: the teacher's own reply to this turn, replayed, scored as the run
    scores a turn (``reward=``: the env's reward, the judge's score of the replayed next
    state, or both), so comparable with ``reward`` (None: not checked, or the replay could
    not reach the turn)."""


@dataclass
class Episode:
    task_id: str
    group: int
    turns: list[Turn] = field(default_factory=list)
    stop_reason: str = ""
    error: str | None = None
    """Infrastructure failure: the episode is reported, never trained on."""
    final_info: dict[str, Any] = field(default_factory=dict)
    """The info of the episode's last step (e.g. the SWE env's ``model_patch`` and ``grade``)."""
    job: Job | None = None
    """What it was played for (task and reset seed): with the turns' replies, what
    :func:`replay` needs to bring a deterministic env back to any of its turns."""

    @property
    def env_return(self) -> float:
        return sum(t.env_reward for t in self.turns)

    @property
    def reward_return(self) -> float:
        return sum(t.reward for t in self.turns)


@dataclass
class RolloutTimes:
    """Where a rollout's wall time went: in the policy's ``generate`` calls and in the
    vector env's ``reset`` and ``step`` calls (the rest is building prompts and turns)."""

    generate_s: float = 0.0
    env_s: float = 0.0


@dataclass(frozen=True)
class Job:
    group: int
    task_id: str | None
    seed: int


def collect(vec: VectorEnv, policy: Any, jobs: list[Job], sampling: SamplingParams,
            max_turns: int | None = None, times: RolloutTimes | None = None,
            progress: EpisodeProgress | None = None) -> list[Episode]:
    """Play every job to the end (or ``max_turns`` turns) and return its episode; ``times``,
    when given, is added to with the seconds spent generating and in the env; ``progress``,
    when given, is told of each wave's reset and, after every vector step, of the turns
    played and the episodes ended."""
    times = RolloutTimes() if times is None else times
    episodes: list[Episode] = []
    for start in range(0, len(jobs), vec.num_envs):
        episodes.extend(_wave(vec, policy, jobs[start : start + vec.num_envs], sampling, max_turns, times, progress))
    return episodes


def _wave(vec: VectorEnv, policy: Any, wave: list[Job], sampling: SamplingParams,
          max_turns: int | None, times: RolloutTimes, progress: EpisodeProgress | None) -> list[Episode]:
    members = list(range(len(wave)))
    options = [{"task_id": j.task_id} if j.task_id is not None else None for j in wave]
    seeds = [j.seed for j in wave]
    pad = vec.num_envs - len(wave)
    if progress is not None:
        progress.starting(len(wave))
    begun = time.perf_counter()
    obs, infos = vec.reset(seed=seeds + [None] * pad, options=options + [None] * pad, indices=members)
    times.env_s += time.perf_counter() - begun
    episodes = [Episode(task_id=str(infos[i].get("task_id", wave[i].task_id)), group=wave[i].group,
                        job=wave[i]) for i in members]
    histories: list[list[Message]] = [list(obs[i] or []) for i in members]
    tools = [infos[i].get("tools") or [] for i in members]
    live = []
    for i in members:
        if obs[i] is None:
            episodes[i].error = infos[i].get("error", "reset failed")
            episodes[i].stop_reason = "error"
        else:
            live.append(i)
    if progress is not None:
        progress.advance(0, len(wave) - len(live))
    while live:
        begun = time.perf_counter()
        completions = policy.generate([histories[i] for i in live], [tools[i] for i in live], sampling)
        times.generate_s += time.perf_counter() - begun
        actions: list[Any] = [None] * vec.num_envs
        for i, c in zip(live, completions):
            actions[i] = c.message
        begun = time.perf_counter()
        new_obs, rewards, terminated, truncated, step_infos = vec.step(actions)
        times.env_s += time.perf_counter() - begun
        still = []
        for i, c in zip(live, completions):
            info = step_infos[i]
            # histories[i] is rebuilt (never mutated) each turn, so the turn can keep it as is.
            turn = Turn(context=histories[i], tools=tools[i], completion=c,
                        next_state=info.get("next_state", ""), next_role=_role(new_obs[i]),
                        env_reward=float(rewards[i]), metrics=dict(info.get("metrics", {})),
                        index=len(episodes[i].turns))
            episodes[i].turns.append(turn)
            histories[i] = histories[i] + [c.message] + list(new_obs[i] or [])
            if info.get("tools") is not None:  # the env changed the tool list (BFCL miss-func turns)
                tools[i] = list(info["tools"])
            if terminated[i] or truncated[i]:
                episodes[i].final_info = dict(info)
                episodes[i].stop_reason = info.get("stop_reason", "")
                episodes[i].error = info.get("error")
            elif max_turns is not None and len(episodes[i].turns) >= max_turns:
                episodes[i].stop_reason = "cut"  # evaluation stops early; the next reset ends it
            else:
                still.append(i)
        if progress is not None:
            progress.advance(len(live), len(live) - len(still))
        live = still
    return episodes


@dataclass(frozen=True)
class Replay:
    """Another reply to one turn of an episode: the env is reset as the episode was, the
    episode's own replies before that turn are stepped again, then ``message``."""

    episode: Episode
    turn: int
    message: Message


@dataclass(frozen=True)
class Replayed:
    """What the env did with a replay's message: its reward and the next state, as a
    rollout's :class:`Turn` records them (what a judge reads)."""

    env_reward: float
    next_state: str
    next_role: str


def replay(vec: VectorEnv, replays: list[Replay], times: RolloutTimes | None = None) -> list[float | None]:
    """The env's reward for each replay's message, or None where the replay could not
    reach its turn (:func:`replay_steps`)."""
    return [None if r is None else r.env_reward for r in replay_steps(vec, replays, times)]


def replay_steps(vec: VectorEnv, replays: list[Replay], times: RolloutTimes | None = None) -> list[Replayed | None]:
    """The env's step on each replay's message, or None where the replay could not
    reach its turn (an error, or the episode ending earlier than it did: an env whose
    states a seed and the replies do not fix). Waves of ``vec.num_envs``, every member
    stepped in lockstep; no model call. A member left mid-episode is reset by the next
    rollout or replay like any other."""
    times = RolloutTimes() if times is None else times
    out: list[Replayed | None] = []
    for start in range(0, len(replays), vec.num_envs):
        out.extend(_replay_wave(vec, replays[start : start + vec.num_envs], times))
    return out


def _replay_wave(vec: VectorEnv, wave: list[Replay], times: RolloutTimes) -> list[Replayed | None]:
    members = list(range(len(wave)))
    pad = vec.num_envs - len(wave)
    begun = time.perf_counter()
    jobs: list[Job] = []
    for r in wave:
        if r.episode.job is None:
            raise ValueError("replay needs an episode from collect(): without its job it cannot be reset as it was")
        jobs.append(r.episode.job)
    obs, _infos = vec.reset(seed=[j.seed for j in jobs] + [None] * pad,
                            options=[{"task_id": j.task_id} if j.task_id is not None else None for j in jobs]
                            + [None] * pad, indices=members)
    out: list[Replayed | None] = [None] * len(wave)
    live = [i for i in members if obs[i] is not None]
    k = 0
    while live:
        actions: list[Any] = [None] * vec.num_envs
        for i in live:
            r = wave[i]
            actions[i] = r.message if k == r.turn else r.episode.turns[k].completion.message
        new_obs, step_rewards, terminated, truncated, step_infos = vec.step(actions)
        still = []
        for i in live:
            if step_infos[i].get("error"):
                continue
            if k == wave[i].turn:
                out[i] = Replayed(float(step_rewards[i]), step_infos[i].get("next_state", ""), _role(new_obs[i]))
            elif not (terminated[i] or truncated[i]):
                still.append(i)
        live, k = still, k + 1
    times.env_s += time.perf_counter() - begun
    return out


def _role(messages: list[Message] | None) -> str:
    if not messages:
        return "env"
    return str(messages[-1].get("role", "env"))
