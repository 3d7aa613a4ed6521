"""What tests/trainers/test_distributed.py runs under ``torchrun``: each rank is a real process
of a real gloo process group.

    torchrun --nproc-per-node 2 -m tests.trainers.dist_helper update <out dir>
    torchrun --nproc-per-node 2 -m tests.trainers.dist_helper gpu_backend

``update``: every rank builds the same fixed samples, takes its share (rank r every
world-th one from r, so that their interleave is the list again), runs one distributed
``train_step`` and writes its trained adapter and stats to ``<out>/rank<r>.*``.
``gpu_backend``: asks accelerate for the GPU backend on this GPU-less host, which leaves
every rank alone; ``start_ranks`` must refuse that.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typing import TYPE_CHECKING, Any

from trainers.distributed import DistributedError, Ranks, start_ranks

if TYPE_CHECKING:
    from agents.policy import TransformersPolicy
    from trainers.samples import Sample

SETTINGS = {"minibatch_size": 4, "microbatch_size": 1, "epochs": 2, "kl_beta": 0.05, "lr": 1.0,
            "step_scale": "evidence", "device": "cpu"}
"""Nine samples in minibatches of four (the last holds one, so rank 1 has none of it), a
pass per sample, two epochs, the KL term, and steps sized by the samples' weights."""

ROWS = [("What is 2 + 2?", "It is 4.", 1.0, 3, 1.0), ("Name a colour.", "Blue, I think.", -0.5, 3, 1.0),
        ("Say hi.", "", 0.7, 3, 1.0), ("Count to three.", "One, two, three.", 0.3, 2, 0.5),
        ("Spell cat.", "C-A-T", -1.0, 2, 1.0), ("Pick a number.", "Seven.", 0.8, 3, 0.25),
        ("Greet me.", "Hello there!", -0.2, 3, 1.0), ("Name a fruit.", "A pear.", 0.4, 3, 1.0),
        ("Say no.", "No.", -0.6, 3, 1.0)]
"""(prompt, reply, advantage, weight version, weight): one reply empty (not counted), two
from an older version (the importance correction is on), some OPD-alone weights."""


def fixed_samples(policy: TransformersPolicy) -> list[Sample]:
    from trainers.samples import Sample

    samples = []
    for prompt, reply, advantage, version, weight in ROWS:
        prompt_ids = policy.encode([{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}])
        reply_ids = policy.tokenizer(reply, add_special_tokens=False)["input_ids"]
        old = [lp - 0.05 for lp in policy.score([prompt_ids], [reply_ids])[0]] if reply_ids else []
        samples.append(Sample(prompt_ids, reply_ids, old, [advantage] * len(reply_ids), version, 1.0, weight))
    return samples


def sgd_step(policy: TransformersPolicy, samples: list[Sample],
             ranks: Ranks | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """``train_step`` on ``samples`` with plain SGD (the step is the gradient itself: Adam
    would magnify float noise in tiny gradients): the trained weights and the stats."""
    import torch

    from trainers.config import TrainConfig
    from trainers.update import train_step, trainable_copy

    config = TrainConfig(**SETTINGS)
    model, _adam = trainable_copy(policy, config)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    stats = train_step(model, optimizer, samples, config, version=3, pad_id=policy.tokenizer.pad_token_id,
                       ranks=ranks)
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}, stats


def main(argv: list[str]) -> int:
    if argv[0] == "gpu_backend":
        try:
            start_ranks("cuda:0", 60)
        except DistributedError as exc:
            print(f"refused: {exc}")
            return 2
        return 0
    out = Path(argv[1])
    from agents.policy import TransformersPolicy

    ranks = start_ranks("cpu", 120)
    policy = TransformersPolicy("default", seed=0)
    mine = fixed_samples(policy)[ranks.rank::ranks.world]
    weights, stats = sgd_step(policy, mine, ranks)
    from safetensors.torch import save_file

    save_file(weights, str(out / f"rank{ranks.rank}.safetensors"))
    (out / f"rank{ranks.rank}.json").write_text(json.dumps(stats))
    ranks.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
