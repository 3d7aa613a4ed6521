"""The live server's configuration: ``python -m trainers.serve key=value ...``.

Serving keys (port, auth, limits, sessions) and the learning keys the offline trainer
also has (method, lr, lora.*, judge.*, the clipped objective's). Overrides and errors work
as in ``trainers.run``: an unknown key or bad value fails with one sentence naming it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from trainers.config import ConfigError, UpdateConfig, _choice, _positive


@dataclass
class ServeConfig(UpdateConfig):
    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 serves other machines too."""
    port: int = 30000
    """Port to listen on."""
    api_key: str = ""
    """Bearer token /v1/* requires; empty: $CLAWGYM_API_KEY, or no auth when that is unset too."""
    api_keys: str = ""
    """A file of users' keys: lines ``<key> <user id>`` (``<key> <user id> admin`` for an admin;
    ``#`` comments), or JSON ``{"<key>": "<user id>"}`` / ``{"<key>": {"user": ..., "admin": true}}``.
    Each key is one user; /v1/* then needs one of them (api_key is not read). The file is read
    once at start and neither it nor its keys go to the run dir or the log."""
    adapters: str = "shared"
    """shared: one adapter every request uses and every turn trains; per_user: an adapter per user
    (named by its api_keys key, else by the body's ``user`` or ``X-User-Id``), trained only on that
    user's turns and served in batches that mix users (with engine=vllm|sglang, by the server's
    multi-LoRA serving: each user's adapter loaded there under its own name)."""
    max_adapters: int = 0
    """adapters=per_user: users' adapters held in memory at once (LRU; the rest on disk under
    <out>/adapters); 0: 4 x max_batch. At least max_batch, so any batch fits. With
    engine=vllm|sglang: users' adapters loaded on the server at once (engine.max_loaded_loras)."""
    max_users: int = 1000
    """adapters=per_user: at most this many users have a record or an adapter (each trained one
    holds ~60 MB on disk with the default model: adapter plus AdamW state); a request naming a
    new user beyond it gets a 429. Without api_keys any client can name a new user; 0: no limit."""
    served_model_name: str = "clawgym"
    """The model id clients send; "default" and the model folder's name are accepted too."""
    out: str = ""
    """Run directory (live.sqlite, checkpoints, metrics); empty: runs/serve-<time>. Reusing
    one resumes: records kept, training continues from the last adapter."""
    # ---- generation ----------------------------------------------------------------------
    temperature: float = 0.6
    """Default sampling temperature (OpenClaw-RL's live value: 0.6); a request's own value wins."""
    max_new_tokens: int = 256
    """Default completion limit; a request's max_tokens / max_completion_tokens wins."""
    max_context: int = 2048
    """Prompt + completion tokens; a longer prompt gets a 400 (context_length_exceeded)."""
    max_batch: int = 16
    """Concurrent requests generated together in one batch."""
    batch_wait_ms: float = 10.0
    """How long the first request of a batch waits for company."""
    max_body_bytes: int = 4 << 20
    """Requests over this size get a 413."""
    # ---- sessions ------------------------------------------------------------------------
    session_idle_s: float = 900.0
    """A session with no request for this long is closed; its last turn is then settled."""
    last_turn: str = "score"
    """A closed session's last turn (no next state): score (judged on an empty next state)
    or drop."""
    # ---- learning (the update's own keys come from UpdateConfig) -----------------------
    learn: bool = True
    """false: serve and record only."""
    batch_size: int = 16
    """Trainable samples per optimizer step (weight version)."""
    train_after_s: float | None = 60.0
    """Train on fewer than batch_size samples once the oldest has waited this long, so a
    server with one user keeps learning; none: only full batches."""
    train_cut: bool = True
    """Replies cut at max_tokens are trained on: the user read them and answered."""
    max_staleness: int = 4
    """Samples more than this many versions behind the trainer are dropped."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("last_turn", self.last_turn, ("score", "drop"))
        _choice("adapters", self.adapters, ("shared", "per_user"))
        for name in ("port", "max_new_tokens", "max_context", "max_batch", "batch_size", "max_body_bytes"):
            _positive(name, getattr(self, name))
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if self.train_after_s is not None and self.train_after_s < 0:
            raise ConfigError(f"train_after_s must be >= 0 (or none), got {self.train_after_s}")
        if self.session_idle_s <= 0:
            raise ConfigError(f"session_idle_s must be > 0, got {self.session_idle_s}")
        if not self.api_key:
            self.api_key = os.environ.get("CLAWGYM_API_KEY", "")
        if self.max_users < 0:
            raise ConfigError(f"max_users must be >= 0 (0: no limit), got {self.max_users}")
        if self.max_adapters < 0:
            raise ConfigError(f"max_adapters must be >= 0 (0: 4 x max_batch), got {self.max_adapters}")
        if self.adapters == "per_user":
            if not self.lora.enabled:
                raise ConfigError("adapters=per_user keeps a LoRA adapter per user; keep lora.enabled=true")
            if self.compute != "local":
                raise ConfigError("adapters=per_user trains each user's adapter on this machine; drop compute=")
            if 0 < self.max_adapters < self.max_batch:
                raise ConfigError(f"max_adapters={self.max_adapters} is below max_batch={self.max_batch}: a batch "
                                  "of distinct users would not fit; raise max_adapters or lower max_batch")
            if self.engine.kind != "hf" and not (self.engine.max_loras or self.engine.max_loaded_loras):
                # a launched engine batches up to max_batch users' adapters and keeps max_adapters loaded
                self.engine = dataclasses.replace(self.engine, max_loras=self.max_batch,
                                                  max_loaded_loras=self.adapter_capacity())
        if self.api_keys and not os.path.isfile(self.api_keys):
            raise ConfigError(f"api_keys={self.api_keys} is not a file; give the path of a file of "
                              "'<key> <user id>' lines (or JSON)")

    def adapter_capacity(self) -> int:
        """How many users' adapters are held in memory with adapters=per_user."""
        return self.max_adapters or 4 * self.max_batch
