"""Decode cost of the policy's two decoders: ``python -m benchmarks.perf_decode``.

``python -m benchmarks.perf_decode batch=4,32 new_tokens=64 repeats=5 device=auto``

For each batch size, the same prompts go through ``TransformersPolicy`` with
``decoder=generate`` (transformers' ``generate``, keeping every step's logits) and
``decoder=fast`` (agents/decode.py), ``fast`` with every row's prompt prefilled (no sharing
of repeated prompts: batches above 4 repeat the 4 prompts, as a group's members do),
``fast`` with transformers' concatenating cache instead of reserved room, on a GPU
also ``fast`` decoding in step (each step queued only once the last one's tokens are read:
``run_ahead=False``) and ``fast`` without CUDA graphs, and on a CPU in float32 ``fast`` on ``F.linear`` instead of
the oneDNN-packed weights (agents/packed_linear.py; ``generate`` runs on ``F.linear`` too).
Repeats are interleaved (every variant once per round) and figures are medians:

- **prefill ms**: a call with ``max_new_tokens=1`` (the prompt pass and one sample);
- **decode ms/step**: (a full call - prefill) / (steps - 1), where steps is the longest
  completion of the batch;
- **decode tok/s**: tokens sampled after the first / (full call - prefill);
- **CPU ms/step**: the same difference in this process's CPU time (all threads), the
  steadier figure on a shared machine, where wall time also counts other work's turns.

Greedy by default (``temperature=0``), on prompts that ask for long answers, so both
decoders produce the same tokens and every row runs all steps; the table says how many
rows ended early. ``context=N`` puts a system message of about N tokens before each request
(an agent's prompt: tool schemas, a page snapshot), where the prompt pass is most of a
call and sharing a group's prompt matters; ``group=G`` gives each prompt to G rows in a row
(a GRPO group; 0, the default, cycles through the four). Writes runs/bench/perf_decode.json
and .md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spin-waiting threads on a shared CPU

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.args import key_values  # noqa: E402

PROMPTS = ["Count from 1 to 500, separated by commas.",
           "Write a very long story about a dragon and a lighthouse keeper.",
           "Describe, step by step and at length, how to bake bread.",
           "Explain in great detail how a steam engine works."]
DEFAULTS = {"batch": "4,32", "new_tokens": "64", "repeats": "5", "device": "auto", "dtype": "auto",
            "temperature": "0", "context": "0", "group": "0", "out": "runs/bench"}
PREAMBLE = ("You are an agent working in a sandbox. The tools you may call, the state of the page and "
            "the files you have opened so far are listed below; read them before you answer. ")


def parse(argv: list[str]) -> dict[str, str]:
    return key_values(argv, DEFAULTS)


def machine(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores), {platform.platform()}, " \
           f"torch {torch.__version__}"


def messages(request: str, context: int) -> list[dict[str, str]]:
    """The request, after a system message of about ``context`` tokens (0: none): an agent's
    long prompt (tool schemas, a page, files), where the prompt pass outweighs decoding."""
    if context <= 0:
        return [{"role": "user", "content": request}]
    words = PREAMBLE.split()
    system = " ".join(words[i % len(words)] for i in range(int(context * 0.75)))
    return [{"role": "system", "content": system}, {"role": "user", "content": request}]


def _timed(policy: Any, prompts: list[list[int]], sampling: Any) -> tuple[float, float, list[Any]]:
    """Wall seconds, this process's CPU seconds (all threads), and the completions."""
    import torch

    if str(policy.device).startswith("cuda"):
        torch.cuda.synchronize()
    start, start_cpu = time.perf_counter(), time.process_time()
    out = policy.generate_ids(prompts, sampling)
    if str(policy.device).startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - start_cpu, out


def measure(variants: dict[str, Any], prompts: list[list[int]], new_tokens: int, repeats: int,
            temperature: float) -> list[dict[str, Any]]:
    from agents.policy import SamplingParams

    full, first = SamplingParams(temperature, max_new_tokens=new_tokens), SamplingParams(temperature, max_new_tokens=1)
    kinds = ("prefill", "full", "prefill_cpu", "full_cpu")
    times: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in kinds} for name in variants}
    steps: dict[str, int] = {}
    ended: dict[str, int] = {}
    decoded: dict[str, int] = {}
    for name, policy in variants.items():  # warm-up: allocations, and on a GPU the CUDA graphs' compile
        policy.generate_ids(prompts, full if str(policy.device).startswith("cuda") else first)
    for _ in range(repeats):
        for name, policy in variants.items():
            policy.reseed(0)
            seconds, cpu_seconds, _ = _timed(policy, prompts, first)
            times[name]["prefill"].append(seconds)
            times[name]["prefill_cpu"].append(cpu_seconds)
            policy.reseed(0)
            seconds, cpu_seconds, out = _timed(policy, prompts, full)
            times[name]["full"].append(seconds)
            times[name]["full_cpu"].append(cpu_seconds)
            steps[name] = max(len(c.completion_ids) for c in out)
            ended[name] = sum(c.finish_reason != "length" for c in out)
            decoded[name] = sum(len(c.completion_ids) - 1 for c in out)  # the first comes with the prefill
    rows = []
    for name in variants:
        prefill, total = statistics.median(times[name]["prefill"]), statistics.median(times[name]["full"])
        step_s = (total - prefill) / max(1, steps[name] - 1)
        cpu = {kind: statistics.median(times[name][kind]) for kind in ("prefill_cpu", "full_cpu")}
        rows.append({"decoder": name, "batch": len(prompts), "prefill_ms": 1000 * prefill,
                     "decode_ms_per_step": 1000 * step_s, "decode_tokens_per_s": decoded[name] / (total - prefill),
                     "decode_cpu_ms_per_step": 1000 * (cpu["full_cpu"] - cpu["prefill_cpu"]) / max(1, steps[name] - 1),
                     "steps": steps[name], "rows_ended_early": ended[name], "total_s": total,
                     "total_min_s": min(times[name]["full"]), "total_max_s": max(times[name]["full"])})
    base = next(r for r in rows if r["decoder"] == "generate")
    for row in rows:
        row["speedup_vs_generate"] = base["decode_ms_per_step"] / row["decode_ms_per_step"]
        row["cpu_speedup_vs_generate"] = base["decode_cpu_ms_per_step"] / row["decode_cpu_ms_per_step"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| batch | decoder | prefill ms | decode ms/step | decode tok/s | vs generate | CPU ms/step "
             "| vs generate (CPU time) | steps | rows ended early |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['decoder']} | {r['prefill_ms']:.0f} | {r['decode_ms_per_step']:.1f} | "
                     f"{r['decode_tokens_per_s']:.0f} | {r['speedup_vs_generate']:.2f}x | "
                     f"{r['decode_cpu_ms_per_step']:.1f} | {r['cpu_speedup_vs_generate']:.2f}x | {r['steps']} | "
                     f"{r['rows_ended_early']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    import torch
    from tqdm import tqdm

    from agents.device import resolve_device, resolve_dtype
    from agents.policy import TransformersPolicy

    device = resolve_device(args["device"])
    dtype = resolve_dtype(args["dtype"], device)
    batches = [int(b) for b in args["batch"].split(",")]
    new_tokens, repeats, temperature = int(args["new_tokens"]), int(args["repeats"]), float(args["temperature"])
    if device == "cpu":
        torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    common = dict(device=device, dtype=dtype, max_batch=max(batches))
    policy = TransformersPolicy(**common)
    variants_of = {"generate": policy, "fast": policy, "fast, prompts not shared": policy,
                   "fast, cache concatenated": policy}
    if device.startswith("cuda"):
        variants_of["fast, in step"] = policy
        variants_of["fast, no CUDA graphs"] = TransformersPolicy(**common, cuda_graphs=False)
    elif dtype == "float32":  # the packed weights are one-way: a second policy keeps F.linear, generate's too
        plain = TransformersPolicy(**common)
        plain.pack_weights = False
        variants_of["generate"] = variants_of["fast, F.linear"] = plain
    rows: list[dict[str, Any]] = []
    group = int(args["group"])
    for batch in tqdm(batches, desc="batch sizes"):
        picks = [(i // group if group > 0 else i) % len(PROMPTS) for i in range(batch)]
        prompts = [policy.encode(messages(PROMPTS[k], int(args["context"]))) for k in picks]
        variants = {name: _Decoder(p, "generate" if name == "generate" else "fast", "not shared" not in name,
                                   "concatenated" not in name, "in step" not in name)
                    for name, p in variants_of.items()}
        rows += measure(variants, prompts, new_tokens, repeats, temperature)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = (f"### Decode cost, {new_tokens} new tokens, temperature {temperature:g}, {dtype}, median of {repeats} "
             f"interleaved repeats, prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens\n\n"
             f"{stamp} on {machine(device)}\n\n")
    text = title + table(rows)
    print(text)
    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf_decode.json").write_text(json.dumps({"time": stamp, "machine": machine(device), "device": device,
                                                      "dtype": dtype, "args": args, "rows": rows}, indent=2))
    (out / "perf_decode.md").write_text(text + "\n")
    best = max((r for r in rows if r["decoder"] != "generate"), key=lambda r: r["batch"])
    print(f"saved {out / 'perf_decode.json'}; at batch {best['batch']} {best['decoder']} decodes "
          f"{best['speedup_vs_generate']:.2f}x as fast as generate ({best['decode_ms_per_step']:.1f} ms/step)")
    return 0


class _Decoder:
    """A policy seen through one variant: generate_ids with ``policy.decoder``,
    ``share_prompts``, ``reserve_cache`` and ``run_ahead`` set for the call."""

    def __init__(self, policy: Any, decoder: str, share_prompts: bool = True, reserve_cache: bool = True,
                 run_ahead: bool = True) -> None:
        self.policy, self.decoder, self.device = policy, decoder, policy.device
        self.settings = share_prompts, reserve_cache, run_ahead

    def reseed(self, offset: int) -> None:
        self.policy.reseed(offset)

    def generate_ids(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        policy = self.policy
        before = policy.decoder, policy.share_prompts, policy.reserve_cache, policy.run_ahead
        policy.decoder, (policy.share_prompts, policy.reserve_cache, policy.run_ahead) = self.decoder, self.settings
        try:
            return policy.generate_ids(prompts, sampling)
        finally:
            policy.decoder, policy.share_prompts, policy.reserve_cache, policy.run_ahead = before


if __name__ == "__main__":
    raise SystemExit(main())
