"""``python -m trainers.run engine=vllm engine.launch=true``: two training steps whose rollouts
sample on a real vLLM server (opt-in, marker ``engine``; `make engine` builds the server's venv).

The run must train (LoRA B no longer zero in the checkpoint), roll step k out on version
k-1 exactly as with engine=hf, load each update into the server as v<k> and unload the
version before it, and stop the server it launched when it ends.
"""

from __future__ import annotations

import json
import re

import pytest
from safetensors.torch import load_file

from tests.agents.test_engines_vllm import ENGINE_PYTHON, group_members, require_vllm
from tests.trainers.test_run import TINY
from trainers.run import main

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]  # a server start takes minutes


def test_two_steps_train_through_a_launched_vllm_server(tmp_path, capsys):
    require_vllm()
    run, adapters = tmp_path / "run", tmp_path / "adapters"
    code = main([*TINY, "method=grpo", "steps=2", "eval_tasks=2", f"out={run}", "engine=vllm", "engine.launch=true",
                 f"engine.python={ENGINE_PYTHON}", f"engine.adapter_dir={adapters}"])
    assert code == 0, capsys.readouterr().err
    assert "done: 2 steps" in capsys.readouterr().out

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [r["rollout/weight_version"] for r in rows[1:]] == [0, 1]  # version k-1 rolls out step k
    assert sum(r["samples/count"] for r in rows[1:]) > 0, "no trainable samples: the run taught nothing"
    weights = load_file(str(run / "checkpoints" / "step_00002" / "weights.safetensors"))
    assert any(v.abs().max() > 0 for k, v in weights.items() if "lora_B" in k)

    log = (adapters / "vllm-server.log").read_text()
    loaded = re.findall(r"Loaded new LoRA adapter: name '(v\d+)'", log)
    assert loaded == ["v1", "v2"]
    assert re.findall(r"Removed LoRA adapter: name '(v\d+)'", log) == ["v1"]  # v2 stays: the last version
    assert not (adapters / "v1").exists() and (adapters / "v2" / "adapter_model.safetensors").exists()
    server_pid = int(re.search(r"\(APIServer pid=(\d+)\)", log).group(1))
    assert not group_members(server_pid)  # the launched server was stopped when the run ended
