"""The resumable record of an evaluation: ``<out>/episodes.jsonl``.

``benchmarks.run`` appends each finished episode here as its wave ends, so a run killed
halfway loses at most the wave in flight; started again with the same ``out=`` and the same
settings it plays only the (task, episode) pairs the log lacks. The first line is the run's
fingerprint (:data:`FINGERPRINT_KEYS`); a folder whose fingerprint differs is refused
rather than mixed into, and the error names each differing key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.config import ConfigError

FINGERPRINT_KEYS = ("suite", "split", "policy", "model", "seed", "tasks", "pick", "episodes_per_task",
                    "temperature", "max_new_tokens", "max_context", "env_kwargs")
"""The settings that decide what an episode is: a folder's log resumes only a run that
agrees on all of them (parallel=, device= or timeout_s= may change between the two)."""
LATER_KEYS = {"pick": "first", "max_context": 2048}
"""Keys added to the fingerprint after logs were written, with the value an older log meant."""


class EpisodeLog:
    """``<out>/episodes.jsonl``: a header line ``{"fingerprint": ...}``, then one line per
    finished episode (its row, transcript and SWE prediction), appended and flushed per wave,
    so a killed run loses at most the wave in flight."""

    def __init__(self, out: Path, fingerprint: dict[str, Any]) -> None:
        self.path = out / "episodes.jsonl"
        self.fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back
        self.done: dict[tuple[str, int], dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        text = self.path.read_text()
        lines = text.splitlines()
        records = []
        for number, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number < len(lines) - 1:
                    raise ConfigError(f"{self.path} line {number + 1} is not JSON; move the folder "
                                      "away or pass another out=") from None
                lines.pop()  # the last line of a killed run may be cut short: it is played again
        theirs = records[0].get("fingerprint", {}) if records else self.fingerprint
        theirs = {**LATER_KEYS, **theirs}
        differ = [k for k in FINGERPRINT_KEYS if theirs.get(k) != self.fingerprint.get(k)]
        if differ:
            said = "; ".join(f"{k}: {theirs.get(k)!r} there, {self.fingerprint.get(k)!r} now" for k in differ)
            raise ConfigError(f"out={self.path.parent} holds episodes of another run ({said}); pass the same "
                              "settings to resume it, or a new out= for a new run")
        if text and not text.endswith("\n") or len(lines) < len(text.splitlines()):
            self.path.write_text("".join(line + "\n" for line in lines))  # appends start on a line of their own
        self.done = {(r["task_id"], r["episode"]): r for r in records[1:]}

    def append(self, records: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        with self.path.open("a") as log:
            if new:
                log.write(json.dumps({"fingerprint": self.fingerprint}) + "\n")
            log.writelines(json.dumps(r) + "\n" for r in records)
        for r in records:
            self.done[(r["task_id"], r["episode"])] = r
