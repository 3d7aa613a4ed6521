"""The engine policy's shared part (agents/engines/base.py): settings, faults, launching.

Faults are real: a port nobody listens on, a server that accepts and never answers, one
that answers something else than its API documents, a server command that dies at
startup, a server whose process group must be stopped at exit. The request/response
mapping of each engine is tested in test_engines_sglang.py (documented shapes) and
test_engines_vllm.py (a real vLLM, opt-in).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from agents.engines import EngineError, EnginePolicy, EngineSettings, with_engine
from agents.engines.base import max_lora_rank
from agents.engines.server import LaunchedServer
from agents.engines.vllm import VLLM
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy
from tests.helpers import http_server
from trainers.config import ConfigError, TrainConfig, apply_overrides, from_dict, to_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local() -> TransformersPolicy:
    return TransformersPolicy(seed=0)


# ---- settings ------------------------------------------------------------------------------------
def test_engine_shorthand_sets_the_kind_and_the_rest_are_sub_keys():
    config = apply_overrides(TrainConfig(), ["engine=vllm", "engine.url=http://127.0.0.1:8000", "engine.timeout_s=5"])
    assert (config.engine.kind, config.engine.url, config.engine.timeout_s) == ("vllm", "http://127.0.0.1:8000", 5.0)
    assert from_dict(to_dict(config)).engine == config.engine  # a resumed run keeps its engine
    assert apply_overrides(TrainConfig(), ["engine.kind=sglang", "engine.launch=true"]).engine.launch


@pytest.mark.parametrize("items, words", [
    (["engine=vllm"], "needs either engine.url=<base URL of a running server> or engine.launch=true"),
    (["engine=vllm", "engine.url=http://x:1", "engine.launch=true"], "not both"),
    (["engine.url=http://x:1"], "engine.url need a server engine; add engine=vllm or engine=sglang"),
    (["engine=tgi"], "engine.kind='tgi' is not allowed; choose one of: hf, vllm, sglang"),
    (["engine=vllm", "engine.url=localhost:8000"], "must be an http:// or https:// URL"),
    (["engine=sglang", "engine.launch=true", "lora.enabled=false"], "keep lora.enabled=true"),
    (["engine.tiemout_s=3"], "unknown config key 'engine.tiemout_s'; did you mean 'engine.timeout_s'"),
])
def test_bad_engine_settings_say_what_to_do(items, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace("?", r"\?")):
        apply_overrides(TrainConfig(), items)


def test_hf_is_the_local_policy_itself(local):
    assert with_engine(local, EngineSettings()) is local


def test_max_lora_rank_takes_the_smallest_slot_vllm_accepts():
    assert [max_lora_rank(r) for r in (1, 8, 9, 16, 33, 512)] == [8, 8, 16, 16, 64, 512]
    with pytest.raises(ValueError, match="above the 512"):
        max_lora_rank(1024)


def test_full_weight_training_is_refused_before_any_request(tmp_path):
    full = TransformersPolicy(lora=LoraSettings(enabled=False))
    with pytest.raises(ValueError, match="keep lora.enabled=true"):
        EnginePolicy(full, VLLM(), EngineSettings(kind="vllm", url="http://127.0.0.1:9"))


# ---- faults -----------------------------------------------------------------------------------
AT_ONCE_S = 30.0
"""The bound on failing at once rather than hanging. The paths it times take about a second
here (a refused connection and a backoff of at most 0.5 s, or one 0.5 s timeout) and stay
well under it on a loaded machine; what it rules out takes minutes or forever."""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_server_that_is_down_is_a_clear_error_after_the_retries(local):
    settings = EngineSettings(kind="vllm", url=f"http://127.0.0.1:{_closed_port()}", max_retries=1, timeout_s=120)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"failed GET /v1/models 2 times \(last: .*refused.*check that it is running"):
        EnginePolicy(local, VLLM(), settings)
    assert time.monotonic() - started < AT_ONCE_S  # a refusal is not waited on for timeout_s


def test_a_server_that_never_answers_times_out_instead_of_hanging(local):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never replies
    try:
        settings = EngineSettings(kind="vllm", url=f"http://127.0.0.1:{listener.getsockname()[1]}", max_retries=0,
                                  timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"no answer within engine.timeout_s=0.5 s"):
            EnginePolicy(local, VLLM(), settings)
        assert time.monotonic() - started < AT_ONCE_S
    finally:
        listener.close()


def _server(routes: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    """Answers each path with its JSON (or, for a str, that text); a callable gets the body."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            route = routes.get(self.path.split("?")[0])
            payload = route(body) if callable(route) else route
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(200 if route is not None else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    return Handler


MODELS = {"data": [{"id": "base", "object": "model", "parent": None}]}


def _completion(tokens: list[int], logprobs: list[float], temperature: float, top: int) -> dict[str, Any]:
    tops = [{f"token_id:{100 + j}": (-0.5 - j) / temperature for j in range(max(top, 1))} for _ in tokens]
    return {"choices": [{"index": 0, "text": "", "finish_reason": "length", "token_ids": tokens,
                         "logprobs": {"tokens": [f"token_id:{t}" for t in tokens], "token_logprobs": logprobs,
                                      "top_logprobs": tops}}]}


def _probe_then(answer: Any) -> Any:
    """A /v1/completions route that passes the log-prob probe, then answers ``answer``."""

    def route(body: dict[str, Any]) -> Any:
        if body["logprobs"]:
            return _completion([100], [-0.5 / body["temperature"]], body["temperature"], body["logprobs"])
        return answer(body) if callable(answer) else answer

    return route


@pytest.mark.parametrize("answer, words", [
    ("<html>502 Bad Gateway</html>", "documented shape"),
    ({"choices": [{"text": "hi", "finish_reason": "stop"}]}, "KeyError 'logprobs'"),
    (lambda b: _completion([5, 6], [-0.1], 1.0, 0), "2 tokens but 1 log-probs"),
    (lambda b: _completion([5, 999999], [-0.1, -0.2], 1.0, 0), "token ids outside the tokenizer"),
    (lambda b: _completion([5, 6], [-0.1, 3.0], 1.0, 0), "log-probs that are not finite and <= 0"),
    (lambda b: {**_completion([5], [-0.1], 1.0, 0), "choices": [{**_completion([5], [-0.1], 1.0, 0)["choices"][0],
                                                                 "token_ids": [7]}]}, "disagree"),
])
def test_an_answer_that_is_not_the_documented_shape_is_refused(local, answer, words):
    with http_server(_server({"/v1/models": MODELS, "/v1/completions": _probe_then(answer)})) as url:
        policy = EnginePolicy(local, VLLM(), EngineSettings(kind="vllm", url=url.removesuffix("/v1"), max_retries=0))
        try:
            with pytest.raises(EngineError, match=words):
                policy.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4))
        finally:
            policy.close()


def test_a_rollout_whose_server_dies_surfaces_as_an_error_message(local):
    """The vector env loop (trainers.rollout.collect) gets the error, not a hang."""
    import envs
    from trainers.rollout import Job, collect

    with http_server(_server({"/v1/models": MODELS, "/v1/completions": _probe_then(lambda b: 1 / 0)})) as url:
        policy = EnginePolicy(local, VLLM(), EngineSettings(kind="vllm", url=url.removesuffix("/v1"), max_retries=1,
                                                            timeout_s=2))
    # the server is gone now (a ZeroDivisionError would only have killed the handler thread)
    vec = envs.make_vec("chat", 2, backend="thread")
    try:
        started = time.monotonic()
        with pytest.raises(EngineError, match="failed POST /v1/completions 2 times"):
            collect(vec, policy, [Job(0, None, 1), Job(0, None, 1)], SamplingParams(max_new_tokens=4))
        assert time.monotonic() - started < AT_ONCE_S
    finally:
        vec.close()
        policy.close()


# ---- launching ----------------------------------------------------------------------------------
def test_launch_without_the_engine_venv_says_to_run_make_engine(local, tmp_path):
    settings = EngineSettings(kind="vllm", launch=True, python=str(tmp_path / "nowhere" / "python"))
    with pytest.raises(EngineError, match="run `make engine`"):
        EnginePolicy(local, VLLM(), settings)


def test_a_server_that_dies_at_startup_is_reported_with_its_log(local, tmp_path):
    # This interpreter has no vllm: the real launch command fails as a missing install would.
    settings = EngineSettings(kind="vllm", launch=True, python=sys.executable, startup_timeout_s=120,
                              adapter_dir=str(tmp_path))
    with pytest.raises(EngineError, match=r"(?s)exited during startup \(exit code 1\).*No module named 'vllm'"):
        EnginePolicy(local, VLLM(), settings)


def test_launch_flags_follow_the_vllm_docs():
    setup = VLLM(max_model_len=1024).launch(Path("/m"), "127.0.0.1", 8011, 16)
    argv = setup.argv
    for flag, value in (("--model", "/m"), ("--port", "8011"), ("--max-lora-rank", "16"),
                        ("--logprobs-mode", "processed_logprobs"), ("--max-model-len", "1024"), ("--dtype", "float32")):
        assert argv[argv.index(flag) + 1] == value
    assert "--enable-lora" in argv and setup.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


GRANDCHILD = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print(child.pid, flush=True)
    time.sleep(300)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead, only not yet reaped
        return fh.read().split(")")[-1].split()[0] != "Z"


def _grandchild(log: Path) -> int:
    for _ in range(100):
        if log.exists() and log.read_text().strip():
            return int(log.read_text().split()[0])
        time.sleep(0.1)
    raise AssertionError("the server's child never started")


def test_stop_ends_the_servers_whole_process_group(tmp_path):
    server = LaunchedServer([sys.executable, "-c", GRANDCHILD], {}, tmp_path / "server.log")
    worker = _grandchild(tmp_path / "server.log")
    server.stop()
    assert server.process.poll() is not None
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def test_a_launched_server_is_stopped_when_the_interpreter_exits(tmp_path):
    log = tmp_path / "server.log"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "from pathlib import Path\nfrom agents.engines.base import LaunchedServer\n"
              f"server = LaunchedServer([sys.executable, '-c', {GRANDCHILD!r}], {{}}, Path({str(log)!r}))\n"
              f"import time\nwhile not Path({str(log)!r}).read_text().strip(): time.sleep(0.1)\n"
              "print(server.process.pid)\n")  # and exit without stopping it
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    leader, worker = int(done.stdout.split()[-1]), _grandchild(log)
    deadline = time.monotonic() + 10
    while (_alive(leader) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(leader) and not _alive(worker)


def test_concurrent_rows_share_one_call_but_get_their_own_seeds(local):
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> Any:
        with lock:
            seen.append(body)
        return _completion([5], [-0.1], 1.0, 0)

    with http_server(_server({"/v1/models": MODELS, "/v1/completions": _probe_then(answer)})) as url:
        policy = EnginePolicy(local, VLLM(), EngineSettings(kind="vllm", url=url.removesuffix("/v1")), seed=7)
        try:
            first = policy.generate_ids([[1, 2]] * 4, SamplingParams(max_new_tokens=1))
            policy.reseed(0)
            again = policy.generate_ids([[1, 2]] * 4, SamplingParams(max_new_tokens=1))
        finally:
            policy.close()
    seeds = [b["seed"] for b in seen]
    assert len(set(seeds[:4])) == 4  # a GRPO group's identical prompts must not share a sample
    assert sorted(seeds[:4]) == sorted(seeds[4:])  # reseed(offset) replays a step's samples
    assert all(c.finish_reason == "length" for c in first + again)
