"""``python -m trainers.serve engine=sglang engine.url=...``: the live server's replies sample on
the engine, through the same batching, recording and streaming as engine=hf.

The engine is the loopback stand-in of tests/agents/test_engines_sglang.py, answering in
SGLang's documented ``/generate`` shapes (SGLang cannot run on these CPU machines); the
live server around it is the real one, with the real default model encoding prompts.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.request

from agents.engines import EnginePolicy
from tests.agents.test_engines_sglang import REPLY, FakeSGLang
from tests.helpers import http_server
from trainers.config import apply_overrides
from trainers.live.config import ServeConfig
from trainers.serve import serve_in_thread


def test_live_replies_come_from_the_engine_and_are_recorded_with_its_ids(tmp_path):
    from transformers import AutoTokenizer

    from agents.model_cache import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir("default"))
    fake = FakeSGLang(tokenizer(REPLY, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)
    with http_server(fake.handler()) as engine_url:
        config = apply_overrides(ServeConfig(), ["learn=false", "max_new_tokens=64", "engine=sglang",
                                                 f"engine.url={engine_url.removesuffix('/v1')}", "engine.max_retries=0"])
        out = tmp_path / "run"
        with serve_in_thread(config, out) as (url, service):
            assert isinstance(service.policy, EnginePolicy)
            body = json.dumps({"model": "clawgym", "messages": [{"role": "user", "content": "Find tea."}]}).encode()
            request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                reply = json.load(response)
        assert service.policy._closed  # the serve loop's shutdown closed the engine policy too
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "lookup" and json.loads(call["arguments"]) == {"q": "tea"}
    sent = [b for b in fake.generate if not b["top_logprobs_num"]][-1]
    with sqlite3.connect(out / "live.sqlite") as db:
        prompt_ids, completion_ids = db.execute("SELECT prompt_ids, completion_ids FROM turns").fetchone()
    assert json.loads(prompt_ids) == sent["input_ids"]  # what the engine got is what the trainer will score
    assert json.loads(completion_ids) == fake.reply_ids
