"""Policies: message lists in, completions with exact token ids and log-probs out.

``Policy.generate(prompts, tools, sampling) -> list[Completion]``. A completion carries
the assistant message (tool calls parsed from ``<tool_call>`` text), the exact prompt and
completion token ids, the per-token log-probs under the sampling distribution
(``log_softmax(logits / temperature)``), and the weight version that produced it.
Trainers never re-tokenize a rollout: they score exactly these ids.

:class:`TransformersPolicy` runs a local transformers model (CPU or GPU) with a LoRA
adapter through peft (or full weights). The base model with the adapter disabled is the
reference, the self-judge and the OPD teacher, so one copy of the weights serves all four.
It samples with its own decode loop (agents/decode.py: one log-prob read per token, ended
rows dropped, a static cache with CUDA graphs on a GPU); ``decoder="generate"`` keeps
transformers' ``generate`` for comparison. It scores through :mod:`agents.scoring` and holds
its adapter as :mod:`agents.adapters` makes, reads and loads it.
"""

from __future__ import annotations

import copy
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from agents.adapters import LoraSettings, load_trainable_state, trainable_state, with_new_adapter
from agents.chat_format import plain_messages, render_prompt
from agents.decode import (GrowingBatch, RowResult, RowStop, StaticCaches, TokenCallback, decode, distinct_rows,
                           left_padded)
from agents.device import resolve_device, resolve_dtype, torch_dtype
from agents.model_cache import DEFAULT_MODEL, resolve_model_dir
from agents.packed_linear import PackedLinear, PackedMember, pack_linears
from agents.scoring import sequence_logprobs
from envs.messages import Message, parse_text_action

DECODERS = ("fast", "generate")

# transformers warns about its own deprecated attribute whenever a model is deep-copied.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy; log-probs are then those of the untempered model."""
    top_p: float = 1.0
    """Nucleus sampling. Keep 1.0 for RL: recorded log-probs assume the full distribution."""
    max_new_tokens: int = 128


@dataclass
class Completion:
    message: Message
    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    weight_version: int
    finish_reason: str
    """``stop`` (ended with EOS), ``length`` (hit max_new_tokens), ``context`` (no room) or
    ``cancelled`` (its caller stopped it: ``generate_ids(stop=...)``)."""
    temperature: float = 1.0


class Policy(Protocol):
    weight_version: int

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None,
                 sampling: SamplingParams) -> list[Completion]: ...


class _RowStop:
    """A transformers stopping criterion asking ``stop(row)`` after every decode step: a row
    it stops is padded from then on while its batch-mates go on, and ``generate`` ends once
    every row has stopped. ``kept[row]`` is how many of the row's new tokens precede the
    step that noticed (the token sampled in that step is dropped, and never streamed)."""

    def __init__(self, stop: RowStop, prompt_width: int) -> None:
        self.stop = stop
        self.prompt_width = prompt_width
        self.kept: dict[int, int] = {}

    def __call__(self, input_ids_BL: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        done_B = torch.zeros(input_ids_BL.shape[0], dtype=torch.bool, device=input_ids_BL.device)
        for row in range(input_ids_BL.shape[0]):
            if row in self.kept or self.stop(row):
                self.kept.setdefault(row, input_ids_BL.shape[1] - self.prompt_width - 1)
                done_B[row] = True
        return done_B


class _RowStreamer:
    """A transformers streamer that hands each row's new tokens to ``on_token``, and stops
    forwarding a row after its end token (finished rows are padded while others go on), or
    once ``stopped`` (a :class:`_RowStop`'s ``kept``) holds it."""

    def __init__(self, on_token: TokenCallback, eos_id: int, stopped: dict[int, int] | None = None) -> None:
        self.on_token = on_token
        self.eos_id = eos_id
        self.done: set[int] = set()
        self.stopped = stopped if stopped is not None else {}
        self.seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:  # generate() first puts the prompt ids
            self.seen_prompt = True
            return
        for row, token in enumerate(value.reshape(-1).tolist()):
            if row in self.done or row in self.stopped:
                continue
            self.on_token(row, int(token))
            if token == self.eos_id:
                self.done.add(row)

    def end(self) -> None:
        pass


class TransformersPolicy:
    """A local transformers model with an optional LoRA adapter. Thread-safe (one lock).

    ``device`` and ``dtype`` take the values of the config keys (agents/device.py); the
    base model is loaded in ``dtype``, every tensor the policy builds goes to ``device``.
    ``max_context``: tokens of prompt plus reply it holds, at most the model's
    ``max_position_embeddings``; 0 is exactly that limit (trainers.run and benchmarks.run
    pass 0 unless told otherwise).

    ``seed`` draws the new adapter's A matrices (from a forked generator: torch's global
    one is neither read nor moved) and, with the call count, each generation's sampling.

    ``decoder``: ``fast`` (agents/decode.py) or ``generate`` (transformers' ``generate``,
    which keeps every step's full-vocabulary logits; the fallback and the benchmark's
    baseline). ``cuda_graphs``: on a GPU the fast decoder samples from the served model on
    a static KV cache with a compiled forward (CUDA graphs); None turns that on exactly when
    ``device`` is a GPU, False keeps the growing cache everywhere. The attribute
    ``share_prompts`` (True) prefills identical prompts of a batch once (a GRPO group's
    members); False runs every row's prompt. ``reserve_cache`` (True) has the growing cache
    write into room reserved for the whole reply; False concatenates as transformers'
    ``DynamicCache`` does. ``pack_weights`` (True) lays the merged sampling copy's linear
    weights out for oneDNN on first use when it runs on the CPU in float32
    (agents/packed_linear.py: ~1.6x faster matrix products at a few rows); False keeps
    ``F.linear``. ``run_ahead`` (True) lets the static cache's loop queue each decode step
    before reading the last one's tokens (agents/decode.py ``StaticBatch``); False decodes
    in step. All four False only for the benchmark's comparison.
    """

    def __init__(self, model: str = DEFAULT_MODEL, lora: LoraSettings | None = None,
                 device: str = "cpu", max_batch: int = 32, max_context: int = 2048, seed: int = 0,
                 dtype: str = "float32", decoder: str = "fast", cuda_graphs: bool | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r} is not a decoder; choose one of: {', '.join(DECODERS)}")
        device = resolve_device(device)
        if cuda_graphs and not device.startswith("cuda"):
            raise ValueError(f"cuda_graphs=True needs a GPU but device={device}; pass cuda_graphs=None "
                             "(on exactly when the device is a GPU) or False")
        self.dtype = resolve_dtype(dtype, device)
        self.model_dir = resolve_model_dir(model)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
            base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch_dtype(self.dtype)).to(device)
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"could not load the model in {self.model_dir}: {exc}. "
                               "Rebuild the default cache with `python -m scripts.cache_model`.") from exc
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.lora = lora if lora is not None else LoraSettings()
        # Generation runs on a plain copy holding base + adapter merged: peft's per-layer
        # detour costs ~30% per decode step. The copy is refreshed when weights change. It
        # shares the base's embeddings (113 MB for the default model), which no merge changes
        # (the merge below reads linear adapters only).
        embeddings = {id(p): p for m in base.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        self.serve_model = copy.deepcopy(base, embeddings).eval() if self.lora.enabled else base
        self.model = with_new_adapter(base, self.lora, seed)
        self.model.eval()
        self.device = device
        self.max_batch = max_batch
        own = getattr(base.config, "max_position_embeddings", None) or 2048
        self.max_context = min(max_context, own) if max_context > 0 else own  # 0: the model's own limit
        self.weight_version = 0
        self._seed = seed
        self._calls = 0
        self._lock = threading.RLock()
        self._prefix_cache: tuple[Any, Any] | None = None
        self.decoder = decoder
        self.share_prompts = self.reserve_cache = self.pack_weights = self.run_ahead = True
        self.packed_layers = 0  # the sampling copy's layers on oneDNN's layout, once packed
        self._merged: list[tuple[Any, Any]] | None = None  # see _merge_targets
        graphs = device.startswith("cuda") if cuda_graphs is None else cuda_graphs
        self._static = StaticCaches(compile=True, max_rows=max_batch) if graphs and decoder == "fast" else None

    def reseed(self, offset: int) -> None:
        """Make the next generations' sampling seeds a function of ``offset`` (e.g. the
        training step), so a resumed run samples exactly what the killed run would have."""
        with self._lock:
            self._calls = offset

    # ---- generation -----------------------------------------------------------------------
    def encode(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        text = render_prompt(self.tokenizer, messages, tools)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_reply(self, message: Message) -> list[int]:
        """The token ids this model would have written for an assistant ``message``: its text
        with tool calls as ``<tool_call>`` JSON (what :func:`parse_text_action` reads back to
        the same message), then the end-of-turn token generation stops at. Demonstrations
        (``method=sft``) are trained on exactly these."""
        text = plain_messages([message], None)[0]["content"]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None = None,
                 sampling: SamplingParams = SamplingParams()) -> list[Completion]:
        encoded = [self.encode(m, tools[i] if tools else None) for i, m in enumerate(prompts)]
        return self.generate_ids(encoded, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], sampling: SamplingParams,
                     adapter: bool = True, on_token: TokenCallback | None = None,
                     stop: RowStop | None = None) -> list[Completion]:
        """Sample from prompt token ids; ``adapter=False`` samples the base model (judge).

        ``on_token(row, token_id)`` is called from the generating thread as each token of
        row ``row`` (its index in ``prompt_ids``) is sampled, up to and including its end
        token: what a streaming server forwards.

        ``stop(row)`` is asked after every decode step: once it says True, that row ends
        there (``finish_reason`` ``cancelled``, keeping the tokens sampled before) while the
        other rows go on; a batch whose rows have all stopped ends. A server uses it for
        clients that left.
        """
        out: list[Completion] = []
        for start in range(0, len(prompt_ids), self.max_batch):
            chunk_cb = None if on_token is None else (lambda row, tok, s=start: on_token(s + row, tok))
            chunk_stop = None if stop is None else (lambda row, s=start: stop(s + row))
            out.extend(self._generate_batch(prompt_ids[start : start + self.max_batch], sampling, adapter, chunk_cb,
                                            chunk_stop))
        return out

    def _generate_batch(self, prompt_ids: list[list[int]], sampling: SamplingParams,
                        adapter: bool = True, on_token: TokenCallback | None = None,
                        stop: RowStop | None = None) -> list[Completion]:
        fits = [i for i, p in enumerate(prompt_ids) if len(p) < self.max_context]
        if 0 < len(fits) < len(prompt_ids):  # one prompt with no room must not empty its batch-mates
            out = [self._completion(p, [], [], "context", sampling) for p in prompt_ids]
            inner = None if on_token is None else (lambda row, tok: on_token(fits[row], tok))
            inner_stop = None if stop is None else (lambda row: stop(fits[row]))
            for i, c in zip(fits, self._generate_batch([prompt_ids[i] for i in fits], sampling, adapter, inner,
                                                       inner_stop)):
                out[i] = c
            return out
        room = self.max_context - max(len(p) for p in prompt_ids)
        max_new = min(sampling.max_new_tokens, room)
        if max_new <= 0:
            return [self._completion(p, [], [], "context", sampling) for p in prompt_ids]
        run = self._decode_fast if self.decoder == "fast" else self._decode_with_generate
        with self._lock, torch.no_grad(), self._adapter(adapter):
            torch.manual_seed(self._seed * 1_000_003 + self._calls)
            self._calls += 1
            rows = run(prompt_ids, sampling, max_new, adapter, on_token, stop)
            version = self.weight_version
        return [self._completion(p, row.tokens, row.logprobs, row.finish_reason, sampling, version)
                for p, row in zip(prompt_ids, rows)]

    def _decode_fast(self, prompt_ids: list[list[int]], sampling: SamplingParams, max_new: int, adapter: bool,
                     on_token: TokenCallback | None, stop: RowStop | None) -> list[RowResult]:
        ids_BL, attn_BL = left_padded(prompt_ids, self.tokenizer.pad_token_id, self.device)
        # the static path compiles serve_model only: peft's adapter switch would retrace it
        static = self._static if adapter or not self.lora.enabled else None
        model = self._packed_serve_model() if adapter else self.model
        room = max_new if self.reserve_cache else 0
        shared = distinct_rows(prompt_ids) if self.share_prompts else None
        if static is None:
            batch: Any = GrowingBatch(model, ids_BL, attn_BL, shared, room)
        else:
            batch = static.batch(model, ids_BL, attn_BL, max_new, shared)
            batch.runs_ahead = self.run_ahead
        return decode(batch, rows=len(prompt_ids), max_new=max_new, eos_id=self.tokenizer.eos_token_id,
                      temperature=sampling.temperature, top_p=sampling.top_p, on_token=on_token, stop=stop)

    def _packed_serve_model(self) -> Any:
        """serve_model, its linear layers packed for oneDNN the first time it samples on the
        CPU in float32 (a copy of its own: the LoRA policy's, never the trained model)."""
        if (self.pack_weights and not self.packed_layers and self.lora.enabled and self._static is None
                and self.device == "cpu" and self.dtype == "float32"):
            self.packed_layers = pack_linears(self.serve_model) or -1  # -1: tried, not packable here
            self._merged = None  # the layers a merge writes to were just replaced
        return self.serve_model

    def _decode_with_generate(self, prompt_ids: list[list[int]], sampling: SamplingParams, max_new: int,
                              adapter: bool, on_token: TokenCallback | None, stop: RowStop | None) -> list[RowResult]:
        """transformers' ``generate``: every step's full-vocabulary logits are kept to read
        one log-prob per token at the end (the baseline the fast decoder is measured against)."""
        pad = self.tokenizer.pad_token_id
        ids_BL, attn_BL = left_padded(prompt_ids, pad, self.device)
        width = ids_BL.shape[1]
        greedy = sampling.temperature <= 0
        model = self.serve_model if adapter else self.model
        stopper = None if stop is None else _RowStop(stop, width)
        result = model.generate(
            input_ids=ids_BL, attention_mask=attn_BL, max_new_tokens=max_new,
            do_sample=not greedy, temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p, top_k=0 if not greedy else None,
            output_logits=True, return_dict_in_generate=True, pad_token_id=pad,
            eos_token_id=self.tokenizer.eos_token_id, stopping_criteria=None if stopper is None else [stopper],
            streamer=None if on_token is None else _RowStreamer(on_token, self.tokenizer.eos_token_id,
                                                                None if stopper is None else stopper.kept))
        new_BT = result.sequences[:, width:]
        scale = sampling.temperature if not greedy else 1.0
        logits_BTV = torch.stack(result.logits, dim=1).float() / scale
        logp_BT = torch.log_softmax(logits_BTV, dim=-1).gather(-1, new_BT[..., None]).squeeze(-1)
        rows = []
        eos = self.tokenizer.eos_token_id
        for i in range(len(prompt_ids)):
            tokens = new_BT[i].tolist()
            kept = len(tokens) if stopper is None else stopper.kept.get(i, len(tokens))
            end = tokens.index(eos) + 1 if eos in tokens[:kept] else kept
            reason = "stop" if eos in tokens[:kept] else "length" if kept == len(tokens) else "cancelled"
            rows.append(RowResult(tokens[:end], logp_BT[i, :end].tolist(), reason))
        return rows

    def _completion(self, prompt: list[int], tokens: list[int], logprobs: list[float], reason: str,
                    sampling: SamplingParams, version: int | None = None) -> Completion:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        return Completion(message=parse_text_action(text, call_id_prefix=f"call_{self._calls}"), text=text,
                          prompt_ids=list(prompt), completion_ids=tokens, logprobs=logprobs,
                          weight_version=self.weight_version if version is None else version,
                          finish_reason=reason, temperature=sampling.temperature if sampling.temperature > 0 else 1.0)

    # ---- scoring (judge, teacher, reference) ---------------------------------------------
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]], *, adapter: bool = True,
              temperature: float = 1.0) -> list[list[float]]:
        """Teacher-forced log-probs of ``completion_ids``; ``adapter=False`` is the base model."""
        results: list[list[float]] = []
        with self._lock, torch.no_grad(), self._adapter(adapter):
            for start in range(0, len(prompt_ids), self.max_batch):
                p, c = prompt_ids[start : start + self.max_batch], completion_ids[start : start + self.max_batch]
                logp_BT, _ = sequence_logprobs(self.model, p, c, temperature, self.tokenizer.pad_token_id)
                results.extend(logp_BT[i, : len(ci)].tolist() for i, ci in enumerate(c))
        return results

    def next_token_logprobs(self, prompt_ids: list[list[int]], token_ids: list[int], *,
                            adapter: bool = True, shared_prefix: int = 0) -> list[list[float]]:
        """Log-probs of ``token_ids`` as the token right after each prompt (the judge's labels).

        With ``shared_prefix=n``, the first ``n`` tokens (a long fixed instruction with
        few-shot examples) are identical across prompts: their KV cache is computed once
        and only each prompt's suffix runs, which cuts the judge's cost several-fold.
        """
        prefix = prompt_ids[0][:shared_prefix] if prompt_ids else []
        if shared_prefix and all(p[:shared_prefix] == prefix and len(p) > shared_prefix for p in prompt_ids):
            return self._next_token_with_prefix(prompt_ids, token_ids, prefix, adapter)
        pad = self.tokenizer.pad_token_id
        results: list[list[float]] = []
        with self._lock, torch.no_grad(), self._adapter(adapter):
            for start in range(0, len(prompt_ids), self.max_batch):
                chunk = prompt_ids[start : start + self.max_batch]
                width = max(len(p) for p in chunk)
                ids_BL = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=self.device)
                attn_BL = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=self.device)
                logits_BV = self.model(input_ids=ids_BL, attention_mask=attn_BL, logits_to_keep=1).logits[:, -1].float()
                results.extend(torch.log_softmax(logits_BV, dim=-1)[:, token_ids].tolist())
        return results

    def _next_token_with_prefix(self, prompt_ids: list[list[int]], token_ids: list[int], prefix: list[int],
                                adapter: bool) -> list[list[float]]:
        # Without LoRA, "adapter off" is the trained model itself: its prefix goes stale too.
        key = (tuple(prefix), adapter, self.weight_version if adapter or not self.lora.enabled else -1)
        results: list[list[float]] = []
        with self._lock, torch.no_grad(), self._adapter(adapter):
            if self._prefix_cache is None or self._prefix_cache[0] != key:
                ids = torch.tensor([prefix], device=self.device)
                cache = self.model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
                self._prefix_cache = (key, cache)
            cache = self._prefix_cache[1]
            for p in prompt_ids:
                suffix = torch.tensor([p[len(prefix):]], device=self.device)
                out = self.model(input_ids=suffix, past_key_values=copy.deepcopy(cache), use_cache=True,
                                 logits_to_keep=1)
                results.append(torch.log_softmax(out.logits[0, -1].float(), dim=-1)[token_ids].tolist())
        return results

    def _adapter(self, enabled: bool) -> Any:
        import contextlib

        if enabled or not self.lora.enabled:
            return contextlib.nullcontext()
        return self.model.disable_adapter()

    # ---- weights ------------------------------------------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The weights training changes: the adapter's, or all of them without LoRA."""
        return trainable_state(self.model, self.lora.enabled)

    def save_adapter(self, path: str | Path) -> None:
        """Write the LoRA adapter as peft saves it (what an inference server loads), whole:
        never half of an update that is being swapped in."""
        if not self.lora.enabled:
            raise ValueError("save_adapter needs a LoRA adapter; this policy trains the full weights")
        with self._lock:
            self.model.save_pretrained(str(path))

    def load_trainable_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Swap in new weights between requests; the next generation uses ``version``."""
        with self._lock:
            load_trainable_state(self.model, state, self.lora.enabled)
            if self.lora.enabled:
                self._refresh_serve_model()
            self.weight_version = version

    @torch.no_grad()
    def _refresh_serve_model(self) -> None:
        """serve_model's linear weights = base + scaling * B @ A, for every LoRA layer.

        The sum is taken in float32 (one ``addmm`` a layer: one pass over the weights, where
        copy, product, scale and add took four) and rounded to the model's dtype once:
        adding a float32 delta into a bfloat16 copy term by term would round after each
        adapter.
        """
        for module, target in self._merge_targets():
            base = module.get_base_layer().weight
            weight = None
            for adapter in module.active_adapters:
                a, b = module.lora_A[adapter].weight.float(), module.lora_B[adapter].weight.float()
                weight = torch.addmm(base.float() if weight is None else weight, b, a, alpha=module.scaling[adapter])
            if weight is None:  # no adapter active: the base alone (a copy, never the base itself)
                weight = base.to(torch.float32, copy=True)
            if isinstance(target, (PackedLinear, PackedMember)):
                target.load(weight)
            else:
                target.weight.copy_(weight)

    def _merge_targets(self) -> list[tuple[Any, Any]]:
        """(LoRA layer of ``model``, the layer of ``serve_model`` its merge goes to), found
        once, and again after packing replaces serve_model's layers."""
        if self._merged is None:
            from peft.tuners.lora import LoraLayer

            serve = dict(self.serve_model.named_modules())
            self._merged = [(module, serve[name.removeprefix("base_model.model.")])
                            for name, module in self.model.named_modules() if isinstance(module, LoraLayer)]
        return self._merged
