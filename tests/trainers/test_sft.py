"""method=sft: oracle demonstrations and fine-tuning files, learned with the real default
model on the real toolmath env (its python tool in a real sandbox), and init= to start a
run from another's weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agents.policy import TransformersPolicy
from envs.messages import parse_text_action
from trainers.config import ConfigError, TrainConfig, apply_overrides
from trainers.live.config import ServeConfig
from trainers.run import main
from trainers.rundir import RunDir
from trainers.sft import SFTTrainer, load_demos, record_demos

SMALL = ["env=toolmath", "method=sft", "batch_size=2", "parallel=2", "eval_tasks=0", "epochs=2",
         "minibatch_size=0", "lr=3e-3", "progress=false"]

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": "print(6 * 7)"})}}]}


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    """A step of oracle demonstrations on toolmath (two epochs over them): the run the tests below read."""
    run = tmp_path_factory.mktemp("sft") / "run"
    assert main([*SMALL, "steps=1", f"out={run}"]) == 0
    return run


def test_a_reply_is_trained_on_the_tokens_that_parse_back_to_it() -> None:
    policy = TransformersPolicy("default")
    for message in (CALL, {"role": "assistant", "content": "The answer is \\boxed{42}."}):
        ids = policy.encode_reply(message)
        assert ids[-1] == policy.tokenizer.eos_token_id  # generation stops where the demo stops
        parsed = parse_text_action(policy.tokenizer.decode(ids, skip_special_tokens=True).strip())
        assert parsed.get("content") == message["content"] or (not parsed.get("content") and not message["content"])
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.get("tool_calls") or []]
        assert calls == [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                         for c in message.get("tool_calls") or []]


def test_oracle_demonstrations_are_written_and_learned(sft_run: Path) -> None:
    rows = RunDir(sft_run).metrics()
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows[1:]:
        assert row["demos/solved"] == row["demos/episodes"] == 2  # the oracle solves toolmath
        assert row["samples/demo_turns"] == 4  # a python call and a boxed answer per episode
        assert row["loss/nll"] > 0 and row["loss/grad_norm"] > 0
        assert 0 < row["perf/push_s"] < row["perf/train_s"]  # the new weights reach the sampler within the update
    records = load_demos(sft_run / "demos" / "step_00001.jsonl")
    assert len(records) == 2
    first = records[0]
    assert first[0].reply["tool_calls"][0]["function"]["name"] == "python"
    assert first[0].tools and first[0].tools[0]["function"]["name"] == "python"
    assert first[1].context[-1]["role"] == "tool"  # the answer was written after the tool's output
    assert "\\boxed{" in first[1].reply["content"]

    # the trained weights make the demonstrated replies likelier than the base model does
    policy = TransformersPolicy("default")
    weights, _ = RunDir(sft_run).load_weights(RunDir(sft_run).latest_checkpoint())
    policy.load_trainable_state(weights, version=1)
    demos = [d for r in records for d in r]
    prompts = [policy.encode(d.context, d.tools) for d in demos]
    replies = [policy.encode_reply(d.reply) for d in demos]
    trained = [sum(row) / len(row) for row in policy.score(prompts, replies)]
    base = [sum(row) / len(row) for row in policy.score(prompts, replies, adapter=False)]
    assert all(t > b for t, b in zip(trained, base)), (trained, base)


@pytest.mark.slow  # 75 s: two more training runs beside the default suite's sft run
def test_a_finetuning_file_and_init_continue_from_another_run(sft_run: Path, tmp_path: Path) -> None:
    demos = tmp_path / "demos.jsonl"
    demos.write_text((sft_run / "demos" / "step_00001.jsonl").read_text())
    config = apply_overrides(TrainConfig(), [*SMALL, "steps=2", "eval_tasks=1", "eval_every=2", "max_new_tokens=48",
                                             "env_kwargs.max_turns=2", f"demos={demos}", f"init={sft_run}",
                                             f"out={tmp_path / 'next'}"])
    trainer = SFTTrainer(config, RunDir(tmp_path / "next"))
    try:
        started = trainer._trainable_state()
        saved, _ = RunDir(sft_run).load_weights(RunDir(sft_run).latest_checkpoint())
        assert started.keys() == saved.keys()
        assert all(torch.equal(started[k], saved[k]) for k in saved)
        assert all(t.startswith("toolmath-heldout-") for t in trainer.eval_tasks)  # eval is held out
        trainer.train()
    finally:
        trainer.close()
    rows = RunDir(tmp_path / "next").metrics()
    assert [r["step"] for r in rows] == [0, 1, 2]
    # the file's 2 records, one per step (batch_size=2 cycles through them: 2 records, 4 turns)
    assert [r["samples/demo_turns"] for r in rows[1:]] == [4, 4]
    assert ["eval/env_return" in r for r in rows] == [True, False, True]  # eval_every=2
    for row in (rows[0], rows[2]):  # each eval episode's outcome is its last turn's grade
        assert row["eval/last/solved"] == row["eval/env_return"]


def test_rl_after_sft_keeps_the_sft_weights_as_its_kl_reference(sft_run: Path, tmp_path: Path) -> None:
    from trainers.loop import Trainer

    rl = ["env=toolmath", "method=grpo", "reward=env", "eval_tasks=0", "parallel=1", "progress=false",
          f"init={sft_run}", "kl_beta=0.05"]
    for kl_ref, wanted in (("auto", "init"), ("base", "base")):
        config = apply_overrides(TrainConfig(), [*rl, f"kl_ref={kl_ref}", f"out={tmp_path / kl_ref}"])
        trainer = Trainer(config, RunDir(tmp_path / kl_ref))
        try:
            params = dict(trainer.train_model.named_parameters())
            if wanted == "base":
                assert trainer.kl_reference is None  # the adapter turned off
                continue
            reference = trainer.kl_reference
            assert reference and reference.keys() == {n for n, p in params.items() if p.requires_grad}
            assert all(torch.equal(reference[n], params[n]) for n in reference)  # the sft run's weights
            assert any(float(t.abs().max()) > 0 for n, t in reference.items() if "lora_B" in n)  # not a fresh adapter
            assert all(t.data_ptr() != params[n].data_ptr() for n, t in reference.items())  # a copy updates won't move
        finally:
            trainer.close()


def test_init_with_other_lora_settings_is_refused(sft_run: Path, tmp_path: Path) -> None:
    rank = apply_overrides(TrainConfig(), []).lora.rank
    assert main([*SMALL, "steps=1", f"init={sft_run}", f"lora.rank={rank * 2}", f"out={tmp_path / 'r'}"]) == 2


@pytest.mark.parametrize("record, message", [
    ({"messages": "hi"}, "a \"messages\" list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages\\[0\\] needs a role"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]},
     "neither content nor tool_calls"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "weight": 0}]},
     "no assistant message to learn"),
    ({"messages": [{"role": "user", "content": "x"}, CALL], "tools": "python"}, "\"tools\" must be a list"),
])
def test_a_bad_record_names_its_line_and_field(record, message) -> None:
    with pytest.raises(ValueError, match=f"f.jsonl:3: .*{message}"):
        record_demos(record, "f.jsonl:3")


def test_weight_zero_skips_a_target_but_keeps_it_in_the_context() -> None:
    messages = [{"role": "user", "content": "6*7?"}, {"role": "assistant", "content": "48", "weight": 0},
                {"role": "user", "content": "wrong"}, {"role": "assistant", "content": "42"}]
    demos = record_demos({"messages": messages}, "x")
    assert [d.reply["content"] for d in demos] == ["42"]
    assert demos[0].context[1] == {"role": "assistant", "content": "48"}


def test_a_file_that_is_not_jsonl_says_which_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "assistant", "content": "ok"}]}) + "\n{oops\n")
    with pytest.raises(ValueError, match="d.jsonl:2 is not JSON"):
        load_demos(path)


def test_sft_is_a_trainer_method_only() -> None:
    with pytest.raises(ConfigError, match="demos="):
        apply_overrides(TrainConfig(), ["method=sft", "data=x.jsonl"])
    with pytest.raises(ConfigError, match="method=.sft. is not allowed"):
        apply_overrides(ServeConfig(), ["method=sft"])


def test_an_env_without_an_oracle_needs_a_demos_file(tmp_path: Path, capsys) -> None:
    assert main(["env=chat", "method=sft", "eval_tasks=0", "progress=false", f"out={tmp_path / 'r'}"]) == 2
    assert "env=chat has no oracle" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.slow  # 78 s; the 3-seed MiniWoB sweep of docs/results/learning-miniwob.md runs the same path for real
def test_miniwob_demonstrations_come_from_its_scripted_oracles(tmp_path: Path) -> None:
    """env=gui: only tasks with an oracle are trained on, and a demo is the oracle's clicks
    and typing on the page's refs, written after the snapshot that shows those refs."""
    run = tmp_path / "gui"
    assert main(["env=gui", "method=sft", "steps=1", "batch_size=3", "parallel=1", "eval_tasks=0",
                 "microbatch_size=1",  # page snapshots are long: one demo a pass keeps the peak ~2 GB
                 "env_kwargs.tasks=click-test,enter-text,click-pie", "progress=false", f"out={run}"]) == 0
    row = RunDir(run).metrics()[-1]
    assert row["demos/solved"] == row["demos/episodes"] == 3 and row["loss/nll"] > 0
    records = load_demos(run / "demos" / "step_00001.jsonl")
    names = {n for r in records for d in r for n in [c["function"]["name"] for c in d.reply["tool_calls"]]}
    assert names <= {"click", "type"} and "click" in names
    for demos in records:
        for demo in demos:
            ref = json.loads(demo.reply["tool_calls"][0]["function"]["arguments"])["ref"]
            assert f"[ref={ref}]" in demo.context[-1]["content"]  # the agent saw what it acted on
        assert {t["function"]["name"] for t in demos[0].tools} >= {"click", "type", "done"}


def test_miniwob_tasks_without_an_oracle_are_refused(tmp_path: Path, capsys) -> None:
    assert main(["env=gui", "method=sft", "eval_tasks=0", "env_kwargs.tasks=click-pie", "progress=false",
                 f"out={tmp_path / 'r'}"]) == 2
    assert "no train task of env=gui has an oracle" in capsys.readouterr().err
