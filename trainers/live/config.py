"""The live server's configuration: ``python -m trainers.serve key=value ...``.

Serving keys (port, auth, limits, sessions) and the learning keys the offline trainer
also has (method, lr, lora.*, judge.*, the clipped objective's). Overrides and errors work
as in ``trainers.run``: an unknown key or bad value fails with one sentence naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agents.policy import LoraSettings
from trainers.config import METHODS, ConfigError, JudgeConfig, _choice, _positive


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str = ""
    """Bearer token /v1/* requires; empty: $CLAWGYM_API_KEY, or no auth when that is unset too."""
    served_model_name: str = "clawgym"
    """The model id clients send; "default" and the model folder's name are accepted too."""
    model: str = "default"
    """default (SmolLM2-135M-Instruct) or a local transformers model directory."""
    out: str = ""
    """Run directory (live.sqlite, checkpoints, metrics); empty: runs/serve-<time>. Reusing
    one resumes: records kept, training continues from the last adapter."""
    # ---- generation ----------------------------------------------------------------------
    temperature: float = 0.6
    """Default sampling temperature (METHODS.md: 0.6 live); a request's own value wins."""
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
    # ---- learning ------------------------------------------------------------------------
    learn: bool = True
    """false: serve and record only."""
    method: str = "combine"
    lora: LoraSettings = field(default_factory=LoraSettings)
    lr: float = 1e-3
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    grad_clip: float = 1.0
    batch_size: int = 16
    """Trainable samples per optimizer step (weight version)."""
    epochs: int = 2
    minibatch_size: int = 8
    w_opd: float = 1.0
    w_rl: float = 1.0
    opd_clip: float = 5.0
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_beta: float = 0.0
    is_cap: float = 2.0
    max_staleness: int = 4
    """Samples more than this many versions behind the trainer are dropped."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        _choice("method", self.method, METHODS)
        _choice("last_turn", self.last_turn, ("score", "drop"))
        for name in ("port", "max_new_tokens", "max_context", "max_batch", "batch_size", "epochs",
                     "max_body_bytes"):
            _positive(name, getattr(self, name))
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if self.session_idle_s <= 0 or self.lr <= 0:
            raise ConfigError("session_idle_s and lr must be > 0")
        if not self.api_key:
            self.api_key = os.environ.get("CLAWGYM_API_KEY", "")
