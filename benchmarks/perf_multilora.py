"""Decoding a batch whose rows carry different users' adapters: ``python -m benchmarks.perf_multilora``.

``python -m benchmarks.perf_multilora batch=32 adapters=1,8,32 new_tokens=16 repeats=3 rank=16``

One batch of ``batch`` rows, greedy, every row running all ``new_tokens`` steps (no end
token), decoded by agents/decode.py's loop on the growing cache in these variants:

- **single adapter, merged**: today's serving path: the one adapter merged into a copy of
  the base (``W + s B A``), no per-row term. The reference of the ratios.
- **bank, base rows**: the bank (agents/multi_lora.py) with every row on slot 0: what the
  wrapped layers cost when no row has an adapter.
- **bank, N distinct**: rows spread round-robin over N users' adapters (N in ``adapters``).
- **bank, N distinct, shuffled**: the largest N's rows in a fixed shuffled order. Round-robin
  over slots in order leaves 1 or ``batch`` distinct adapters' rows sorted by slot, which the
  bank reads without moving rows; a server's batches come in any order.

On a CPU in float32 every model is packed for oneDNN first (agents/packed_linear.py), as the
policy's sampling copy is. Repeats are interleaved (each variant once per round); figures are
medians. tok/s counts the ``batch x new_tokens`` sampled tokens over the whole call (the
prompt pass of ~30-token prompts included); tok/CPU-s the same over this process's CPU time,
the steadier figure where other work shares the cores (wall ratios moved by 0.3 between runs
on a shared 2-core machine). The adapters are random (B not zero) and reach
the bank through an :class:`~agents.adapter_store.AdapterStore` in a temporary directory:
the cold load is the median over users of reading one file and copying it into a slot
(just written, so from the page cache: a first read from disk adds the disk's time).
Bytes per adapter are its float32 parameters in memory, the file on disk, and the Adam
state training it would hold (2 x params, float32). Writes runs/bench/perf_multilora.json and .md.

``python -m benchmarks.perf_multilora on_disk=1000 repeats=20`` checks instead that users' adapters
on disk do not slow a request (:func:`users_on_disk`): a live ``adapters=per_user`` server's
latency for one user with no other user on disk, then with ``on_disk`` others (copies of that
user's adapter, ~20 MB each at rank 16: check free disk first), then with none again; writes
runs/bench/perf_multilora_on_disk.json and .md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spin-waiting threads on a shared CPU

import copy  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

from benchmarks.args import key_values  # noqa: E402
from benchmarks.perf_decode import PROMPTS, machine  # noqa: E402

DEFAULTS = {"batch": "32", "adapters": "1,8,32", "new_tokens": "16", "repeats": "3", "rank": "16",
            "device": "auto", "out": "runs/bench", "on_disk": "0"}
MERGED = "single adapter, merged"
PROBE = "probe"
"""The user whose requests :func:`users_on_disk` times."""


def random_state(bank: Any, seed: int) -> dict[str, Any]:
    """An adapter of the bank's shapes with random A and B (a trained one's B is not zero)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, value in bank.state(1).items():
        state[key] = torch.randn(value.shape, generator=generator) * 0.05
    return state


def merged_model(base: Any, bank: Any, state: dict[str, Any]) -> Any:
    """A copy of ``base`` with ``state`` merged into its adapted layers (``W += s B A``)."""
    import torch

    model = copy.deepcopy(base)
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, (A_RI, B_OR) in bank._pairs(state).items():
            modules[name].weight.addmm_(B_OR, A_RI, alpha=bank.lora.alpha / bank.lora.rank)
    return model


def measure(variants: dict[str, Callable[[], None]], tokens: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median tokens per wall second and per CPU second (this process, all threads: the steadier
    figure on a shared machine) of each variant, run once per round in turn."""
    from tqdm import tqdm

    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for _ in tqdm(range(repeats), desc="rounds", file=sys.stderr):
        for name, run in variants.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    return {name: {"tok_s": tokens / statistics.median(wall[name]), "tok_cpu_s": tokens / statistics.median(cpu[name])}
            for name in variants}


def table(speeds: dict[str, dict[str, float]], single_bank: str | None) -> str:
    lines = ["| variant | tok/s | vs merged single adapter | vs bank, 1 adapter | tok/CPU-s | vs merged | vs bank, 1 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, speed in speeds.items():
        cells = [name]
        for key in ("tok_s", "tok_cpu_s"):
            vs_bank = f"{speed[key] / speeds[single_bank][key]:.2f}x" if single_bank else "-"
            cells += [f"{speed[key]:.1f}", f"{speed[key] / speeds[MERGED][key]:.2f}x", vs_bank]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def users_on_disk(others: int, repeats: int, rank: int, new_tokens: int = 8,
                  root: Path | None = None) -> dict[str, Any]:
    """Does a request slow down with ``others`` users' adapters on disk? A live ``adapters=per_user``
    server (``learn=false``, in this process, on loopback) serves one user (``PROBE``,
    a random adapter saved as its version 1) ``repeats`` greedy requests of ``new_tokens``
    tokens through the ``openai`` client, after one untimed request that loads its adapter
    (its latency is ``cold_s``). Three phases, each on a freshly started server over the
    same run dir, as a restart would find it: no other user on disk (``before``), ``others``
    users' adapters (copies of the probe's directory, ``many``), and none again (``after``,
    the others deleted). ``ratio`` is the median of ``many`` over the median of ``before``
    and ``after`` pooled: the baseline measured in the same run, on both sides of it.
    ``replies`` holds each phase's reply: the same adapter must answer alike."""
    import tempfile

    import openai

    from trainers.config import apply_overrides
    from trainers.live.config import ServeConfig
    from trainers.serve import serve_in_thread

    config = apply_overrides(ServeConfig(), ["adapters=per_user", "learn=false", f"lora.rank={rank}",
                                             f"lora.alpha={2 * rank}", "max_users=0", f"max_new_tokens={new_tokens}",
                                             "max_batch=1", "max_adapters=4"])
    messages = [{"role": "user", "content": PROMPTS[0]}]
    result: dict[str, Any] = {"others": others, "repeats": repeats, "rank": rank, "new_tokens": new_tokens,
                              "phases": {}, "replies": {}}
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        run = Path(tmp) / "run"
        for phase in ("before", "many", "after"):
            started = time.perf_counter()
            with serve_in_thread(config, run) as (url, service):
                start_s = time.perf_counter() - started
                adapters = service.adapters
                if phase == "before":
                    adapters.save(PROBE, random_state(adapters.bank, seed=0), {}, 1, [])
                client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
                latencies, replies = [], []
                for _ in range(repeats + 1):
                    sent = time.perf_counter()
                    reply = client.chat.completions.create(model="clawgym", messages=messages, temperature=0,
                                                           max_tokens=new_tokens, user=PROBE)
                    latencies.append(time.perf_counter() - sent)
                    replies.append((reply.choices[0].message.content, reply.system_fingerprint))
                users = len(adapters.users())
            if len(set(replies)) != 1:
                raise RuntimeError(f"phase {phase}: one adapter, greedy, gave different replies: {set(replies)}")
            result["phases"][phase] = {"users_on_disk": users, "start_s": start_s, "cold_s": latencies[0],
                                       "latencies_s": latencies[1:], "median_s": statistics.median(latencies[1:])}
            result["replies"][phase] = list(replies[0])
            store = run / "adapters"
            if phase == "before":  # copies of the probe's directory: adapter, optimizer, state
                for i in range(others):
                    shutil.copytree(store / PROBE, store / f"user{i:04d}")
                result["disk_bytes"] = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
            elif phase == "many":
                for i in range(others):
                    shutil.rmtree(store / f"user{i:04d}")
    phases = result["phases"]
    baseline = statistics.median(phases["before"]["latencies_s"] + phases["after"]["latencies_s"])
    result["baseline_s"], result["ratio"] = baseline, phases["many"]["median_s"] / baseline
    return result


def on_disk_text(result: dict[str, Any], stamp: str, where: str) -> str:
    phases = result["phases"]
    lines = [f"### A request with {result['others']:,} other users' adapters on disk, rank {result['rank']}, "
             f"{result['new_tokens']} new tokens, greedy, median of {result['repeats']}\n",
             f"{stamp} on {where}; {result['disk_bytes'] / 1e9:.1f} GB of adapters on disk in the middle phase\n",
             "| phase | users on disk | server start (s) | first request (s) | median request (s) |",
             "|---|---:|---:|---:|---:|"]
    for name, phase in phases.items():
        lines.append(f"| {name} | {phase['users_on_disk']:,} | {phase['start_s']:.1f} | {phase['cold_s']:.3f} | "
                     f"{phase['median_s']:.3f} |")
    lines.append(f"\nWith {result['others']:,} others on disk a request takes **{result['ratio']:.2f}x** the "
                 f"baseline ({result['baseline_s']:.3f} s, the before and after phases pooled).")
    return "\n".join(lines)


def on_disk_main(args: dict[str, str]) -> int:
    from benchmarks.perf_decode import machine

    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out).free
    result = users_on_disk(int(args["on_disk"]), int(args["repeats"]), int(args["rank"]), int(args["new_tokens"]),
                           root=out)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    where = machine("cpu")
    text = on_disk_text(result, stamp, where)
    print(text)
    (out / "perf_multilora_on_disk.json").write_text(json.dumps(
        {"time": stamp, "machine": where, "args": args, "free_disk_bytes": free, **result}, indent=2))
    (out / "perf_multilora_on_disk.md").write_text(text + "\n")
    print(f"saved {out / 'perf_multilora_on_disk.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = key_values(sys.argv[1:] if argv is None else argv, DEFAULTS, positive=("batch", "new_tokens", "repeats",
                                                                                   "rank"))
    if not args["on_disk"].isdigit():
        raise SystemExit(f"on_disk must be a whole number (0: the decode benchmark), got {args['on_disk']!r}")
    if int(args["on_disk"]):
        return on_disk_main(args)
    import torch

    from agents.adapter_store import WEIGHTS, AdapterStore
    from agents.adapters import LoraSettings
    from agents.decode import GrowingBatch, decode, left_padded
    from agents.multi_lora import AdapterBank, decode_mixed, lora_targets
    from agents.packed_linear import pack_linears
    from agents.policy import TransformersPolicy

    batch, new_tokens, rank = int(args["batch"]), int(args["new_tokens"]), int(args["rank"])
    counts = [int(n) for n in args["adapters"].split(",")]
    lora = LoraSettings(rank=rank, alpha=2 * rank)
    policy = TransformersPolicy(lora=lora, device=args["device"], max_batch=batch)
    device, pack = policy.device, policy.device == "cpu" and policy.dtype == "float32"
    base = copy.deepcopy(policy.serve_model)
    bank = AdapterBank(base, lora_targets(policy.model), lora, capacity=max(counts))
    users = [f"user{i}" for i in range(max(counts))]
    prompts = [policy.encode([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]) for i in range(batch)]
    pad = policy.tokenizer.pad_token_id
    with tempfile.TemporaryDirectory() as root:
        store = AdapterStore(root, bank)
        for i, user in enumerate(users):
            store.save(user, random_state(bank, seed=i))
        merged = merged_model(policy.serve_model, bank, store.read(users[0]))
        if pack:  # packed before the bank wraps them, so q/k/v and gate/up stay one product
            pack_linears(merged)
        loads = []
        for user in users:
            with store.lease([user]):
                loads.append(store.stats.last_load_s)
        file_bytes = (Path(root) / users[0] / WEIGHTS).stat().st_size
    if pack:  # the bank's copies of the base layers: packed in place under the wrappers
        pack_linears(base)
    slot_of = dict(zip(users, store.acquire(users)))  # pinned for the run

    def run_bank(slots: list[int]) -> Callable[[], None]:
        return lambda: decode_mixed(bank, prompts, slots, pad_id=pad, eos_id=-1, max_new=new_tokens,
                                    share_prompts=False)

    def run_merged() -> None:
        ids_BL, attn_BL = left_padded(prompts, pad, device)
        with torch.no_grad():
            decode(GrowingBatch(merged, ids_BL, attn_BL, room=new_tokens), rows=batch, max_new=new_tokens,
                   eos_id=-1, temperature=0.0)

    variants = {MERGED: run_merged, "bank, base rows": run_bank([0] * batch)}
    for n in counts:
        variants[f"bank, {n} distinct"] = run_bank([slot_of[users[i % n]] for i in range(batch)])
    mixed = [slot_of[users[i % max(counts)]] for i in range(batch)]
    random.Random(0).shuffle(mixed)
    variants[f"bank, {max(counts)} distinct, shuffled"] = run_bank(mixed)
    speeds = measure(variants, batch * new_tokens, int(args["repeats"]))
    params = bank.bytes_per_adapter() // 4
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    single = "bank, 1 distinct" if 1 in counts else None
    text = (f"### Mixed-adapter decode, batch {batch}, {new_tokens} new tokens, rank {rank}, greedy, "
            f"median of {args['repeats']} interleaved repeats\n\n{stamp} on {machine(device)}"
            f"{', packed for oneDNN' if pack else ''}\n\n{table(speeds, single)}\n\n"
            f"Per adapter: {params:,} params, {params * 4 / 1e6:.1f} MB in memory (float32), "
            f"{file_bytes / 1e6:.1f} MB on disk, {params * 8 / 1e6:.1f} MB of Adam state (2 x params, float32); "
            f"cold load {statistics.median(loads) * 1e3:.1f} ms (median of {len(loads)}).")
    print(text)
    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf_multilora.json").write_text(json.dumps(
        {"time": stamp, "machine": machine(device), "args": args, "tokens_per_s": speeds,
         "adapter_params": params, "adapter_bytes": params * 4, "file_bytes": file_bytes,
         "adam_bytes": params * 8, "cold_load_s": statistics.median(loads)}, indent=2))
    (out / "perf_multilora.md").write_text(text + "\n")
    worst = min(v["tok_cpu_s"] for k, v in speeds.items() if "distinct" in k)
    print(f"saved {out / 'perf_multilora.json'}; the slowest mix decodes at {worst / speeds[MERGED]['tok_cpu_s']:.2f}x "
          f"the merged single adapter's tokens per CPU second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
