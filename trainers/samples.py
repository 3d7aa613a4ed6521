"""From scored episodes to training samples: per-token advantages for grpo, opd, combine.

- Per-turn reward ``r_t``: the env's reward, the judge's score, or ``r_env + prm_coef * r_judge``.
- GRPO: an episode's return ``R_i = sum_t r_t``; the G episodes of one task form a group,
  ``A_i = (R_i - mean R) / (std R + 1e-6)``, broadcast to every token of every turn of
  episode i. A group whose returns are all equal is skipped (no signal), not padded.
- OPD: a turn with a hint gets ``A_t = clip(logpi_teacher(a_t | s + hint) - logpi_old(a_t | s))``,
  the teacher being the base model (adapter off) teacher-forced on the same tokens.
- combine: the sum of both (weights ``w_opd``, ``w_rl``); either alone when only one exists,
  the OPD term alone scaled by ``opd_alone``'s weight (:func:`alone_weight`): 1, 0 (no
  sample) or the share of the step's groups that carry an RL term.
- ``opd_gate=replay``: a hinted turn gets its OPD term only where the teacher's own reply,
  replayed in the env and scored as ``r_t`` is, earned more than the turn's (:func:`teacher_passes`).

A sample with zero advantage everywhere takes no batch slot. Turns from episodes with an
infrastructure error, empty or cut-off completions are counted but never become samples.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from trainers.advantages import (broadcast, bounded_teacher_logprobs, combine_token_advantages, grpo_advantages,
                                 opd_token_advantages)
from trainers.config import TrainConfig, UpdateConfig
from trainers.judge_parsing import append_hint
from trainers.rollout import Episode, Turn

TeacherFn = Callable[[list[Turn]], list[list[float]]]
"""Teacher log-probs of each turn's completion tokens given its hint-augmented prompt."""


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantages: list[float]
    weight_version: int
    temperature: float
    weight: float = 1.0
    """How much of a full sample this one is worth to the step's size (``step_scale=evidence``):
    1, or combine's ``opd_alone`` weight on a turn trained on its OPD term alone."""
    user_id: str | None = None
    """Whose adapter it trains with ``adapters=per_user``: its episode's user (reset's
    ``info["user_id"]``); None otherwise."""


def teacher_logprobs(policy: Any, config: UpdateConfig, contexts: Sequence[list[dict[str, Any]]],
                     hints: Sequence[str | None], tools: Sequence[Any], completion_ids: Sequence[list[int]],
                     old_logprobs: Sequence[list[float]], temperature: float) -> list[list[float]]:
    """The OPD teacher's log-probs of each completion, teacher-forced on its prompt with the
    hint appended (docs/concepts/methods.md, OPD), read by the model ``config.teacher()`` names: ``base``
    (adapter off), ``policy`` (the current weights, adapter on) or ``bounded`` (both, and
    per token the median of them and ``old_logprobs``, the rollout's own)."""
    if not contexts:
        return []
    prompts = [policy.encode(append_hint(c, h or ""), t) for c, h, t in zip(contexts, hints, tools)]
    teacher = config.teacher()
    if teacher != "bounded":
        return policy.score(prompts, list(completion_ids), adapter=teacher == "policy", temperature=temperature)
    on = policy.score(prompts, list(completion_ids), adapter=True, temperature=temperature)
    off = policy.score(prompts, list(completion_ids), adapter=False, temperature=temperature)
    return [bounded_teacher_logprobs(torch.tensor(old, dtype=torch.float32), torch.tensor(p, dtype=torch.float32),
                                     torch.tensor(b, dtype=torch.float32)).tolist()
            for old, p, b in zip(old_logprobs, on, off)]


def token_advantages(config: UpdateConfig, old_T: torch.Tensor, rl: float | None,
                     teacher_T: torch.Tensor | None, alone: float = 1.0) -> torch.Tensor | None:
    """One turn's per-token advantages for the configured method, or None when it carries
    no signal (no RL term and no hint, or all zeros): such a turn takes no batch slot.
    ``alone``: combine's weight of the OPD term on a turn without an RL term."""
    if config.method == "grpo":
        adv_T = broadcast(rl, len(old_T)) if rl else None
    elif config.method == "opd":
        adv_T = (opd_token_advantages(teacher_T, old_T, config.opd_clip, config.opd_center)
                 if teacher_T is not None else None)
    else:
        adv_T = combine_token_advantages(old_T, teacher_T, rl, config.w_opd, config.w_rl, config.opd_clip,
                                         config.opd_center, alone)
    if adv_T is None or not bool(adv_T.abs().gt(0).any()):
        return None
    return adv_T


def alone_weight(config: UpdateConfig, signal_share: float) -> float:
    """combine's weight of the OPD term on a hinted turn without an RL term: 1
    (``opd_alone=true``), 0 (``false``) or ``signal_share`` (``share``), the fraction of the
    step's GRPO groups (live: of its turns) whose RL term is not zero. With ``share`` OPD
    acts alone only as far as the reward speaks for the rest of the batch: a step where no
    group has a signal does not train on the teacher's gap alone."""
    return {"true": 1.0, "false": 0.0}.get(config.opd_alone, signal_share)


def sample_weight(config: UpdateConfig, rl: float | None, alone: float) -> float:
    """A sample's :attr:`Sample.weight`: ``alone`` for a combine turn without an RL term (it
    trains on its OPD term alone), 1 for every other."""
    return alone if config.method == "combine" and not rl else 1.0


def opd_applies(config: UpdateConfig, has_rl: bool, alone: float) -> bool:
    """Whether a hinted turn's OPD term can reach the loss, so its teacher pass is worth
    running: not in combine when the turn has no RL term and ``alone`` (its weight) is 0."""
    return config.method == "opd" or has_rl or alone > 0


def teacher_passes(config: TrainConfig, turn: Turn) -> bool:
    """Whether a hinted turn's teacher may give it an OPD term: always without a gate; with
    ``opd_gate=replay`` only when the teacher's own reply, replayed in the env, earned more
    than the turn's reply did, both scored as the run scores a turn (``reward=``; a turn
    whose replay failed is not trusted)."""
    if config.opd_gate != "replay":  # none, or auto not resolved by a Trainer (no replay ran)
        return True
    return turn.teacher_reward is not None and turn.teacher_reward > turn.reward


def run_reward(config: TrainConfig, env_reward: float, judge_score: int | None) -> float:
    """A turn's reward as the run scores it (``reward=``): the env's, the judge's score (an
    unparsed verdict counts 0), or the env's plus ``prm_coef`` times the judge's."""
    judge = float(judge_score or 0)
    if config.reward == "env":
        return env_reward
    if config.reward == "judge":
        return judge
    return env_reward + config.prm_coef * judge


def assign_rewards(episodes: list[Episode], config: TrainConfig) -> None:
    for episode in episodes:
        for turn in episode.turns:
            turn.reward = run_reward(config, turn.env_reward, turn.judge_score)


def group_advantages(episodes: list[Episode], config: TrainConfig) -> tuple[dict[int, float], int]:
    """Episode index -> GRPO advantage, and how many groups were skipped for no signal."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, episode in enumerate(episodes):
        if episode.error is None:
            groups[episode.group].append(i)
    out: dict[int, float] = {}
    skipped = 0
    for members in groups.values():
        returns_G = torch.tensor([episodes[i].reward_return for i in members], dtype=torch.float32)
        adv_G = grpo_advantages(returns_G, normalize_std=config.normalize_std) if len(members) > 1 else None
        if adv_G is None:
            skipped += 1
            continue
        out.update({i: float(a) for i, a in zip(members, adv_G)})
    return out, skipped


def signal_groups(episodes: list[Episode], config: TrainConfig) -> list[int]:
    """The groups GRPO learns from, those whose members' returns differ, in the order they
    first appear in ``episodes``."""
    advantages, _skipped = group_advantages(episodes, config)
    return list(dict.fromkeys(episodes[i].group for i in sorted(advantages)))


def usable_completion(completion_ids: list[int], finish_reason: str, train_cut: bool) -> bool:
    """Whether a completion can become a sample: never when empty; when cut at the token
    limit, only with ``train_cut`` (config key)."""
    return bool(completion_ids) and (finish_reason == "stop" or train_cut and finish_reason == "length")


def _plan(episodes: list[Episode], config: TrainConfig
          ) -> tuple[dict[int, float], int, list[tuple[int, Turn]], float]:
    """What a step's samples are built from: the GRPO advantage per episode index, the groups
    skipped, the (episode index, turn) pairs that can become samples, and combine's
    ``opd_alone`` weight."""
    use_rl = config.method in ("grpo", "combine")
    group_adv, skipped = group_advantages(episodes, config) if use_rl else ({}, 0)
    candidates = [(i, t) for i, e in enumerate(episodes) if e.error is None for t in e.turns
                  if usable_completion(t.completion.completion_ids, t.completion.finish_reason, config.train_cut)]
    signal = len({episodes[i].group for i in group_adv})
    return group_adv, skipped, candidates, alone_weight(config, signal / (signal + skipped) if signal + skipped else 0.0)


def _opd_wanted(config: TrainConfig, candidates: list[tuple[int, Turn]], group_adv: dict[int, float],
                alone: float) -> list[Turn]:
    if config.method not in ("opd", "combine"):
        return []
    return [t for i, t in candidates if t.hint and opd_applies(config, i in group_adv, alone)]


def opd_wanted(episodes: list[Episode], config: TrainConfig) -> list[Turn]:
    """The hinted turns whose OPD term can reach this step's loss (usable, and not dropped by
    ``opd_alone``), before any gate: those :func:`build_samples` asks the teacher about, and
    those ``opd_gate=replay`` checks."""
    group_adv, _skipped, candidates, alone = _plan(episodes, config)
    return _opd_wanted(config, candidates, group_adv, alone)


def build_samples(episodes: list[Episode], config: TrainConfig,
                  teacher: TeacherFn | None) -> tuple[list[Sample], dict[str, float]]:
    use_rl = config.method in ("grpo", "combine")
    group_adv, skipped, candidates, alone = _plan(episodes, config)
    wanted = _opd_wanted(config, candidates, group_adv, alone) if teacher is not None else []
    hinted = [t for t in wanted if teacher_passes(config, t)]
    teacher_logps = dict(zip(map(id, hinted), teacher(hinted))) if hinted else {}
    users = {id(t): e.user_id for e in episodes for t in e.turns}
    samples: list[Sample] = []
    zero = 0
    gaps: list[torch.Tensor] = []  # raw teacher gaps of hinted turns, before the clip
    rl_terms: list[float] = []
    for i, turn in candidates:
        c = turn.completion
        old_T = torch.tensor(c.logprobs, dtype=torch.float32)
        rl = group_adv.get(i) if use_rl else None
        t_logp = teacher_logps.get(id(turn))
        teacher_T = torch.tensor(t_logp, dtype=torch.float32) if t_logp is not None else None
        adv_T = token_advantages(config, old_T, rl, teacher_T, alone)
        if adv_T is None:
            zero += 1
            continue
        if teacher_T is not None:
            gaps.append(teacher_T - old_T)
        if rl:
            rl_terms.append(abs(rl))
        samples.append(Sample(c.prompt_ids, c.completion_ids, c.logprobs, adv_T.tolist(),
                              c.weight_version, c.temperature, sample_weight(config, rl, alone),
                              users.get(id(turn))))
    turns = [t for e in episodes for t in e.turns]
    stats = {
        "samples/count": float(len(samples)),
        "samples/zero_advantage": float(zero),
        "samples/skipped_groups": float(skipped),
        "samples/hinted_turns": float(len(hinted)),
        **({"samples/gate_failed": float(len(wanted) - len(hinted))}
           if config.opd_gate == "replay" else {}),
        **({"samples/opd_alone_weight": alone} if config.method == "combine" else {}),
        "rollout/episodes": float(len(episodes)),
        "rollout/turns": float(len(turns)),
        "rollout/env_errors": float(sum(e.error is not None for e in episodes)),
        "rollout/cut_completions": float(sum(t.completion.finish_reason != "stop" for t in turns)),
        "rollout/empty_completions": float(sum(not t.completion.completion_ids for t in turns)),
    }
    stats.update(advantage_stats(gaps, rl_terms, config.opd_clip, [s.advantages for s in samples]))
    return samples, stats


def advantage_stats(gaps: list[torch.Tensor], rl_terms: list[float], clip: float,
                    advantages: list[list[float]]) -> dict[str, float]:
    """How big each term of a step's advantages is, to see which one drives an update:
    ``adv/opd_abs`` (mean ``|clipped teacher gap|`` per hinted token), ``adv/opd_mean``,
    ``adv/opd_clipped`` (fraction of hinted tokens at the clip), ``adv/opd_zero`` (fraction
    with no gap at all: with ``opd_teacher=bounded``, mostly where it stopped or the two
    teachers disagreed), ``adv/opd_gap_min`` (the most negative raw gap), ``adv/rl_abs``
    (mean ``|RL term|`` per sample) and
    ``adv/negative_tokens`` (fraction of trained tokens pushed down)."""
    out: dict[str, float] = {}
    if gaps:
        raw_N = torch.cat(gaps)
        clipped_N = raw_N.clamp(-clip, clip)
        out.update({"adv/opd_abs": float(clipped_N.abs().mean()), "adv/opd_mean": float(clipped_N.mean()),
                    "adv/opd_clipped": float((raw_N.abs() >= clip).float().mean()),
                    "adv/opd_zero": float((raw_N == 0).float().mean()),
                    "adv/opd_gap_min": float(raw_N.min())})
    if rl_terms:
        out["adv/rl_abs"] = sum(rl_terms) / len(rl_terms)
    tokens = [a for adv in advantages for a in adv]
    if tokens:
        out["adv/negative_tokens"] = sum(a < 0 for a in tokens) / len(tokens)
    return out
