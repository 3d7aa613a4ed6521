"""A clawgym Policy over a Tinker ``SamplingClient``: prompts are templated and tokenized here,
exactly as :class:`agents.policy.TransformersPolicy` does it; the sampled ids and their
log-probs come back from the service and are never re-tokenized.

Log-probs are those Tinker returns: of the model at temperature 1, whatever the sampling
temperature (skyrl-tx's are), which is also what Tinker's losses compare the learner's
against. A completion therefore records ``temperature=1.0``, and the OPD teacher's log-probs
(``compute_logprobs``) are taken at that temperature too. Sampling at a temperature other
than 1 then trains with an importance ratio that is 1 on-policy but not the exact
correction; the chat demo trains at ``temperature=1.0``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agents.chat_format import render_prompt
from agents.policy import Completion, SamplingParams
from envs.messages import Message, parse_text_action


class TinkerPolicy:
    """Samples and scores through Tinker. ``sampler`` is the SamplingClient of the weights of
    ``weight_version``; :meth:`swap` installs the next. ``base`` is the base model's own
    (``adapter=False``: the OPD teacher with ``opd_teacher=base``, the replay gate's base
    teacher), made on first use. ``seed`` and the call count seed each request, so a run
    samples the same again. Thread-safe (one lock around the swap)."""

    def __init__(self, service: Any, base_model: str, tokenizer: Any, sampler: Any, *, max_context: int,
                 seed: int = 0) -> None:
        self.service = service
        self.base_model = base_model
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.weight_version = 0
        self._sampler = sampler
        self._base: Any = None
        self._seed = seed
        self._calls = 0
        self._lock = threading.Lock()

    def reseed(self, offset: int) -> None:
        """Make the next requests' seeds a function of ``offset`` (the training step)."""
        with self._lock:
            self._calls = offset

    def swap(self, sampler: Any, version: int) -> None:
        """The next generations sample ``sampler`` as ``version``; requests in flight finish on theirs."""
        with self._lock:
            self._sampler, self.weight_version = sampler, version

    @property
    def sampler(self) -> Any:
        """The SamplingClient of ``weight_version``."""
        return self._sampler

    def _client(self, adapter: bool) -> Any:
        with self._lock:
            if adapter:
                return self._sampler
            if self._base is None:
                self._base = self.service.create_sampling_client(base_model=self.base_model)
            return self._base

    # ---- the Policy protocol ----------------------------------------------------------
    def encode(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        text = render_prompt(self.tokenizer, messages, tools)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None = None,
                 sampling: SamplingParams = SamplingParams()) -> list[Completion]:
        encoded = [self.encode(m, tools[i] if tools else None) for i, m in enumerate(prompts)]
        return self.generate_ids(encoded, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], sampling: SamplingParams,
                     adapter: bool = True) -> list[Completion]:
        """Sample each prompt once; every request is sent before any answer is awaited, so the
        service batches them. ``adapter=False`` samples the base model."""
        from tinker import types

        with self._lock:
            version, calls = self.weight_version, self._calls
            self._calls += 1
        client = self._client(adapter)
        pending: list[Any] = []
        for row, prompt in enumerate(prompt_ids):
            room = min(sampling.max_new_tokens, self.max_context - len(prompt))
            if room <= 0:
                pending.append(None)
                continue
            params = types.SamplingParams(max_tokens=room, temperature=sampling.temperature, top_p=sampling.top_p,
                                          seed=(self._seed * 1_000_003 + calls * 4096 + row) % (1 << 31),
                                          stop=[self.tokenizer.eos_token_id])
            pending.append(client.sample(types.ModelInput.from_ints(list(prompt)), 1, params))
        out = []
        for prompt, future in zip(prompt_ids, pending):
            if future is None:
                out.append(self._completion(prompt, [], [], "context", version, calls))
                continue
            sequence = future.result().sequences[0]
            tokens = list(sequence.tokens)
            logprobs = list(sequence.logprobs or [])
            if len(logprobs) != len(tokens):
                raise RuntimeError(f"the Tinker sampler returned {len(logprobs)} log-probs for {len(tokens)} tokens; "
                                   "it must return one per sampled token")
            out.append(self._completion(prompt, tokens, logprobs, sequence.stop_reason, version, calls))
        return out

    def _completion(self, prompt: list[int], tokens: list[int], logprobs: list[float], reason: str, version: int,
                    calls: int) -> Completion:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        return Completion(message=parse_text_action(text, call_id_prefix=f"call_{calls}"), text=text,
                          prompt_ids=list(prompt), completion_ids=tokens, logprobs=logprobs, weight_version=version,
                          finish_reason=reason, temperature=1.0)

    # ---- scoring: the OPD teacher --------------------------------------------------------
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]], *, adapter: bool = True,
              temperature: float = 1.0) -> list[list[float]]:
        """Teacher-forced log-probs of each completion given its prompt, from the sampling
        side (``compute_logprobs`` over prompt + completion); ``adapter=False`` reads the base
        model. Tinker reads the model at temperature 1 only."""
        from tinker import types

        if temperature != 1.0:
            raise ValueError(f"Tinker's compute_logprobs reads the model at temperature 1, not {temperature}; "
                             "score completions whose log-probs are at temperature 1 (TinkerPolicy's are)")
        client = self._client(adapter)
        pending = [client.compute_logprobs(types.ModelInput.from_ints(list(p) + list(c))) if c else None
                   for p, c in zip(prompt_ids, completion_ids)]
        out: list[list[float]] = []
        for completion, future in zip(completion_ids, pending):
            if future is None:
                out.append([])
                continue
            # the last len(completion) entries are the completion's, whether the service
            # leads with a None for the first prompt token (Tinker) or leaves it out (skyrl-tx)
            values = list(future.result())[-len(completion):]
            if len(values) != len(completion) or any(v is None for v in values):
                raise RuntimeError("Tinker's compute_logprobs left a completion token without a log-prob; "
                                   "the service must score every token after the first")
            out.append([float(v) for v in values])
        return out


def model_context(model_dir: Path) -> int:
    """The model's own context length (``max_position_embeddings``), 2048 when unstated."""
    import json

    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)
