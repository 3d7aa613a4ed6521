"""``python -m trainers.run engine=vllm``: an engine that fails mid-run ends the run with one
line saying why (exit code 2), not a traceback or a hang. The engine is a loopback server
that passes the connect-time checks in vLLM's shapes and then answers garbage."""

from __future__ import annotations

from tests.agents.test_engines import MODELS, _probe_then, _server
from tests.helpers import http_server
from tests.trainers.test_run import TINY
from trainers.run import main


def test_a_run_whose_engine_answers_garbage_exits_2_with_the_reason(tmp_path, capsys):
    routes = {"/v1/models": MODELS, "/v1/completions": _probe_then({"oops": "not a completion"})}
    with http_server(_server(routes)) as url:
        code = main([*TINY, "method=grpo", "steps=1", "eval_tasks=0", f"out={tmp_path / 'run'}", "engine=vllm",
                     f"engine.url={url.removesuffix('/v1')}", "engine.max_retries=0"])
    assert code == 2
    err = capsys.readouterr().err  # after the model loader's progress bar
    assert "\ntrainers.run: the vllm server answered something other than its documented shape" in "\n" + err
    assert "KeyError 'choices'" in err and "Traceback" not in err
