"""benchmarks.learning: every method over seeds, median [min-max], per persona, resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.learning import main, parse, summarize
from trainers.rundir import RunDir

TINY = ["env_kwargs.persona=all", "env_kwargs.partial_credit=true", "temperature=1.0", "epochs=1",
        "batch_size=2", "group_size=2", "parallel=4", "max_new_tokens=16", "steps=1", "eval_tasks=7",
        "lr=1e-3"]


@pytest.mark.slow  # 82 s: four real training runs; the results pages' sweeps run the same path
def test_two_seeds_of_two_arms_run_side_by_side_and_are_summarized_over_seeds(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    args = ["chat", "seeds=2", "jobs=2", "methods=grpo", "arm.teacher-base=method=combine opd_teacher=base",
            f"out={out}", *TINY]
    assert main(args) == 0
    runs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert runs == ["chat-grpo-s0", "chat-grpo-s1", "chat-teacher-base-s0", "chat-teacher-base-s1"]
    config = RunDir(out / "chat-teacher-base-s1").load_config()
    assert (config["method"], config["opd_teacher"], config["seed"]) == ("combine", "base", 1)

    result = json.loads((out / "learning_chat.json").read_text())
    for label in ("grpo", "teacher-base"):
        arm = result[label]
        assert arm["seeds_done"] == [0, 1]
        finals = [RunDir(out / f"chat-{label}-s{s}").metrics()[-1]["eval/first/preference_met"] for s in (0, 1)]
        assert arm["final"] == pytest.approx(finals)
        assert all(p >= f for p, f in zip(arm["peak"], arm["final"]))
        # 7 held-out tasks spread over the pool: one per persona, each reported on its own
        assert sorted(arm["per_group"]) == ["engineer", "friend", "grandparent", "manager", "student",
                                            "teacher", "traveler"]
    table = (out / "learning_chat.md").read_text()
    assert "| grpo | 2 | " in table and summarize(result["grpo"]["final"]) in table
    assert "| method | engineer | friend |" in table
    assert (out / "learning_chat.png").stat().st_size > 0

    # a second call resumes each finished run instead of training it again
    lines = (out / "chat-grpo-s0" / "metrics.jsonl").read_text()
    assert main(args) == 0
    assert (out / "chat-grpo-s0" / "metrics.jsonl").read_text() == lines
    assert main([*args, "report=true"]) == 0


def test_a_failed_run_is_named_and_fails_the_sweep(tmp_path: Path, capsys) -> None:
    assert main(["chat", "seeds=1", "methods=grpo", f"out={tmp_path}", "group_size=1"]) == 1
    assert "failed: grpo seed 0" in capsys.readouterr().out
    assert "group_size >= 2" in (tmp_path / "chat-grpo-s0" / "log.txt").read_text()


@pytest.mark.parametrize("argv, message", [
    (["terminal"], "unknown suite .terminal.; the suites are: chat, toolmath, miniwob"),
    (["chat", "seeds=0"], "seeds='0' is not valid"),
    (["chat", "report=maybe"], "report='maybe' is not valid"),
    (["chat", "seeds"], "'seeds' must look like key=value"),
    (["chat", "methods="], "nothing to run"),
])
def test_bad_arguments_say_what_is_wrong(argv, message) -> None:
    with pytest.raises(SystemExit, match=message):
        parse(argv)


def test_named_arms_replace_the_methods_unless_methods_is_given() -> None:
    assert list(parse(["chat", "arm.c1=method=combine opd_clip=1"]).arms) == ["c1"]
    sweep = parse(["chat", "methods=grpo", "arm.c1=method=combine opd_clip=1", "lr=1e-4"])
    assert sweep.arms == {"grpo": ["method=grpo"], "c1": ["method=combine", "opd_clip=1"]}
    assert sweep.overrides == ["lr=1e-4"]


def test_toolmath_sweeps_train_sft_on_toolmath_by_default() -> None:
    from benchmarks.learning import SUITES

    sweep = parse(["toolmath", "steps=6"])
    assert sweep.arms == {"sft": ["method=sft"]} and sweep.overrides == ["steps=6"]
    assert SUITES["toolmath"].env == "toolmath" and SUITES["toolmath"].headline == "eval/env_return"
    assert parse(["miniwob"]).arms == {"sft": ["method=sft"]} and SUITES["miniwob"].env == "gui"


def test_an_arm_can_start_each_seed_from_that_seeds_earlier_run() -> None:
    from benchmarks.learning import run_argv

    sweep = parse(["toolmath", "out=o", "arm.rl=method=grpo init=o/toolmath-sft-s{seed}", "steps=2"])
    assert run_argv(sweep, "rl", 2) == ["env=toolmath", "steps=2", "method=grpo", "init=o/toolmath-sft-s2", "seed=2",
                                        "out=o/toolmath-rl-s2", "progress=false"]


def test_a_plotted_arm_is_named_with_what_it_overrides() -> None:
    from benchmarks.learning import legend_label

    assert legend_label("grpo", ["method=grpo"]) == "grpo"
    assert legend_label("cc", ["method=combine", "opd_center=true"]) == "cc: method=combine opd_center=true"
    # a seed's own checkpoint path says nothing across seeds; long overrides wrap
    label = legend_label("fill", ["method=grpo", "init=runs/learning/toolmath-sft-s{seed}", "kl_beta=0.05",
                                  "lr=2e-4", "temperature=1.0", "train_cut=true", "fill_groups=3"])
    assert "{seed}" not in label and "init=" not in label
    assert label.replace("\n", " ").startswith("fill: method=grpo kl_beta=0.05")
    assert all(len(line) <= 60 for line in label.splitlines()) and "\n" in label


def test_a_repeated_run_of_four_words_is_found_three_times_not_twice() -> None:
    from benchmarks.learning import repeats_a_run

    # "the user is a" occurs three times once case and punctuation are dropped
    assert repeats_a_run("The user is a helper. The user is a guide! the USER is a friend")
    assert not repeats_a_run("The user is a helper. The user is a guide.")  # twice
    assert not repeats_a_run("one two three")  # fewer than four words
    assert repeats_a_run("answer answer answer answer answer answer")  # (answer x4) at 0, 1, 2


def test_the_report_says_what_the_replies_look_like_at_the_start_and_the_end(tmp_path: Path, capsys) -> None:
    from benchmarks.learning import reply_shape

    def reply(step: int, words: int, finish: str, on_topic: float, loop: bool = False) -> dict:
        text = "the user is helpful " * 3 if loop else " ".join(f"w{i}" for i in range(words))
        return {"step": step, "task_id": "student/x", "error": None, "reply": text, "finish_reason": finish,
                "metrics": {"preference_met": 0.0, "pref/on_topic": on_topic}}

    # hand-computed: words 10, 20, 12 (the loop) -> median 12; cut 1 of 3; repeating 1 of 3; on topic 2 of 3
    final = [reply(2, 10, "stop", 1.0), reply(2, 20, "length", 1.0), reply(2, 0, "stop", 0.0, loop=True)]
    assert reply_shape(final) == pytest.approx({"words": 12.0, "cut": 1 / 3, "repeating": 1 / 3, "on_topic": 2 / 3})
    assert reply_shape([{"step": 0, "error": "boom"}]) == {}

    out = tmp_path / "sweep"
    for seed, words in ((0, 40), (1, 60)):
        run = RunDir(out / f"chat-grpo-s{seed}")
        run.save_config({"steps": 2, "device": "cpu", "dtype": "float32"})
        for step, rate in ((0, 0.0), (1, 0.5), (2, 0.25)):
            run.log(step, {"eval/first/preference_met": rate, "eval/first/pref/on_topic": 1.0 - rate})
        run.log_replies(0, [{k: v for k, v in reply(0, words, "length", 1.0).items() if k != "step"}] * 2)
        run.log_replies(2, [{k: v for k, v in r.items() if k != "step"} for r in final])
    assert main(["chat", "seeds=2", "methods=grpo", f"out={out}", "report=true"]) == 0
    result = json.loads((out / "learning_chat.json").read_text())["grpo"]
    assert result["shape"]["start"]["words"] == [40.0, 60.0] and result["shape"]["start"]["cut"] == [1.0, 1.0]
    assert result["shape"]["final"]["repeating"] == pytest.approx([1 / 3, 1 / 3])
    assert result["drop"] == pytest.approx([0.25, 0.25])
    # the plot's second panel: the on-topic rate after every step, read from the metrics
    assert result["runs"]["1"]["guard_curve"] == [[0, 1.0], [1, 0.5], [2, 0.75]]
    assert (out / "learning_chat.png").stat().st_size > 0
    table = (out / "learning_chat.md").read_text()
    assert "| grpo | 50 [40-60] -> 12 [12-12] | 1.00 [1.00-1.00] -> 0.33 [0.33-0.33] |" in table
