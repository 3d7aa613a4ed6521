"""engine=sglang: the request and response mapping, against SGLang's documented API.

SGLang cannot run on this project's CPU machines, so these tests stand a small loopback
HTTP server in for it, answering in the shapes SGLang documents and its code emits
(docs.sglang.io basic_usage/sampling_params and native_api, advanced_features/lora
"Dynamic LoRA loading"; tokenizer_manager.py ``detokenize_logprob_tokens``):
``POST /generate`` -> ``{"text", "output_ids", "meta_info": {"output_token_logprobs":
[[logprob, id, null], ...], "output_top_logprobs": [[[logprob, id, null], ...], ...],
"finish_reason": {"type": "stop", "matched": id}, ...}}``; ``POST /load_lora_adapter`` and
``/unload_lora_adapter`` -> ``{"success": true, ...}``. It is a stand-in for this one
purpose: checking what clawgym sends and how it reads the answer. The policy around it is
the real one, with the default model encoding prompts and decoding replies.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from agents.engines import EngineError, EnginePolicy, EngineSettings
from agents.engines.sglang import SGLang
from agents.policy import SamplingParams, TransformersPolicy
from tests.helpers import http_server

REPLY = '<tool_call>{"name": "lookup", "arguments": {"q": "tea"}}</tool_call>'


@pytest.fixture(scope="module")
def local() -> TransformersPolicy:
    return TransformersPolicy(seed=0)


class FakeSGLang:
    """What the loopback server answers and what it was sent."""

    def __init__(self, reply_ids: list[int], eos: int) -> None:
        self.reply_ids = reply_ids + [eos]
        self.eos = eos
        self.generate: list[dict[str, Any]] = []
        self.lora: list[tuple[str, dict[str, Any]]] = []
        self.loaded: dict[str, list[str]] = {}
        self.raw_logprobs = False
        """True: answer like SGLANG_RETURN_ORIGINAL_LOGPROB (the same values at every temperature)."""
        self.refuse_load = False
        self.hold: threading.Event | None = None
        """Set: /generate waits on it (a request in flight)."""
        self.holding = threading.Event()

    def logprob(self, i: int, temperature: float) -> float:
        return -0.1 * (i + 1) / (1.0 if self.raw_logprobs or temperature <= 0 else temperature)

    def answer_generate(self, body: dict[str, Any]) -> dict[str, Any]:
        self.generate.append(body)
        params = body["sampling_params"]
        ids = self.reply_ids[: params["max_new_tokens"]]
        temperature = params["temperature"]
        triples = [[self.logprob(i, temperature), t, None] for i, t in enumerate(ids)]
        tops = []
        for i in range(len(ids)):  # three candidates, log_softmax([2, 1, 0] / T) unless raw
            scale = 1.0 if self.raw_logprobs or temperature <= 0 else temperature
            logits = [2 / scale, 1 / scale, 0.0]
            norm = math.log(sum(math.exp(v) for v in logits))
            tops.append([[v - norm, 100 + j, None] for j, v in enumerate(logits)][: body["top_logprobs_num"]])
        if self.hold is not None and body["lora_path"] is not None:
            self.holding.set()
            self.hold.wait(10)
        finish = {"type": "stop", "matched": self.eos} if ids[-1] == self.eos else {"type": "length",
                                                                                     "length": len(ids)}
        return {"text": "decoded by the server", "output_ids": ids,
                "meta_info": {"id": "abc", "finish_reason": finish, "prompt_tokens": len(body["input_ids"]),
                              "completion_tokens": len(ids), "cached_tokens": 0,
                              "output_token_logprobs": triples, "output_top_logprobs": tops}}

    def answer_lora(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.lora.append((path, body))
        if path == "/load_lora_adapter":
            if self.refuse_load:
                return {"success": False, "error_message": "LoRA rank 16 exceeds --max-lora-rank 8"}
            self.loaded[body["lora_name"]] = sorted(p.name for p in Path(body["lora_path"]).iterdir())
        else:
            self.loaded.pop(body["lora_name"], None)
        return {"success": True, "error_message": "", "loaded_adapters": {k: k for k in self.loaded}}

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, payload: dict[str, Any], status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/get_model_info":
                    self._send({"model_path": "/models/SmolLM2-135M-Instruct", "is_generation": True})
                else:
                    self._send({"error": "not found"}, 404)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/generate":
                    self._send(fake.answer_generate(body))
                elif self.path in ("/load_lora_adapter", "/unload_lora_adapter"):
                    self._send(fake.answer_lora(self.path, body))
                else:
                    self._send({"error": "not found"}, 404)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def fake(local: TransformersPolicy) -> FakeSGLang:
    # Tests load the untouched adapter as versions 1, 2: back to 0 so the next policy starts on the base model.
    local.weight_version = 0
    ids = local.tokenizer(REPLY, add_special_tokens=False)["input_ids"]
    return FakeSGLang(ids, local.tokenizer.eos_token_id)


def _policy(local: TransformersPolicy, url: str, tmp_path: Path) -> EnginePolicy:
    settings = EngineSettings(kind="sglang", url=url.removesuffix("/v1"), timeout_s=15, max_retries=0,
                              adapter_dir=str(tmp_path / "adapters"))
    return EnginePolicy(local, SGLang(), settings, seed=3)


def test_generate_sends_token_ids_and_reads_back_ids_and_logprobs(local, fake, tmp_path):
    messages = [{"role": "user", "content": "Find tea."}]
    with http_server(fake.handler()) as url:
        policy = _policy(local, url, tmp_path)
        try:
            [completion] = policy.generate([messages], None, SamplingParams(temperature=0.7, max_new_tokens=40))
        finally:
            policy.close()
    body = fake.generate[-1]
    assert body["input_ids"] == local.encode(messages)  # encoded here, never re-tokenized there
    assert body["return_logprob"] is True and body["lora_path"] is None  # version 0: the base model
    params = body["sampling_params"]
    assert params["temperature"] == 0.7 and params["top_p"] == 1.0 and params["max_new_tokens"] == 40
    assert params["top_k"] == -1 and params["min_p"] == 0.0  # not the model's generation_config defaults
    assert params["stop_token_ids"] == [local.tokenizer.eos_token_id]
    assert completion.prompt_ids == body["input_ids"]
    assert completion.completion_ids == fake.reply_ids  # EOS included: the trainer learns to stop
    assert completion.logprobs == pytest.approx([fake.logprob(i, 0.7) for i in range(len(fake.reply_ids))])
    assert completion.finish_reason == "stop" and completion.temperature == 0.7 and completion.weight_version == 0
    assert completion.text == REPLY  # decoded locally from the ids, not the server's text
    assert completion.message["tool_calls"][0]["function"]["name"] == "lookup"


def test_the_probe_refuses_a_server_reporting_logprobs_before_temperature(local, fake, tmp_path):
    fake.raw_logprobs = True
    with http_server(fake.handler()) as url, pytest.raises(EngineError, match="SGLANG_RETURN_ORIGINAL_LOGPROB"):
        _policy(local, url, tmp_path)
    probes = [b for b in fake.generate if b["top_logprobs_num"] > 0]
    assert [b["sampling_params"]["temperature"] for b in probes] == [1.0, 0.5]


def test_a_cut_reply_is_length_and_greedy_records_temperature_one(local, fake, tmp_path):
    with http_server(fake.handler()) as url:
        policy = _policy(local, url, tmp_path)
        try:
            [completion] = policy.generate_ids([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=3))
        finally:
            policy.close()
    assert completion.completion_ids == fake.reply_ids[:3] and completion.finish_reason == "length"
    assert completion.temperature == 1.0  # greedy log-probs are the untempered model's


def test_each_update_is_loaded_as_a_named_version_and_the_old_one_unloaded(local, fake, tmp_path):
    state = local.trainable_state()
    with http_server(fake.handler()) as url:
        policy = _policy(local, url, tmp_path)
        try:
            policy.load_trainable_state(state, version=1)
            assert {"adapter_config.json", "adapter_model.safetensors"} <= set(fake.loaded["v1"])  # peft's files
            [first] = policy.generate_ids([[1, 2]], SamplingParams(max_new_tokens=4))
            policy.load_trainable_state(state, version=2)
            [second] = policy.generate_ids([[1, 2]], SamplingParams(max_new_tokens=4))
        finally:
            policy.close()
    assert [b["lora_path"] for b in fake.generate[-2:]] == ["v1", "v2"]
    assert (first.weight_version, second.weight_version) == (1, 2)
    assert fake.lora[-1] == ("/unload_lora_adapter", {"lora_name": "v1"}) and list(fake.loaded) == ["v2"]
    assert not (tmp_path / "adapters" / "v1").exists() and (tmp_path / "adapters" / "v2").exists()


def test_a_request_in_flight_finishes_on_its_version_before_that_adapter_is_unloaded(local, fake, tmp_path):
    state = local.trainable_state()
    fake.hold = threading.Event()
    with http_server(fake.handler()) as url:
        policy = _policy(local, url, tmp_path)
        try:
            policy.load_trainable_state(state, version=1)
            result: list[Any] = []
            worker = threading.Thread(target=lambda: result.extend(
                policy.generate_ids([[5, 6]], SamplingParams(max_new_tokens=4))))
            worker.start()
            assert fake.holding.wait(10)
            policy.load_trainable_state(state, version=2)  # the update lands mid-request
            assert set(fake.loaded) == {"v1", "v2"}  # v1 still serves the request that named it
            fake.hold.set()
            worker.join(10)
            assert set(fake.loaded) == {"v2"}  # unloaded once nothing uses it
        finally:
            fake.hold.set()
            policy.close()
    assert result[0].weight_version == 1 and fake.generate[-1]["lora_path"] == "v1"


def test_a_refused_adapter_is_an_error_that_quotes_the_server(local, fake, tmp_path):
    fake.refuse_load = True
    with http_server(fake.handler()) as url:
        policy = _policy(local, url, tmp_path)
        try:
            with pytest.raises(EngineError, match="refused to load a LoRA adapter: LoRA rank 16 exceeds"):
                policy.load_trainable_state(local.trainable_state(), version=1)
        finally:
            policy.close()


def test_launch_flags_follow_the_lora_docs():
    setup = SGLang(max_model_len=1024).launch(Path("/m"), "127.0.0.1", 30001, 16)
    argv = setup.argv
    assert argv[:2] == ["-m", "sglang.launch_server"] and "--enable-lora" in argv
    for flag, value in (("--model-path", "/m"), ("--port", "30001"), ("--max-lora-rank", "16"),
                        ("--lora-target-modules", "all"), ("--context-length", "1024")):
        assert argv[argv.index(flag) + 1] == value
    assert setup.env["SGLANG_RETURN_ORIGINAL_LOGPROB"] == "false" and setup.health_path == "/health"
