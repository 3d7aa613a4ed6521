"""trainers.progress: what a batch's live count shows on a terminal and in a log file, and
the plan a run states at its start. (A whole run's output is checked by test_run's smoke run.)"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from types import SimpleNamespace

from tqdm import tqdm

import trainers.progress
from trainers.config import TrainConfig
from trainers.distributed import Ranks
from trainers.progress import EpisodeProgress, LineLog, run_plan, step_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_tqdms_redraws_become_one_line_each_without_repeats() -> None:
    log = io.StringIO()
    lines = LineLog(log)
    lines.write("\rstep 1/2")
    lines.write("\n\x1b[A")  # a nested bar's cursor moves
    lines.write("\rstep 1/2   ")  # the same line again, padded
    lines.write("\rstep 2/2")
    lines.write("\n")
    assert log.getvalue() == "step 1/2\nstep 2/2\n"


def test_a_log_gets_the_first_and_final_counts_not_every_turn() -> None:
    # the default off a terminal: at most a line a minute, so a fast batch writes its start and end
    log = io.StringIO()
    with EpisodeProgress("eval step 0", 4, stream=log) as progress:
        for _ in range(200):
            progress.advance(2, 0)
        progress.advance(1, 4)
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in log.getvalue()
    assert lines[0] == "eval step 0: 0/4 episodes [00:00<?], 0 turns"
    assert re.fullmatch(r"eval step 0: 4/4 episodes \[00:00<00:00\], 401 turns, [0-9.]+ turns/s", lines[1]), lines[1]


def test_a_quiet_log_still_gets_a_line_every_log_interval() -> None:
    log = io.StringIO()
    with EpisodeProgress("rollout step 1", 8, stream=log, log_every_s=0.25) as progress:
        progress.advance(3, 0)
        time.sleep(1.1)  # a slow turn: the ticker writes the clock's progress anyway
    assert "rollout step 1: 0/8 episodes [00:01<?], 3 turns, " in log.getvalue()  # the clock moved on, nothing else


def test_on_a_terminal_the_bar_redraws_in_place_ticks_while_idle_and_clears_when_done(monkeypatch) -> None:
    monkeypatch.setattr(trainers.progress, "TICK_S", 0.05)
    screen = Terminal()
    with EpisodeProgress("eval step 0", 2, stream=screen) as progress:
        progress.note("judging the turns")
        drawn = screen.getvalue().count("\r")
        time.sleep(0.3)
        assert screen.getvalue().count("\r") > drawn  # redrawn without any advance
        assert "0/2 episodes [00:00<?], 0 turns, judging the turns" in screen.getvalue()
        progress.advance(5, 2)
        assert re.search(r"2/2 episodes \[[0-9:<]+\], 5 turns, ", screen.getvalue())
    assert "\n" not in screen.getvalue()  # leave=False: its line goes back to the step bar


def test_a_disabled_count_prints_nothing_and_still_counts() -> None:
    log = io.StringIO()
    with EpisodeProgress("x", 2, enabled=False, stream=log) as progress:
        progress.advance(3, 2)
    assert (progress.turns, progress.episodes) == (3, 2) and log.getvalue() == ""


def test_the_step_bar_writes_a_line_per_step_off_a_terminal() -> None:
    log = io.StringIO()
    bar: tqdm = step_bar(3, 0, "combine on clawgym/Chat-v1", enabled=True, stream=log)
    for _ in range(3):
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    steps = [re.search(r" (\d)/3 ", line)[1] for line in lines]  # type: ignore[index]
    assert steps[:4] == ["0", "1", "2", "3"] and set(steps[4:]) <= {"3"}  # closing: the overall rate
    assert "\r" not in log.getvalue()


class StandInTrainer:
    """What :func:`run_plan` reads of a Trainer, for a run of env=swe as a user would start it."""

    def __init__(self, config: TrainConfig, step: int = 0, took: list[float] | None = None) -> None:
        self.config, self.step, self.ranks = config, step, Ranks()
        self.env_id, self.max_turns, self.eval_turns = "clawgym/SWE-v1", 30, None
        self.policy = SimpleNamespace(model_dir=Path("/cache/models/SmolLM2-135M-Instruct"))
        self.eval_tasks, self.eval_vec = [f"task-{i}" for i in range(16)], object()
        self.run = SimpleNamespace(metrics=lambda: [{"step": 0}] + [{"step": i + 1, "perf/step_s": s}
                                                                  for i, s in enumerate(took or [])])


def test_the_plan_says_what_the_run_does_and_how_its_time_will_be_known() -> None:
    config = TrainConfig(env="swe", parallel=8, eval_every=4, steps=10, out="runs/swe", device="cpu", dtype="float32")
    plan = run_plan(StandInTrainer(config))  # type: ignore[arg-type]
    assert plan == ("training clawgym/SWE-v1 with combine on SmolLM2-135M-Instruct (cpu, float32): 10 steps of "
                    "8 groups x 4 episodes (up to 30 turns each), 8 envs at a time; evaluation of 16 greedy episodes "
                    "(up to 30 turns each) before step 1, every 4 steps and after step 10; run dir runs/swe. A step's "
                    "time is measured, not predicted: the step bar estimates the rest from the steps' pace once step 1 ends")
    resumed = run_plan(StandInTrainer(config, step=2, took=[200.0, 280.0]))  # type: ignore[arg-type]
    assert resumed.endswith("after step 10; run dir runs/swe. Resuming after step 2; its steps took 4.0 min each "
                            "on average; the step bar estimates the rest from the steps' pace")
    assert "every 4 steps" in resumed and "before step 1" not in resumed  # the baseline was evaluated already
