"""``method=sft``: supervised fine-tuning on demonstrations, the cold start before RL.

    python -m trainers.run env=toolmath method=sft steps=20 batch_size=16 lr=1e-3
    python -m trainers.run env=toolmath method=grpo reward=env init=runs/<the sft run>

GRPO learns from the differences between a group's rewards; a model that never succeeds
(the default model calls no tool on toolmath, BFCL or MiniWoB) gives every member reward 0
and the update nothing to follow. The usual remedy (ReTool, DeepSeek-R1's cold start,
SWE-Gym's rejection-sampled trajectories) is a short supervised phase on demonstrations
first, then RL from those weights (``init=``).

Demonstrations (``demos=``) come from the env family's oracle, the same ground-truth agent
as ``benchmarks.run policy=oracle``, playing ``batch_size`` train-split episodes per step
(only the solved ones are kept, and each step's are written to ``demos/step_<k>.jsonl``),
or from a file in OpenAI's chat fine-tuning format: one ``{"messages": [...], "tools":
[...]}`` per line, every assistant message a target unless it says ``"weight": 0``.

Each assistant message is one sample: the prompt is exactly what the policy would be
prompted with at that point (the messages before it and the tools, through the chat
template), the completion is the reply as the policy writes it (tool calls as
``<tool_call>`` JSON, then the end-of-turn token:
:meth:`agents.policy.TransformersPolicy.encode_reply`).
The loss is the token-mean negative log-likelihood of the completions, ``epochs`` passes
of ``minibatch_size`` (each in passes of ``microbatch_size``, the gradient accumulated);
held-out evaluation, checkpoints and resume are the trainer's own.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.scoring import sequence_logprobs
from envs.messages import Message
from trainers.config import ConfigError
from trainers.loop import Trainer
from trainers.rollout import Episode, Job
from trainers.update import checkpointed, row_passes, set_checkpointing

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class Demo:
    """One target reply and what the policy would have been prompted with before it."""

    context: list[Message]
    tools: list[dict[str, Any]]
    reply: Message


@dataclass
class DemoBatch:
    step: int
    demos: list[Demo]
    metrics: dict[str, float] = field(default_factory=dict)


def episode_demos(episode: Episode) -> list[Demo]:
    """Each turn of a recorded episode (an oracle's) as a demonstration."""
    return [Demo(t.context, t.tools, t.completion.message) for t in episode.turns]


def to_record(episode: Episode) -> dict[str, Any]:
    """An episode as one line of OpenAI's chat fine-tuning format: the last turn's context, its
    reply, and the first turn's tools (a format with one tool list per conversation)."""
    last = episode.turns[-1]
    return {"messages": [*last.context, last.completion.message], "tools": episode.turns[0].tools}


def record_demos(record: Any, where: str) -> list[Demo]:
    """The demonstrations of one OpenAI fine-tuning record; ValueError naming ``where`` and the
    field that is wrong."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise ValueError(f"{where}: a record is an object with a \"messages\" list (OpenAI's chat fine-tuning format)")
    tools = record.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"{where}: \"tools\" must be a list of function schemas")
    messages: list[Message] = []
    demos = []
    for i, message in enumerate(record["messages"]):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ValueError(f"{where}: messages[{i}] needs a role among {', '.join(ROLES)}")
        clean = {k: v for k, v in message.items() if k != "weight"}
        if message["role"] == "assistant" and message.get("weight", 1) != 0:
            if not clean.get("content") and not clean.get("tool_calls"):
                raise ValueError(f"{where}: messages[{i}] is an assistant message with neither content nor tool_calls")
            demos.append(Demo(list(messages), tools, clean))
        messages.append(clean)
    if not demos:
        raise ValueError(f"{where}: no assistant message to learn (each needs content or tool_calls, and weight != 0)")
    return demos


def load_demos(path: Path) -> list[list[Demo]]:
    """A fine-tuning JSONL file, one list of demonstrations per conversation."""
    if not path.exists():
        raise FileNotFoundError(f"demos={path} does not exist; pass demos=oracle or a JSONL file of "
                                "{\"messages\": [...], \"tools\": [...]} records")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number} is not JSON ({exc.msg})") from None
            records.append(record_demos(record, f"{path}:{number}"))
    if not records:
        raise ValueError(f"{path} holds no record")
    return records


class SFTTrainer(Trainer):
    """The trainer with demonstrations in place of rollouts and the likelihood in place of the
    clipped objective (module docstring)."""

    def __init__(self, config: Any, run: Any) -> None:
        super().__init__(config, run)
        self.records: list[list[Demo]] = []
        self.oracle = None
        try:
            self._find_demos(config)
        except BaseException:
            self.close()  # the held-out envs are up already
            raise

    def _find_demos(self, config: Any) -> None:
        if config.demos == "oracle":
            from envs.oracle import FAMILIES, WITHOUT_ORACLE, family_of

            family = family_of(self.env_id)
            self.oracle = FAMILIES.get(family)
            if self.oracle is None:
                why = WITHOUT_ORACLE.get(family, f"no oracle is written for the {family} env family")
                raise ConfigError(f"demos=oracle: env={config.env} has no oracle ({why}); pass demos=<file.jsonl>")
            if self.oracle.tasks is not None:  # MiniWoB: the default subset has scripted oracles
                have = self.oracle.tasks()
                self.train_tasks = [t for t in self.train_tasks if t in have]
                if not self.train_tasks:
                    raise ConfigError(f"demos=oracle: no train task of env={config.env} has an oracle "
                                      f"({self.oracle.other_tasks})")
        else:
            self.records = load_demos(Path(config.demos).expanduser())

    def _rollout_vec(self, kwargs: dict[str, Any]) -> Any:
        return None  # nothing is sampled: demonstrations are played by the oracle or read

    def collect_and_score(self, step: int) -> DemoBatch:  # type: ignore[override]
        started = time.perf_counter()
        if self.oracle is None:
            demos = [d for r in self._records_for(step) for d in r]
            return DemoBatch(step, demos, {"demos/episodes": float(self.config.batch_size),
                                           "perf/rollout_s": time.perf_counter() - started})
        from trainers.oracle_rollout import play_episodes

        rng = np.random.default_rng([self.config.seed, step])
        tasks = rng.choice(self.train_tasks, size=self.config.batch_size,
                           replace=len(self.train_tasks) < self.config.batch_size)
        jobs = [Job(g, str(t), int(rng.integers(1 << 31))) for g, t in enumerate(tasks)]
        kwargs = dict(self.config.env_kwargs)
        if self.config.sandbox:
            kwargs["sandbox"] = self.config.sandbox
        played = [e for e, _note in play_episodes(self.env_id, kwargs, jobs, self.config.parallel)]
        solved = [e for e in played if e.error is None and e.turns and e.env_return > 0]
        if not solved:
            reasons = sorted({e.error or e.stop_reason for e in played})
            raise RuntimeError(f"demos=oracle: the oracle solved none of step {step}'s {len(played)} episodes "
                               f"({'; '.join(reasons)[:300]}); nothing to learn from")
        folder = self.run.path / "demos"
        folder.mkdir(exist_ok=True)
        (folder / f"step_{step:05d}.jsonl").write_text(
            "".join(json.dumps(to_record(e)) + "\n" for e in sorted(solved, key=lambda e: e.group)))
        demos = [d for e in solved for d in episode_demos(e)]
        return DemoBatch(step, demos, {"demos/episodes": float(len(played)), "demos/solved": float(len(solved)),
                                       "demos/errors": float(sum(e.error is not None for e in played)),
                                       "perf/rollout_s": time.perf_counter() - started})

    def _records_for(self, step: int) -> list[list[Demo]]:
        """Step ``step``'s records: a seeded shuffle of the file, reshuffled every pass."""
        n, size = len(self.records), self.config.batch_size
        out = []
        for k in range((step - 1) * size, step * size):
            epoch, index = divmod(k, n)
            order = np.random.default_rng([self.config.seed, epoch]).permutation(n)
            out.append(self.records[int(order[index])])
        return out

    def learn(self, batch: DemoBatch) -> dict[str, float]:  # type: ignore[override]
        started = time.perf_counter()
        prompts = [self.policy.encode(d.context, d.tools or None) for d in batch.demos]
        replies = [self.policy.encode_reply(d.reply) for d in batch.demos]
        config = self.config
        size = config.minibatch_size or len(prompts)
        params = [p for p in self.train_model.parameters() if p.requires_grad]
        nll, norms = [], []
        self.train_model.train()
        for epoch in range(config.epochs):
            order = np.random.default_rng([config.seed, batch.step, epoch]).permutation(len(prompts))
            for start in range(0, len(order), size):
                rows = [int(i) for i in order[start : start + size]]
                tokens = max(sum(len(replies[i]) for i in rows), 1)
                self.optimizer.zero_grad(set_to_none=True)
                loss = 0.0
                for cut, lengths in row_passes([prompts[i] for i in rows], [replies[i] for i in rows],
                                               config.microbatch_size, config.microbatch_tokens):
                    part = [rows[j] for j in cut]
                    set_checkpointing(self.train_model, checkpointed(lengths, config))
                    logp_BT, mask_BT = sequence_logprobs(self.train_model, [prompts[i] for i in part],
                                                         [replies[i] for i in part], 1.0, self.policy.tokenizer.pad_token_id)
                    part_loss = -(logp_BT * mask_BT).sum() / tokens  # token mean over the whole minibatch
                    part_loss.backward()
                    loss += float(part_loss.detach())
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip)))
                self.optimizer.step()
                nll.append(loss)
        self.train_model.eval()
        pushed = self._push(batch.step)
        return {**batch.metrics, "perf/push_s": pushed, "loss/nll": float(np.mean(nll)),
                "loss/nll_last_epoch": float(np.mean(nll[-max(1, len(nll) // config.epochs):])),
                "loss/grad_norm": float(np.mean(norms)), "samples/demo_turns": float(len(prompts)),
                "samples/demo_tokens": float(sum(len(r) for r in replies)),
                "perf/train_s": time.perf_counter() - started}
