"""SGLang's wire format for :class:`~agents.engines.base.EnginePolicy`.

Read from SGLang's documentation and code (it cannot run on this project's CPU machines:
tests/agents/test_engines_sglang.py checks this mapping against its documented shapes):

- Generation: ``POST /generate`` with ``input_ids``, ``sampling_params`` (``max_new_tokens``,
  ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``stop_token_ids``, ``sampling_seed``),
  ``return_logprob=true`` (``logprob_start_len`` left at its default -1: output tokens
  only), ``top_logprobs_num`` and ``lora_path`` naming a loaded adapter (None: the base
  model). The answer carries ``meta_info.output_token_logprobs`` as
  ``[logprob, token_id, text-or-null]`` triples, one per sampled token,
  ``meta_info.output_top_logprobs`` as a list of such triples per position, and
  ``meta_info.finish_reason`` as ``{"type": "stop" | "length", ...}``
  (docs.sglang.io/basic_usage/sampling_params.html, docs.sglang.io/basic_usage/native_api.html;
  python/sglang/srt/managers/tokenizer_manager.py ``detokenize_logprob_tokens``).
  ``top_k=-1`` and ``min_p=0`` are sent explicitly because the server's default
  ``--sampling-defaults model`` would take them from the model's generation_config.
- Log-probs: SGLang's sampler reports ``log_softmax(logits / T)`` (greedy: T=1, it maps
  temperature 0 to top_k=1 at T=1) unless ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is set, which
  switches to the pre-temperature values (python/sglang/srt/layers/sampler.py); a launched
  server gets it unset, a server at engine.url is checked on connect.
- LoRA: ``POST /load_lora_adapter`` ``{"lora_name", "lora_path"}`` and
  ``POST /unload_lora_adapter`` ``{"lora_name"}``; with dynamic loading the server needs
  ``--enable-lora``, ``--max-lora-rank`` and ``--lora-target-modules`` at startup
  (docs.sglang.io/advanced_features/lora.html "Dynamic LoRA loading"). ``--max-loras-per-batch``
  bounds adapters in one batch, ``--max-loaded-loras`` (at least that) those held in CPU
  memory. A refusal may come as HTTP 200 with ``"success": false``. Per-user adapters
  (agents/engines/users.py) use the same calls, one name per user and version; like
  everything here, untested against a real SGLang server.
- Launch: ``python -m sglang.launch_server``; ready once ``GET /health`` answers 200.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.engines.base import MAX_LOADED_ADAPTERS, Engine, EngineError, GenerationRequest, Http, Sampled, \
    ServerSetup, malformed


class SGLang(Engine):
    name = "sglang"
    logprob_fix = "start SGLang without SGLANG_RETURN_ORIGINAL_LOGPROB (engine.launch=true does)"

    def __init__(self, max_model_len: int = 2048, dtype: str = "float32") -> None:
        self.max_model_len = max_model_len
        self.dtype = dtype

    def launch(self, model_dir: Path, host: str, port: int, max_lora_rank: int,
               max_loras: int = MAX_LOADED_ADAPTERS, max_loaded_loras: int = MAX_LOADED_ADAPTERS) -> ServerSetup:
        argv = ["-m", "sglang.launch_server", "--model-path", str(model_dir), "--host", host, "--port", str(port),
                "--dtype", self.dtype, "--context-length", str(self.max_model_len),
                "--enable-lora", "--max-lora-rank", str(max_lora_rank), "--lora-target-modules", "all",
                "--max-loras-per-batch", str(max_loras),
                "--max-loaded-loras", str(max(max_loaded_loras, max_loras)), "--log-level", "warning"]
        return ServerSetup(argv, {"SGLANG_RETURN_ORIGINAL_LOGPROB": "false"}, "/health")

    def discover(self, http: Http) -> str:
        info = http.get("/get_model_info")
        if not isinstance(info, dict) or "model_path" not in info:
            raise malformed(self.name, "GET /get_model_info has no model_path", info)
        return ""  # /generate names no model; adapters go in lora_path

    def generate(self, http: Http, model: str, request: GenerationRequest, top_logprobs: int = 0,
                 ) -> tuple[Sampled, list[dict[int, float]]]:
        body: dict[str, Any] = {
            "input_ids": request.prompt_ids,
            "sampling_params": {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature,
                                "top_p": request.top_p, "top_k": -1, "min_p": 0.0,
                                "stop_token_ids": request.stop_token_ids, "sampling_seed": request.seed},
            "return_logprob": True, "top_logprobs_num": top_logprobs, "lora_path": request.adapter,
        }
        answer = http.post("/generate", body)
        try:
            meta = answer["meta_info"]
            triples = meta["output_token_logprobs"]
            tokens = [int(t[1]) for t in triples]
            values = [float(t[0]) for t in triples]
            tops = [{int(t[1]): float(t[0]) for t in step or []} for step in meta.get("output_top_logprobs") or []]
            finish = meta["finish_reason"]
            reason = str(finish["type"] if isinstance(finish, dict) else finish)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise malformed(self.name, f"/generate: {type(exc).__name__} {exc}", answer) from None
        if answer.get("output_ids") is not None and list(answer["output_ids"]) != tokens:
            raise malformed(self.name, "output_ids disagree with meta_info.output_token_logprobs", answer)
        return Sampled(tokens, values, reason), tops

    def load_adapter(self, http: Http, name: str, path: Path) -> None:
        _ok(self.name, http.post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}), "load")

    def unload_adapter(self, http: Http, name: str) -> None:
        _ok(self.name, http.post("/unload_lora_adapter", {"lora_name": name}), "unload")


def _ok(engine: str, answer: Any, what: str) -> None:
    if isinstance(answer, dict) and answer.get("success") is False:
        raise EngineError(f"the {engine} server refused to {what} a LoRA adapter: "
                          f"{answer.get('error_message') or answer}")
