"""vLLM's wire format for :class:`~agents.engines.base.EnginePolicy`.

Read from vLLM 0.32's own code and documentation:

- Generation: ``POST /v1/completions`` with ``prompt`` as a list of token ids, ``model``
  the base model's name or a LoRA adapter's, ``logprobs=k`` and
  ``return_tokens_as_token_ids=true``, so ``choices[0].logprobs.tokens`` are
  ``"token_id:<id>"`` strings beside ``token_logprobs``; ``return_token_ids=true`` adds
  ``choices[0].token_ids``, which must agree. ``seed`` makes a row's sample reproducible;
  ``stop_token_ids`` ends it at EOS, which stays in the token ids. ``top_k=-1`` and
  ``min_p=0`` are sent explicitly: the server's default ``--generation-config auto`` would
  take them from the model's generation_config
  (vllm/entrypoints/openai/completion/protocol.py; docs.vllm.ai/en/latest/serving/openai_compatible_server/).
- Log-probs: vLLM reports ``raw_logprobs`` (before temperature) unless the server runs with
  ``--logprobs-mode processed_logprobs``: "Processed means the values after applying all
  processors, including temperature and top_k/top_p" (vllm/config/model.py,
  ``ModelConfig.logprobs_mode``). In vllm/v1/sample/sampler.py that is
  ``log_softmax(logits / T)`` for sampled requests and ``log_softmax(logits)`` for greedy
  ones, which is :class:`~agents.policy.Completion`'s contract with top_p=1. So a launched
  server gets that flag; a server at engine.url is checked for it on connect.
- LoRA: ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and
  ``POST /v1/unload_lora_adapter`` ``{"lora_name"}``, present only when the server runs with
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora``; a request names the
  adapter in ``model``. They answer plain text on success
  (docs.vllm.ai/en/latest/features/lora/ "Dynamically serving LoRA Adapters";
  vllm/entrypoints/serve/lora/api_router.py). ``--max-lora-rank`` must be one of 8, 16, 32,
  ...; ``--max-loras`` bounds the adapters in one batch, ``--max-cpu-loras`` (at least that) the
  adapters kept in memory, least recently used evicted and read again from their path when
  next named (vllm/config/lora.py, vllm/lora/worker_manager.py). Unloading only removes the
  name: a request already running keeps its adapter (vllm/entrypoints/openai/models/serving.py).
- Launch: ``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs);
  ready once ``GET /health`` answers 200. On a CPU, ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes
  the KV cache (docs.vllm.ai/en/latest/getting_started/installation/cpu/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.engines.base import MAX_LOADED_ADAPTERS, Engine, EngineError, GenerationRequest, Http, Sampled, \
    ServerSetup, malformed

TOKEN_ID_PREFIX = "token_id:"
KV_CACHE_GIB = "2"
"""A 135M model's KV cache for a few dozen 2k-token rows needs well under this."""


class VLLM(Engine):
    name = "vllm"
    logprob_fix = ("start vLLM with --logprobs-mode processed_logprobs (engine.launch=true does), "
                   "and keep SamplingParams.top_p=1")

    def __init__(self, max_model_len: int = 2048, dtype: str = "float32") -> None:
        self.max_model_len = max_model_len
        self.dtype = dtype

    def launch(self, model_dir: Path, host: str, port: int, max_lora_rank: int,
               max_loras: int = MAX_LOADED_ADAPTERS, max_loaded_loras: int = MAX_LOADED_ADAPTERS) -> ServerSetup:
        argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", "base", "--host", host, "--port", str(port),
                "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
                "--enable-lora", "--max-lora-rank", str(max_lora_rank),
                "--max-loras", str(max_loras), "--max-cpu-loras", str(max(max_loaded_loras, max_loras)),
                "--logprobs-mode", "processed_logprobs", "--max-logprobs", "20", "--disable-log-stats"]
        env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB,
               "VLLM_LOGGING_LEVEL": "INFO"}
        return ServerSetup(argv, env, "/health")

    def discover(self, http: Http) -> str:
        listing = http.get("/v1/models")
        models = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(models, list) or not models:
            raise malformed(self.name, "GET /v1/models lists no model", listing)
        base = [m for m in models if isinstance(m, dict) and not m.get("parent") and isinstance(m.get("id"), str)]
        if not base:
            raise malformed(self.name, "GET /v1/models lists no base model", listing)
        return str(base[0]["id"])

    def generate(self, http: Http, model: str, request: GenerationRequest, top_logprobs: int = 0,
                 ) -> tuple[Sampled, list[dict[int, float]]]:
        body = {"model": request.adapter or model, "prompt": request.prompt_ids,
                "max_tokens": request.max_new_tokens, "temperature": request.temperature,
                "top_p": request.top_p, "top_k": -1, "min_p": 0.0, "seed": request.seed, "n": 1,
                "logprobs": top_logprobs, "return_tokens_as_token_ids": True, "return_token_ids": True,
                "stop_token_ids": request.stop_token_ids, "skip_special_tokens": True}
        answer = http.post("/v1/completions", body)
        try:
            choice = answer["choices"][0]
            logprobs = choice["logprobs"]
            tokens = [_token_id(t) for t in logprobs["tokens"]]
            values = [float(v) for v in logprobs["token_logprobs"]]
            tops = [{_token_id(k): float(v) for k, v in (step or {}).items()} for step in logprobs["top_logprobs"]]
            reason = str(choice["finish_reason"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise malformed(self.name, f"/v1/completions: {type(exc).__name__} {exc}", answer) from None
        if choice.get("token_ids") is not None and list(choice["token_ids"]) != tokens:
            raise malformed(self.name, "choices[0].token_ids disagree with its logprobs.tokens", answer)
        return Sampled(tokens, values, reason), tops

    def load_adapter(self, http: Http, name: str, path: Path) -> None:
        _ok(self.name, http.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}), "load")

    def unload_adapter(self, http: Http, name: str) -> None:
        _ok(self.name, http.post("/v1/unload_lora_adapter", {"lora_name": name}), "unload")


def _token_id(token: Any) -> int:
    if not isinstance(token, str) or not token.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"token {token!r} is not 'token_id:<id>' (return_tokens_as_token_ids ignored?)")
    return int(token[len(TOKEN_ID_PREFIX):])


def _ok(engine: str, answer: Any, what: str) -> None:
    # Success is HTTP 200 with a plain-text message; refusals arrive as HTTP errors (Http raises).
    if isinstance(answer, dict) and answer.get("error"):
        raise EngineError(f"the {engine} server refused to {what} a LoRA adapter: {answer['error']}")
