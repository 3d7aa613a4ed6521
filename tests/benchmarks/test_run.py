"""benchmarks.run: a policy's task success on a suite, from the default model, a run, or an
OpenAI-compatible API (this project's live server on loopback, asked through the openai client)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.run import main as eval_main
from benchmarks.run import summarize_rows, summary_line
from trainers.config import apply_overrides
from trainers.live.config import ServeConfig
from trainers.run import main as train_main
from trainers.serve import serve_in_thread


def test_default_model_and_a_trained_run_are_evaluated(tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval-default"
    assert eval_main(["suite=chat", "tasks=2", "max_new_tokens=16", f"out={out}"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["summary"]["tasks"] == 2 and 0.0 <= result["summary"]["success_rate"] <= 1.0
    assert "| " in (out / "results.md").read_text()

    run = tmp_path / "run"
    assert train_main(["steps=1", "batch_size=2", "group_size=2", "parallel=4", "max_new_tokens=16",
                       "eval_tasks=0", "progress=false", f"out={run}"]) == 0
    out = tmp_path / "eval-run"
    assert eval_main(["suite=chat", f"model={run}", "tasks=2", "max_new_tokens=16", f"out={out}"]) == 0
    assert json.loads((out / "results.json").read_text())["summary"]["label"] != "default"


def test_env_errors_are_counted_apart_from_failures() -> None:
    # 1, 0, error, 1: 2 solved of the 3 that ran. Wilson(2, 3), z = 1.96: z^2/n = 1.280533,
    # d = 2.280533, c = (0.666667 + 0.640267) / d = 0.573082, s = sqrt(0.074074 + 0.106711) = 0.425188,
    # h = 1.96 * s / d = 0.365427 -> (0.207655, 0.938510)
    rows = [{"task_id": t, "success": s, "return": r, "turns": n}
            for t, s, r, n in [("a", 1.0, 1.0, 1), ("b", 0.0, -1.0, 3), ("c", None, 0.0, 0), ("d", 1.0, 1.0, 2)]]
    summary = summarize_rows(rows)
    assert {k: summary[k] for k in ("tasks", "episodes", "scored", "errors", "solved")} == \
           {"tasks": 4, "episodes": 4, "scored": 3, "errors": 1, "solved": 2.0}
    assert summary["success_rate"] == pytest.approx(2 / 3) and summary["mean_return"] == pytest.approx(1 / 3)
    assert summary["success_ci95"] == pytest.approx([0.207655, 0.938510], abs=1e-6)
    assert summary["mean_turns"] == 2.0 and "pass_k" not in summary
    low, high = summary["mean_return_ci95"]  # a resample of the returns 1, -1, 1: its mean is in [-1, 1]
    assert -1.0 <= low < 1 / 3 < high == 1.0
    assert summary_line(summary) == (f"66.7% solved (2/3, 95% CI 20.8%-93.9%), mean return 0.333 (95% CI {low:.3f} "
                                     "to 1.000), 2.0 turns; 1 env error, not counted")
    assert summary_line(summarize_rows([{"task_id": "a", "success": None, "return": 0.0, "turns": 0}])) == \
           "no episode was scored; 1 env error, not counted"


def test_pass_at_k_and_pass_hat_k_over_tasks_leave_out_a_task_short_of_k() -> None:
    # k = 2.  task a: 1 0 1 (n 3, c 2): pass@2 = 1 - C(1,2)/C(3,2) = 1,   pass^2 = C(2,2)/C(3,2) = 1/3
    #         task b: 0 0 1 (n 3, c 1): pass@2 = 1 - C(2,2)/C(3,2) = 2/3, pass^2 = C(1,2)/C(3,2) = 0
    #         task c: 1 error error: 1 scored episode < k, left out of both
    # pass@2 = (1 + 2/3) / 2 = 5/6; pass^2 = (1/3 + 0) / 2 = 1/6; success: 4 of the 7 scored
    outcomes = {"a": [1.0, 0.0, 1.0], "b": [0.0, 0.0, 1.0], "c": [1.0, None, None]}
    rows = [{"task_id": t, "success": s, "return": s or 0.0, "turns": 1}
            for t, seq in outcomes.items() for s in seq]
    summary = summarize_rows(rows, k=2, seed=0)
    assert {k: summary[k] for k in ("tasks", "episodes", "scored", "errors", "solved")} == \
           {"tasks": 3, "episodes": 9, "scored": 7, "errors": 2, "solved": 4.0}
    assert summary["pass_k"]["k"] == 2 and summary["pass_k"]["tasks"] == 2 and summary["pass_k"]["short"] == ["c"]
    assert summary["pass_k"]["pass_at_k"] == pytest.approx(5 / 6)
    assert summary["pass_k"]["pass_hat_k"] == pytest.approx(1 / 6)
    assert summary_line(summary).endswith("; pass@2 83.3%, pass^2 16.7% over 2 tasks "
                                          "(1 with fewer than 2 scored episodes left out: c)")
    assert summarize_rows(rows, k=2, seed=0) == summary  # the bootstrap is seeded


def _rows(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / "results.json").read_text())["tasks"]


def test_episodes_per_task_plays_each_task_k_times_with_derived_seeds(tmp_path: Path) -> None:
    out = tmp_path / "k2"
    assert eval_main(["suite=chat", "tasks=2", "max_new_tokens=16", "episodes_per_task=2", "seed=5",
                      f"out={out}"]) == 0
    rows = _rows(out)
    # episode-major: every task once, then again; seed + task index + 1000003 * episode
    assert [(r["episode"], r["seed"]) for r in rows] == [(0, 5), (0, 6), (1, 1_000_008), (1, 1_000_009)]
    assert [r["task_id"] for r in rows[:2]] == [r["task_id"] for r in rows[2:]]
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["tasks"] == 2 and summary["episodes"] == summary["scored"] == 4
    assert summary["pass_k"]["k"] == 2 and summary["pass_k"]["tasks"] == 2
    assert summary["episodes_played"] == 4 and summary["episodes_resumed"] == 0
    assert len((out / "transcripts.jsonl").read_text().splitlines()) == 4
    assert "pass@2" in (out / "results.md").read_text()


def test_a_killed_run_resumes_playing_only_its_missing_episodes(tmp_path: Path, capsys) -> None:
    """The log is flushed per wave (parallel=2: two episodes a wave), so a kill loses the
    wave in flight: here the second wave, and a half-written line after it."""
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    argv = ["suite=chat", "tasks=2", "max_new_tokens=16", "episodes_per_task=2", "parallel=2"]
    assert eval_main([*argv, f"out={clean}"]) == 0
    lines = (clean / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 4 and "fingerprint" in json.loads(lines[0])
    resumed.mkdir()
    (resumed / "episodes.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    assert eval_main([*argv, f"out={resumed}"]) == 0
    summary = json.loads((resumed / "results.json").read_text())["summary"]
    assert summary["episodes_played"] == 2 and summary["episodes_resumed"] == 2
    assert _rows(resumed) == _rows(clean)
    assert (resumed / "transcripts.jsonl").read_text() == (clean / "transcripts.jsonl").read_text()
    assert (resumed / "episodes.jsonl").read_text().splitlines() == lines  # nothing counted twice
    printed = capsys.readouterr()
    assert "2 episodes resumed from episodes.jsonl" in printed.out
    # the progress counts on from the episodes kept, turn by turn (stderr is no terminal here: plain lines)
    assert re.search(r"^chat/\S+ \S+: 2/4 episodes \[00:00<\?\], 0 turns$", printed.err, re.M), printed.err
    assert re.search(r"^chat/\S+ \S+: 4/4 episodes \[[0-9:]+<00:00\], [1-9]\d* turns?, ", printed.err, re.M)

    assert eval_main([*argv[:-1], "parallel=1", "max_new_tokens=8", "seed=1", f"out={resumed}"]) == 2
    err = capsys.readouterr().err
    assert f"out={resumed} holds episodes of another run" in err
    assert "seed: 0 there, 1 now; max_new_tokens: 16 there, 8 now" in err and "parallel" not in err


def test_bad_arguments_are_named(capsys) -> None:
    assert eval_main(["suite=nope"]) == 2
    assert "suite='nope' is unknown" in capsys.readouterr().err
    assert eval_main(["model=/no/such/dir", "suite=chat", "tasks=1"]) == 2
    for argv, said in [(["policy=openai"], "policy=openai needs api_base="),
                       (["policy=openai", "api_base=127.0.0.1:30000"], "must be an http:// or https:// URL"),
                       (["policy=openai", "api_base=http://x/v1", "api_key=CLAWGYM_NO_SUCH_VAR"],
                        "api_key=CLAWGYM_NO_SUCH_VAR names an environment variable that is not set"),
                       (["api_base=http://x/v1"], "api_base= applies only to policy=openai"),
                       (["policy=openai", "api_base=http://x/v1", "concurrency=0"], "concurrency must be >= 1"),
                       (["policy=gpt"], "policy='gpt' is not allowed; choose one of: local, openai"),
                       (["episodes_per_task=0"], "episodes_per_task=0 must be >= 1"),
                       (["pick=random"], "pick='random' is not allowed; choose one of: first, spread"),
                       (["suites=chat"], "suites= applies only to suite=all"),
                       (["suite=all", "suites=chat,nope"], "suites= names nope, not a suite"),
                       (["suite=all", "policy=openai", "api_base=http://x/v1", "dry_run=true"],
                        "dry_run=true shows one suite's first request")]:
        assert eval_main(["suite=chat", *argv]) == 2
        assert said in capsys.readouterr().err


@pytest.mark.bwrap
def test_the_swe_suite_writes_predictions_the_official_harness_reads(tmp_path: Path) -> None:
    out = tmp_path / "swe"
    assert eval_main(["suite=swe", "tasks=1", "max_new_tokens=16", "env_kwargs.max_turns=1", "sandbox=bwrap",
                      "parallel=1", f"out={out}"]) == 0
    result = json.loads((out / "results.json").read_text())
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 1
    prediction = json.loads(lines[0])
    assert set(prediction) == {"instance_id", "model_name_or_path", "model_patch"}
    assert prediction["instance_id"] == result["tasks"][0]["task_id"]
    assert prediction["model_name_or_path"] == result["summary"]["label"] == "default"
    assert isinstance(prediction["model_patch"], str)  # the graded diff, "" when nothing changed


# ---- policy=openai: this project's live server on loopback, the real openai client --------------
KEY = "sk-clawgym-test-5f1e9b27c3"
"""The bearer token the live server demands; it must never reach an output folder."""


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """The default model behind ``trainers.serve``: serving only (``learn=false``: no
    learner, so the weights stay version 0), and one request per generation batch
    (``max_batch=1``) so each reply is computed exactly as a local batch of one is."""
    config = apply_overrides(ServeConfig(), ["learn=false", "max_batch=1", f"api_key={KEY}"])
    with serve_in_thread(config, tmp_path_factory.mktemp("serve") / "run") as (url, service):
        yield url, service


def _files_text(folder: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(folder.rglob("*")) if path.is_file())


def _replies(folder: Path) -> list[list[dict[str, Any]]]:
    lines = (folder / "transcripts.jsonl").read_text().splitlines()
    return [[turn["reply"] for turn in json.loads(line)["turns"]] for line in lines]


def test_the_live_server_through_policy_openai_scores_as_the_local_model(live_server, tmp_path, monkeypatch) -> None:
    """Greedy on both sides, the same weights, the same float32 kernels, one unpadded prompt
    per batch (local parallel=1; the server's max_batch=1 while the API run keeps two
    requests in flight): the replies must be identical token for token, so the scores too.
    With several prompts per batch they could legitimately differ: the server batches by
    arrival time, and left padding changes the float summation order, which can flip a
    near-tie under argmax."""
    url, service = live_server
    local, api = tmp_path / "local", tmp_path / "api"
    common = ["suite=chat", "tasks=2", "max_new_tokens=16"]
    assert eval_main([*common, "parallel=1", f"out={local}"]) == 0
    monkeypatch.setenv("CLAWGYM_EVAL_KEY", KEY)
    served_before = service.generator.rows
    assert eval_main([*common, "policy=openai", f"api_base={url}", "api_key=CLAWGYM_EVAL_KEY", f"out={api}"]) == 0
    assert service.generator.rows - served_before == 2 and service.policy.weight_version == 0
    by_local, by_api = (json.loads((d / "results.json").read_text()) for d in (local, api))
    compared = ("task_id", "success", "return", "turns", "stop_reason", "error")
    assert [{k: r[k] for k in compared} for r in by_api["tasks"]] == \
           [{k: r[k] for k in compared} for r in by_local["tasks"]]
    assert _replies(api) == _replies(local) and all(r[0]["content"] for r in _replies(api))
    for key in ("tasks", "scored", "errors", "solved", "success_rate", "success_ci95"):
        assert by_api["summary"][key] == by_local["summary"][key]
    assert by_api["summary"]["policy"] == "openai" and by_api["config"]["api_key"] == "CLAWGYM_EVAL_KEY"
    assert KEY not in _files_text(api)


def test_a_key_given_in_clear_is_redacted_from_the_output(live_server, tmp_path, capsys) -> None:
    url, _ = live_server
    out = tmp_path / "api"
    assert eval_main(["suite=chat", "tasks=1", "max_new_tokens=4", "policy=openai", f"api_base={url}",
                      f"api_key={KEY}", f"out={out}"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["api_key"] == "<redacted>"
    assert KEY not in _files_text(out) and KEY not in capsys.readouterr().out


def test_a_wrong_key_stops_the_run_at_once_and_says_which_key(live_server, tmp_path, capsys) -> None:
    url, service = live_server
    refused_before = service.store.counts()["rejections"]
    assert eval_main(["suite=chat", "tasks=1", "policy=openai", f"api_base={url}", "api_key=sk-wrong",
                      f"out={tmp_path / 'out'}"]) == 2
    assert service.store.counts()["rejections"] == refused_before + 1  # a 401 is not retried
    message = _error_line(capsys.readouterr().err)
    assert f"the endpoint {url} refused the request with HTTP 401" in message and "check api_key=" in message
    assert not (tmp_path / "out").exists()


def _error_line(stderr: str) -> str:
    """The one line ``benchmarks.run:`` prints (stderr also carries the progress bar)."""
    lines = [line for line in stderr.splitlines() if "benchmarks.run:" in line]
    assert len(lines) == 1, stderr
    return lines[0][lines[0].index("benchmarks.run:"):]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_api_base_nobody_answers_fails_after_the_retries_with_one_line(tmp_path, capsys) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"  # bound, then released: connections are refused
    started = time.perf_counter()
    assert eval_main(["suite=chat", "tasks=1", "policy=openai", f"api_base={url}", "max_retries=2",
                      f"out={tmp_path / 'out'}"]) == 2
    assert time.perf_counter() - started >= 0.5 * 0.5 + 1.0 * 0.5  # two backoffs, jittered down to half
    message = _error_line(capsys.readouterr().err)
    assert message.startswith(f"benchmarks.run: the endpoint {url} could not be reached")
    assert "on 3 attempts" in message and "fix api_base=" in message
    assert not (tmp_path / "out").exists()


def test_a_dry_run_prints_the_first_request_and_sends_nothing(tmp_path, capsys) -> None:
    with socket.socket() as listener:  # an endpoint that would see any connection attempt
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        assert eval_main(["suite=chat", "tasks=2", "max_new_tokens=16", "policy=openai", f"api_base={url}",
                          f"api_key={KEY}", "dry_run=true", f"out={tmp_path / 'out'}"]) == 0
        with pytest.raises(BlockingIOError):
            listener.accept()
    printed = capsys.readouterr().out
    assert f"POST {url}/chat/completions" in printed and "Bearer <redacted>" in printed and KEY not in printed
    body = json.loads(printed[printed.index("{"):])
    assert body["model"] == "default" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user"] and "tools" not in body  # chat has none
    assert not (tmp_path / "out").exists()


# ---- suite=all ----------------------------------------------------------------------------------
def test_suite_all_runs_each_suite_into_its_folder_and_a_failing_one_is_a_row(tmp_path: Path, capsys) -> None:
    """chat and bfcl run for real; toolmath is asked for a sandbox backend that does not exist
    (what a machine without docker or bubblewrap amounts to) and fails as its own row. A second
    run into the same folder resumes every suite and plays nothing."""
    out = tmp_path / "all"
    argv = ["suite=all", "suites=chat,bfcl,toolmath", "tasks=2", "max_new_tokens=16", "sandbox=nosuch", f"out={out}"]
    assert eval_main(argv) == 1  # a suite failed
    rows = {r["suite"]: r for r in json.loads((out / "summary.json").read_text())["suites"]}
    assert list(rows) == ["chat", "bfcl", "toolmath"]
    for name in ("chat", "bfcl"):
        assert rows[name]["error"] is None and rows[name]["tasks"] == 2 and rows[name]["scored"] == 2
        assert 0.0 <= rows[name]["success_ci95"][0] <= rows[name]["success_rate"] <= rows[name]["success_ci95"][1]
        assert json.loads((out / name / "results.json").read_text())["summary"]["tasks"] == 2
    assert "sandbox must be one of" in rows["toolmath"]["error"] and not (out / "toolmath").exists()
    table = (out / "summary.md").read_text()
    assert "| chat | heldout | 2 | 0/2 |" in table or "| chat | heldout | 2 |" in table
    assert "| toolmath | | | | did not run: sandbox must be one of" in table
    assert "2 of 3 suites ran (toolmath failed)" in capsys.readouterr().out
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert eval_main(argv) == 1
    again = json.loads((out / "chat" / "results.json").read_text())["summary"]
    assert again["episodes_played"] == 0 and again["episodes_resumed"] == 2


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_suite_all_gives_every_suite_a_row(tmp_path: Path) -> None:
    """Every suite in SUITES, one task of at most two turns each: a row with numbers where this
    machine has what the suite needs (a sandbox backend, Chromium, tau2's extra), else a row
    saying why not."""
    from benchmarks.run import SUITES

    out = tmp_path / "all"
    assert eval_main(["suite=all", "tasks=1", "max_new_tokens=16", "env_kwargs.max_turns=2", "parallel=1",
                      f"out={out}"]) in (0, 1)
    rows = json.loads((out / "summary.json").read_text())["suites"]
    assert [r["suite"] for r in rows] == list(SUITES)
    for r in rows:
        ran = (out / r["suite"] / "results.json").exists()
        assert (r["error"] is None and r["tasks"] == 1 and ran) or (r["error"] and not ran), r


def test_help_lists_the_new_keys(capsys) -> None:
    assert eval_main(["--help"]) == 0
    printed = capsys.readouterr().out
    for key in ("episodes_per_task=1", "suites=", "out="):
        assert f"  {key}" in printed
    assert "pass@k" in printed and "resumes that run" in printed


def test_pick_spread_samples_each_sizeable_bfcl_category_and_first_takes_the_head() -> None:
    import collections

    import envs
    from benchmarks.run import pick_tasks
    from envs.toolcall import bfcl_data

    probe = envs.make("bfcl", split="heldout").unwrapped
    ids = probe.task_ids()
    probe.close()
    first, spread = pick_tasks(ids, 26, "first"), pick_tasks(ids, 26, "spread")
    assert len(first) == len(spread) == 26 and len(set(spread)) == 26
    assert {bfcl_data.category_of(i) for i in first} == {"simple_python"}
    sizes = collections.Counter(bfcl_data.category_of(i) for i in ids)
    big = {c for c, n in sizes.items() if n > len(ids) // 26}  # larger than the spacing: never skipped
    assert len(big) >= 8 and big <= {bfcl_data.category_of(i) for i in spread}
    assert [ids.index(i) for i in spread] == sorted(ids.index(i) for i in spread)  # the split's order
    assert pick_tasks(ids, 0, "spread") == ids and pick_tasks(ids[:5], 9, "spread") == ids[:5]


def test_a_tau2_prompt_longer_than_2048_tokens_is_answered_and_max_context_cuts_it(tmp_path: Path) -> None:
    # tau2's policy and tool schemas make a ~3,900-token first prompt: the default model's own
    # 8192 holds it (max_context=0); max_context=2048 leaves it an empty "context" reply.
    base = ["suite=tau2", "tasks=1", "max_new_tokens=4", "env_kwargs.max_turns=1", "env_kwargs.user=scripted"]
    reasons = {}
    for limit in (0, 2048):
        out = tmp_path / f"ctx{limit}"
        assert eval_main([*base, f"max_context={limit}", f"out={out}"]) == 0
        episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()[1:]]
        reasons[limit] = [t["finish_reason"] for e in episodes for t in e["transcript"]["turns"]]
    assert reasons[2048] == ["context"]
    assert reasons[0] and "context" not in reasons[0]
    from envs.toolcall.users import bound_user

    assert bound_user() is None  # the run unbinds its model from tau2's users when it ends
