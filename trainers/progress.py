"""What a user sees while a run runs: the plan it states at its start, and live counts of
episodes and turns while a batch is rolled out or evaluated.

A step of an agentic env can take many minutes (a step is batch_size x group_size
episodes of up to the env's max_turns turns each), so the step bar alone would leave the
screen still for most of a run. :class:`EpisodeProgress` counts what finishes inside one
batch (``eval step 0: 5/16 episodes [00:31<01:08], 37 turns, 1.2 turns/s``), fed by
:func:`trainers.rollout.collect` once per vector step: one counter update per turn batch,
nothing per token. The time left is the episodes' average pace so far ("?" until one ends);
nothing here predicts a step's time before one has been measured.

On a terminal a bar redraws in place and ticks once a second, so a slow sandbox start or a
long generation still shows its clock moving. When the stream is not a terminal (CI,
``nohup``, a pipe) each redraw would pile up in the log, so a bar writes a plain line at
most once every ``log_every_s`` (a minute), and its final counts when it closes.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from tqdm import tqdm

if TYPE_CHECKING:
    from trainers.loop import Trainer

TICK_S = 1.0
"""A terminal's bars redraw at least this often, so the elapsed time moves while nothing ends."""
LOG_EVERY_S = 60.0
"""Off a terminal, a bar writes a line at most this often (and once when it closes)."""

_CONTROL = re.compile(r"\r|\n|\x1b\[[0-9;]*[A-Za-z]")  # tqdm's redraws and cursor moves


class LineLog:
    """A stream for tqdm off a terminal: each redraw becomes one plain line, a repeat of the
    previous line is dropped (tqdm's ``\\r`` redraws would otherwise run together into one
    endless line in a log file, its cursor moves into escape codes)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> int:
        line = _CONTROL.sub("", text).strip()
        if line and line != self.last:
            self.stream.write(line + "\n")
            self.last = line
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def step_bar(total: int, initial: int, desc: str, enabled: bool, stream: TextIO | None = None) -> tqdm:
    """The run's bar over steps; off a terminal one line per step (each step is minutes)."""
    stream = sys.stderr if stream is None else stream
    terminal = is_terminal(stream)
    return tqdm(total=total, initial=initial, desc=desc, unit="step", disable=not enabled,
                file=stream if terminal else LineLog(stream), mininterval=0.1 if terminal else 0)


class EpisodeProgress:
    """A live count of one batch's episodes and turns; a context manager (closing stops its
    ticker and prints the final counts off a terminal). Thread-safe: :meth:`advance` may come
    from a rollout thread while the ticker redraws."""

    def __init__(self, desc: str, episodes: int, *, enabled: bool = True, initial: int = 0,
                 stream: TextIO | None = None, log_every_s: float = LOG_EVERY_S) -> None:
        stream = sys.stderr if stream is None else stream
        terminal = is_terminal(stream)
        self.turns = 0
        self.episodes = initial
        """Episodes over (with ``initial``, those done before), counted whether shown or not."""
        self._note = ""
        self._started = self._last_turn = time.perf_counter()
        self._lock = threading.Lock()
        self._every = TICK_S if terminal else log_every_s
        # smoothing=0: the time left from the average pace since the start, not a moving
        # average that episodes ending in waves would swing; leave=False on a terminal: a
        # finished batch's bar gives its line back to the step bar. The counts and times come
        # first: a terminal trims a long line from its end.
        self._bar = tqdm(total=episodes, initial=initial, desc=desc, disable=not enabled,
                         file=stream if terminal else LineLog(stream), leave=not terminal,
                         mininterval=0.1 if terminal else log_every_s, miniters=0, smoothing=0,
                         bar_format="{desc}: {n_fmt}/{total_fmt} episodes [{elapsed}<{remaining}]{postfix}",
                         postfix=self._postfix())
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if enabled and self._every > 0:
            self._ticker = threading.Thread(target=self._tick, daemon=True, name="clawgym-progress")
            self._ticker.start()

    def __enter__(self) -> EpisodeProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def expect(self, episodes: int) -> None:
        """``episodes`` more to come (fill_groups' extra rounds)."""
        with self._lock:
            self._bar.total += episodes
            self._bar.refresh()

    def starting(self, episodes: int) -> None:
        """``episodes`` envs are being reset (a sandbox start can take a while)."""
        self.note(f"starting {_count(episodes, 'episode')}")

    def note(self, text: str) -> None:
        """What the batch is busy with beside playing turns (judging, a replay), shown until
        the next turn ends."""
        with self._lock:
            self._note = text
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.refresh()

    def advance(self, turns: int, ended: int) -> None:
        """``turns`` more turns played and ``ended`` more episodes over."""
        with self._lock:
            if turns:
                self.turns += turns
                self._last_turn = time.perf_counter()
            self.episodes += ended
            self._note = ""
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(ended)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._note = ""  # done with whatever it was busy with
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.close()

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            with self._lock:
                self._bar.set_postfix_str(self._postfix(), refresh=False)
                self._bar.refresh()

    def _postfix(self) -> str:
        seconds = self._last_turn - self._started  # the pace of play, not of judging after it
        text = _count(self.turns, "turn")
        if self.turns and seconds > 0:
            rate = self.turns / seconds
            text += f", {rate:.1f} turns/s" if rate >= 1 else f", {1 / rate:.1f} s/turn"
        if self._note:
            text += f", {self._note}"
        return text


def run_plan(trainer: Trainer) -> str:
    """The run's opening line: what it trains, on what, how much, where it writes, and how
    its time will be known (measured on the first step; nothing is predicted before)."""
    config = trainer.config
    model_dir = getattr(trainer.policy, "model_dir", None)
    model = getattr(model_dir, "name", None) or config.model
    where = "on the Tinker service" if config.compute == "tinker" else f"({config.device}, {config.dtype})"
    engine = getattr(config.engine, "kind", "hf")
    rollouts = f", rollouts served by {engine}" if engine != "hf" else ""
    if config.method == "sft":
        work = (f"{config.batch_size} episodes played by the env's oracle" if config.demos == "oracle"
                else f"{config.batch_size} demonstration records from {config.demos}")
    elif config.data:
        work = f"{config.batch_size} recorded turns from {config.data}"
    else:
        turns = getattr(trainer, "max_turns", None)
        work = (f"{config.batch_size} groups x {config.group_size} episodes"
                + (f" (up to {_count(turns, 'turn')} each)" if turns else "")
                + f", {config.parallel} envs at a time" + (f" on each of {trainer.ranks.world} ranks"
                                                          if trainer.ranks.distributed else ""))
    line = (f"training {trainer.env_id} with {config.method} on {model} {where}{rollouts}: "
            f"{_count(config.steps, 'step')} of {work}; {_eval_plan(trainer)}; run dir {config.out}")
    done = trainer.step
    if done >= config.steps:
        return line + f". Resuming: all {config.steps} steps are done already"
    estimate = ("the step bar estimates the rest from the steps' pace" if config.progress
                else "metrics.jsonl records each step's time (perf/step_s)")
    if done:
        took = [m["perf/step_s"] for m in trainer.run.metrics() if "perf/step_s" in m] if trainer.run else []
        pace = f"; its steps took {_duration(sum(took) / len(took))} each on average" if took else ""
        return line + f". Resuming after step {done}{pace}; {estimate}"
    return line + f". A step's time is measured, not predicted: {estimate} once step 1 ends"


def _eval_plan(trainer: Trainer) -> str:
    config = trainer.config
    n = len(trainer.eval_tasks) if trainer.eval_vec is not None else 0
    if not n:
        return "no evaluation"
    turns = trainer.eval_turns or getattr(trainer, "max_turns", None)
    when = ["before step 1"] if trainer.step == 0 else []
    when.append("after every step" if config.eval_every == 1 else f"every {config.eval_every} steps")
    if config.eval_every > 1 and config.steps % config.eval_every:
        when.append(f"after step {config.steps}")
    return (f"evaluation of {_count(n, 'greedy episode')}" + (f" (up to {_count(turns, 'turn')} each)" if turns else "")
            + " " + ", ".join(when[:-1]) + (" and " if len(when) > 1 else "") + when[-1])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
