"""The live server: ``python -m trainers.serve [key=value ...]``, and ``export``.

    python -m trainers.serve method=combine model=default batch_size=16 port=30000
    python -m trainers.serve export run_dir=runs/serve-... [out=trajectories.jsonl] [user=<user id>]

The first serves an OpenAI-compatible API on http://<host>:<port>/v1 that records every
turn, scores it from the session's next request, trains a LoRA adapter in the background
and swaps it in between requests (trainers/live). The second writes a run's record as
JSONL, one session per line (only one user's with ``user=``, for adapters=per_user runs),
which ``python -m trainers.run data=<file>`` trains on offline. ``python -m trainers.serve --help`` lists every key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from trainers.config import ConfigError, apply_overrides, config_help  # noqa: E402
from trainers.live.config import ServeConfig  # noqa: E402
from trainers.live.store import Store, TurnRecord  # noqa: E402


def _help() -> str:
    return config_help(ServeConfig, __doc__ or "")


def export(run_dir: Path, out: Path, user: str | None = None) -> int:
    """Write the record as JSONL, one session per line (only ``user``'s sessions, when
    given); returns the number of sessions."""
    path = run_dir / "live.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run_dir= must be a trainers.serve run directory")
    store = Store(path)
    count = 0
    tmp = out.with_suffix(out.suffix + ".tmp")
    try:
        with tmp.open("w") as fh:
            for session_id, turns in store.sessions(user):
                fh.write(json.dumps({"session_id": session_id, "turns": [export_turn(t) for t in turns]}) + "\n")
                count += 1
    finally:
        store.close()
    tmp.replace(out)
    return count


EXPORT_OMITS = ("id", "session_id", "closed", "user_id")
"""Record fields an export leaves out: the database row id, the session id (each line
carries it once), the closed flag and the user (a per-user export names it once)."""


def export_turn(turn: TurnRecord) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(turn).items() if k not in EXPORT_OMITS}


def _export_main(argv: list[str]) -> int:
    options = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(options) - {"run_dir", "out", "user"}) + [a for a in argv if "=" not in a]
    if unknown or "run_dir" not in options:
        print("usage: python -m trainers.serve export run_dir=<serve run dir> [out=<file.jsonl>] [user=<user id>]"
              + (f" (unknown: {', '.join(unknown)})" if unknown else ""), file=sys.stderr)
        return 2
    run_dir = Path(options["run_dir"])
    out = Path(options.get("out") or run_dir / "trajectories.jsonl")
    try:
        count = export(run_dir, out, options.get("user") or None)
    except FileNotFoundError as exc:
        print(f"trainers.serve export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {count} sessions to {out}")
    return 0


def build(config: ServeConfig, out: Path) -> tuple[Any, Any]:
    """The app and its backend for ``config`` in run dir ``out`` (tests use this directly)."""
    from agents.engines import with_engine
    from agents.policy import TransformersPolicy
    from agents.server import create_app
    from trainers.judge import make_judge
    from trainers.live.learner import Learner
    from trainers.live.service import LiveService
    from trainers.live.store import Store
    from trainers.live.user_learner import UserLearner
    from trainers.live.users import UserAdapters, read_keys
    from trainers.rundir import RunDir

    keys = read_keys(config.api_keys) if config.api_keys else None  # a bad file fails before the model loads
    device, dtype = config.placement()
    config = dataclasses.replace(config, device=device, dtype=dtype)  # config.yaml records what auto became
    run = RunDir(out)
    saved = {k: v for k, v in dataclasses.asdict(config).items() if k != "api_key"}  # never write the secret
    run.save_config(saved)
    local = TransformersPolicy(config.model, config.lora, device=config.device, dtype=config.dtype,
                               max_batch=config.max_batch, max_context=config.max_context, seed=config.seed)
    policy = with_engine(local, config.engine, seed=config.seed)  # engine=vllm|sglang: replies sample there
    store = Store(out / "live.sqlite")
    adapters = None
    learner: Learner | None = None
    if config.adapters == "per_user":  # built before anything merges into the policy's sampling copy
        adapters = UserAdapters(local, out / "adapters", config.adapter_capacity())
        if config.learn:
            learner = UserLearner(config, local, store, run, make_judge(config.judge, local), adapters)
    elif config.learn:
        learner = Learner(config, policy, store, run, make_judge(config.judge, policy))
    service = LiveService(config, policy, store, learner, adapters)
    if learner is not None:
        learner.start()
    return create_app(service, api_key=config.api_key, max_body_bytes=config.max_body_bytes, keys=keys), service


@contextlib.contextmanager
def serve_in_thread(config: ServeConfig, out: Path, port: int = 0) -> Iterator[tuple[str, Any]]:
    """Run the server on loopback in a background thread: ``(base_url, backend)``.
    For tests and benchmarks; ``port=0`` picks a free port."""
    import socket

    import uvicorn

    if port == 0:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    app, service = build(config, out)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        if not server.started:
            raise RuntimeError(f"the server did not start on port {port}")
        yield f"http://127.0.0.1:{port}/v1", service
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        service.close()
        service.store.close()
        if hasattr(service.policy, "close"):  # an engine policy stops the server it launched
            service.policy.close()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(_help())
        return 0
    if argv and argv[0] == "export":
        return _export_main(argv[1:])
    try:
        config = apply_overrides(ServeConfig(), argv)
    except ConfigError as exc:
        print(f"trainers.serve: {exc}", file=sys.stderr)
        return 2
    out = Path(config.out or f"runs/serve-{time.strftime('%Y%m%d-%H%M%S')}")
    import torch
    import uvicorn

    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    try:
        app, service = build(config, out)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"trainers.serve: {exc}", file=sys.stderr)
        return 2
    print(f"serving {config.served_model_name!r} on http://{config.host}:{config.port}/v1 "
          f"(weight version {service.policy.weight_version}, method {config.method}, "
          f"{'learning' if config.learn else 'not learning'}"
          f"{', an adapter per user' if config.adapters == 'per_user' else ''}, run dir {out})", flush=True)
    try:
        uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_graceful_shutdown=10)
    finally:
        service.close()
        service.store.close()
        if hasattr(service.policy, "close"):  # an engine policy stops the server it launched
            service.policy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
