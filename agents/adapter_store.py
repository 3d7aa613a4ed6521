"""Every user's adapter on disk, the most recently used few in an :class:`AdapterBank`'s slots.

For example::

    store = AdapterStore("runs/adapters", bank)        # at most bank.capacity in memory
    store.save("alice", state)                         # peft's keys, as trainable_state returns them
    with store.lease(["alice", "bob", None]) as slots: # [s_alice, s_bob, 0]: pinned until the batch ends
        decode_mixed(bank, prompts, slots, ...)

A user's directory is ``root/<user id>/`` with ``adapter_model.safetensors`` and peft's
``adapter_config.json``, so ``PeftModel.from_pretrained`` (or vLLM's LoRA loader) reads it
as it is. A user id must name one directory inside ``root``: ``../x``, ``/abs`` and the
empty id are refused, since an id comes from a request.

Memory is the bank's ``capacity`` slots, least recently used evicted first. A leased slot
is pinned (counted, so two batches may share a user) and never evicted while a batch in
flight reads it; a lease that needs more slots than are unpinned fails with a clear
error instead of waiting. A user with nothing saved yet decodes as the base model (slot 0).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from agents.multi_lora import NO_ADAPTER, AdapterBank

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
USER_ID = re.compile(r"[A-Za-z0-9_@+=-][A-Za-z0-9._@+=-]{0,127}")
"""A user id is one path component: letters, digits and ``._@+=-``, not starting with a dot."""


@dataclass
class StoreStats:
    loads: int = 0
    """Adapters read from disk into a slot (cold loads)."""
    evictions: int = 0
    last_load_s: float = 0.0
    """Seconds the latest cold load took (read the file, copy into the slot)."""
    load_s: float = 0.0
    """Seconds of all cold loads together."""


class AdapterStore:
    """Users' adapters under ``root``, at most ``bank.capacity`` held in ``bank``'s slots (LRU).
    Thread-safe (one lock); the bank's rows are its caller's to set."""

    def __init__(self, root: str | Path, bank: AdapterBank) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.bank = bank
        self.max_adapters = bank.capacity
        self.stats = StoreStats()
        self._slots: OrderedDict[str, int] = OrderedDict()  # resident users, least recent first
        self._pins: dict[int, int] = {}  # slot -> leases in flight
        self._free = list(range(bank.capacity, 0, -1))  # popped from the end: slot 1 first
        self._lock = threading.RLock()

    def path(self, user: str) -> Path:
        """The directory of ``user``'s adapter; a ``ValueError`` for an id that is not one
        plain path component (it could reach outside ``root``)."""
        if not isinstance(user, str) or not USER_ID.fullmatch(user):
            raise ValueError(f"user id {user!r} is not allowed: use 1-128 letters, digits or ._@+=- "
                             "(not starting with a dot), so that it names one directory in the store")
        return self.root / user

    def exists(self, user: str) -> bool:
        return (self.path(user) / WEIGHTS).exists()

    def resident(self) -> list[str]:
        """Users held in memory, least recently used first."""
        with self._lock:
            return list(self._slots)

    def save(self, user: str, state: dict[str, torch.Tensor]) -> None:
        """Write ``user``'s adapter (whole: a reader sees the old file or the new one, never
        half), and refresh its slot if it is resident: the next batch decodes the new weights."""
        from safetensors.torch import save_file

        directory = self.path(user)
        self.bank._pairs(state)  # the bank's layers and shapes, checked before anything is written
        directory.mkdir(parents=True, exist_ok=True)
        if not (directory / CONFIG).exists():
            self._write_config(directory)
        tmp = directory / f".{WEIGHTS}.tmp{os.getpid()}.{threading.get_ident()}"
        save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(tmp))
        os.replace(tmp, directory / WEIGHTS)
        with self._lock:
            slot = self._slots.get(user)
            if slot is not None:
                self.bank.load(slot, state)

    def _write_config(self, directory: Path) -> None:
        from peft import LoraConfig

        lora = self.bank.lora
        targets = lora.targets if lora.targets == "all-linear" else [t.strip() for t in lora.targets.split(",")]
        LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=targets, task_type="CAUSAL_LM",
                   lora_dropout=lora.dropout).save_pretrained(str(directory))

    def read(self, user: str) -> dict[str, torch.Tensor]:
        """``user``'s adapter as saved (from disk)."""
        from safetensors.torch import load_file

        file = self.path(user) / WEIGHTS
        if not file.exists():
            raise FileNotFoundError(f"user {user!r} has no adapter in {self.root}; save one first")
        return load_file(str(file), device=str(self.bank.rows.device))

    @contextlib.contextmanager
    def lease(self, users: list[str | None]) -> Iterator[list[int]]:
        """The slot of each user (0 for ``None`` or a user with nothing saved), loaded and
        pinned until the block ends."""
        slots = self.acquire(users)
        try:
            yield slots
        finally:
            self.release(slots)

    def acquire(self, users: list[str | None]) -> list[int]:
        """As :meth:`lease`, without the block: :meth:`release` the slots it returns."""
        with self._lock:
            wanted = list(dict.fromkeys(u for u in users if u is not None and (u in self._slots or self.exists(u))))
            room = len(self._free) + sum(1 for u, s in self._slots.items() if u not in wanted and not self._pins.get(s))
            cold = [u for u in wanted if u not in self._slots]
            if len(cold) > room:
                raise RuntimeError(f"{len(cold)} adapters must be loaded but only {room} of the store's "
                                   f"{self.max_adapters} slots are free or unpinned; raise max_adapters or "
                                   "split the batch")
            pinned: list[int] = []
            try:
                for user in wanted:
                    slot = self._slots.get(user)
                    if slot is None:
                        slot = self._load(user, keep=set(wanted))
                    self._slots.move_to_end(user)
                    self._pins[slot] = self._pins.get(slot, 0) + 1
                    pinned.append(slot)
            except BaseException:  # a file that cannot be read: nothing of this lease stays pinned
                self.release(pinned)
                raise
            return [NO_ADAPTER if u is None or u not in self._slots else self._slots[u] for u in users]

    def release(self, slots: list[int]) -> None:
        with self._lock:
            for slot in set(slots) - {NO_ADAPTER}:
                left = self._pins.get(slot, 0) - 1
                if left > 0:
                    self._pins[slot] = left
                else:
                    self._pins.pop(slot, None)

    def delete(self, user: str) -> bool:
        """Remove ``user``'s directory (everything in it) and free their slot; True if there was
        anything. Refused while a batch in flight holds their slot."""
        import shutil

        directory = self.path(user)
        with self._lock:
            slot = self._slots.get(user)
            if slot is not None and self._pins.get(slot):
                raise RuntimeError(f"user {user!r}'s adapter is in use by a batch in flight; try again")
            if slot is not None:
                del self._slots[user]
                self.bank.clear(slot)
                self._free.append(slot)
            existed = directory.exists()
            shutil.rmtree(directory, ignore_errors=True)
        return existed or slot is not None

    def _load(self, user: str, keep: set[str]) -> int:
        """Read ``user`` from disk into a free slot, or the least recently used unpinned one's."""
        if not self._free:
            victim = next(u for u, s in self._slots.items() if u not in keep and not self._pins.get(s))
            self._free.append(self._slots.pop(victim))
            self.stats.evictions += 1
        slot = self._free.pop()
        started = time.perf_counter()
        self.bank.load(slot, self.read(user))
        took = time.perf_counter() - started
        self.stats.loads += 1
        self.stats.last_load_s, self.stats.load_s = took, self.stats.load_s + took
        self._slots[user] = slot
        return slot
