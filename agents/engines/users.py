"""Every user's LoRA adapter on an inference server, each under its own name (vLLM's and
SGLang's multi-LoRA serving), for the live server's ``adapters=per_user engine=vllm|sglang``.

The server already batches requests that name different adapters (Punica-style kernels);
this module decides which name a request gives and keeps the server's set of adapters in
step with the users' adapters on disk:

- **Names.** ``user:<id>:v<version>``, a new name per version. A user id never holds a
  ``:`` (agents/adapter_store.py ``USER_ID``: letters, digits and ``._@+=-``), so the
  mapping is one-to-one and no name is the base model's (``base``) or a shared adapter's
  (``v<n>``); it goes to the server as a JSON string, never into a command or a path of
  its own choosing.
- **Why a new name per version, not unload + load under one name.** Between an unload and
  the next load the user's name would not exist, and their requests would fail; a request
  in flight finishes on the version it started with; and vLLM keys its prefix cache and
  its worker's LoRA cache by the adapter's integer id, which a fresh name gets anew
  (reloading changed weights under one name keeps the id, and vLLM 0.32 warns that cached
  prefix blocks of the old weights are then reused: vllm/entrypoints/openai/models/serving.py).
- **When.** A user's current version is loaded when a request of theirs first needs it
  (:meth:`UserLoras.route`) and again, eagerly, right after each update
  (:meth:`UserLoras.refresh`, called by whoever saved it), so the next request does not
  wait. A user with no adapter saved yet is served by the base model, as with
  ``engine=hf`` (the store's slot 0). A superseded name is unloaded once no request uses
  it; beyond ``capacity`` names the least recently used idle user's is unloaded (and
  loaded again on their next request). :meth:`UserLoras.forget` unloads a deleted user.
- **Files.** Each loaded version reads a snapshot of the user's adapter under
  ``<adapter_dir>/users/<id>/v<version>/`` (hard links where the filesystem allows: the
  store replaces files, never writes into them), since a server may read the files again
  whenever it evicts and reloads the adapter, and the user's own files change at their
  next update.
- **Concurrency.** Loads of one user are serialized by a lock of theirs; nothing a load or
  an update does holds a lock another user's request needs, so an update never stalls
  other users' requests.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from agents.decode import RowStop, TokenCallback
from agents.engines.base import EngineError, EnginePolicy
from agents.policy import Completion, SamplingParams

NAME_PREFIX = "user:"


def adapter_name(user: str, version: int) -> str:
    """The server's name of ``user``'s adapter at ``version`` (module docstring)."""
    if ":" in user or "/" in user or not user:
        raise ValueError(f"user id {user!r} cannot name an adapter: check it with agents.adapter_store.USER_ID")
    return f"{NAME_PREFIX}{user}:v{version}"


@dataclass(frozen=True)
class Loaded:
    version: int
    name: str
    path: Path


@dataclass
class LoraStats:
    loads: int = 0
    """Adapters loaded into the server (first use, after an update, after an eviction)."""
    unloads: int = 0
    evictions: int = 0
    """Idle users' adapters unloaded to stay within ``capacity``."""
    last_load_s: float = 0.0
    """Seconds the latest load took: snapshot plus the server's load call."""


class UserLoras:
    """Users' adapters loaded on ``policy``'s server under their own names (module docstring).

    ``current(user)`` is the version a user is served (0: nothing saved, the base model);
    ``snapshot(user, folder)`` writes their adapter as saved now (peft's files) into
    ``folder`` and returns its version, or 0 (writing nothing) when they have none. The two
    are the owner's (trainers/live/users.py), which keeps the adapters on disk."""

    def __init__(self, policy: EnginePolicy, capacity: int, current: Callable[[str], int],
                 snapshot: Callable[[str, Path], int]) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.policy = policy
        self.capacity = capacity
        self.current = current
        self.snapshot = snapshot
        self.root = policy.adapter_dir / "users"
        self.stats = LoraStats()
        self._loaded: OrderedDict[str, Loaded] = OrderedDict()  # user -> current name, least recent first
        self._stale: dict[str, Loaded] = {}  # name -> superseded or forgotten, unloaded once idle
        self._in_flight: Counter[str] = Counter()  # name -> rows using it
        self._lock = threading.Lock()
        self._user_locks: dict[str, threading.Lock] = {}

    # ---- generation (agents.batching.MixedGenerate) --------------------------------------------
    def generate(self, prompt_ids: list[list[int]], users: list[str | None], sampling: SamplingParams,
                 on_token: TokenCallback | None, stop: RowStop | None) -> list[Completion]:
        """Row ``i`` sampled with ``users[i]``'s adapter (the base model for None), all rows
        in flight at once: the server batches them."""
        routes = [functools.partial(self.route, user) for user in users]
        return self.policy.generate_ids(prompt_ids, sampling, on_token=on_token, stop=stop, routes=routes)

    @contextlib.contextmanager
    def route(self, user: str | None) -> Iterator[tuple[str | None, int]]:
        """``(name, version)`` of ``user``'s current adapter, loaded first if it is not, and
        kept loaded until the block ends; ``(None, 0)`` for the base model."""
        loaded = None if user is None else self._pin(user)
        try:
            yield (None, 0) if loaded is None else (loaded.name, loaded.version)
        finally:
            if loaded is not None:
                with self._lock:
                    self._in_flight[loaded.name] -= 1
                    if not self._in_flight[loaded.name]:
                        del self._in_flight[loaded.name]
                self._unload_idle()

    def _pin(self, user: str) -> Loaded | None:
        loaded = self._pin_current(user)
        if loaded is not None or self.current(user) == 0:
            return loaded
        lock = self._user_lock(user)  # one load per user at a time; others' requests go on meanwhile
        if not lock.acquire(blocking=False):
            # their new version is being loaded (an update): the version loaded so far serves
            # this request rather than have it wait; only a first load is waited for
            loaded = self._pin_current(user, any_version=True)
            if loaded is not None:
                return loaded
            lock.acquire()
        try:
            return self._pin_current(user) or self._load(user, pin=True)
        finally:
            lock.release()

    def _pin_current(self, user: str, any_version: bool = False) -> Loaded | None:
        """The user's loaded adapter, pinned, if it is their current version (or any version)."""
        want = self.current(user)
        with self._lock:
            loaded = self._loaded.get(user)
            if loaded is None or (loaded.version != want and not any_version):
                return None
            self._loaded.move_to_end(user)
            self._in_flight[loaded.name] += 1
            return loaded

    # ---- loading and unloading ------------------------------------------------------------------
    def refresh(self, user: str) -> None:
        """Load ``user``'s current version now (after an update), so their next request finds
        it; a failure is left to that request, which loads it again and reports it."""
        try:
            with self._user_lock(user):
                with self._lock:
                    loaded = self._loaded.get(user)
                if loaded is None or loaded.version != self.current(user):
                    self._load(user, pin=False)
        except (EngineError, OSError):
            pass

    def _load(self, user: str, pin: bool) -> Loaded | None:
        """Snapshot ``user``'s adapter and load it under its version's name, pinned with
        ``pin`` (the caller holds the user's lock); None when they have nothing saved."""
        started = time.perf_counter()
        folder = self.root / user
        scratch = folder / f".new-{uuid.uuid4().hex}"
        try:
            version = self.snapshot(user, scratch)
            if version == 0:
                return None
            path = folder / f"v{version}"
            with self._lock:
                loaded = self._loaded.get(user)
                if loaded is not None and loaded.version == version:  # current() ran ahead of the files
                    if pin:
                        self._in_flight[loaded.name] += 1
                    return loaded
                if adapter_name(user, version) in self._stale:  # deleted, recreated, the old still in use
                    raise EngineError(f"user {user!r}'s adapter of before their deletion is still in use by a "
                                      "request; retry once it has ended")
            if path.exists():  # left by a load the server refused
                shutil.rmtree(path)
            scratch.rename(path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        new = Loaded(version, adapter_name(user, version), path)
        try:
            self.policy.engine.load_adapter(self.policy.http, new.name, path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        with self._lock:
            old = self._loaded.pop(user, None)
            if old is not None:
                self._stale[old.name] = old
            self._loaded[user] = new
            if pin:
                self._in_flight[new.name] += 1
            self.stats.loads += 1
            self.stats.last_load_s = time.perf_counter() - started
            idle = [u for u, v in self._loaded.items() if not self._in_flight.get(v.name) and u != user]
            while len(self._loaded) > self.capacity and idle:  # least recently used first
                evicted = self._loaded.pop(idle.pop(0))
                self._stale[evicted.name] = evicted
                self.stats.evictions += 1
        self._unload_idle()
        return new

    def forget(self, user: str) -> None:
        """Unload every adapter of ``user`` (deleted): at once where no request is using it,
        else as soon as the last one ends."""
        with self._user_lock(user):
            with self._lock:
                loaded = self._loaded.pop(user, None)
                if loaded is not None:
                    self._stale[loaded.name] = loaded
            self._unload_idle()

    def _unload_idle(self) -> None:
        with self._lock:
            idle = [stale for name, stale in self._stale.items() if not self._in_flight.get(name)]
            for stale in idle:
                del self._stale[stale.name]
        for stale in idle:
            try:
                self.policy.engine.unload_adapter(self.policy.http, stale.name)
                with self._lock:
                    self.stats.unloads += 1
            except EngineError:
                pass  # a server that cannot unload still serves; the name goes when it restarts
            shutil.rmtree(stale.path, ignore_errors=True)
            with contextlib.suppress(OSError):  # the user's folder, once it holds no version
                stale.path.parent.rmdir()

    def _user_lock(self, user: str) -> threading.Lock:
        with self._lock:
            return self._user_locks.setdefault(user, threading.Lock())

    def loaded(self) -> dict[str, str]:
        """user -> the name of their current adapter on the server."""
        with self._lock:
            return {user: loaded.name for user, loaded in self._loaded.items()}

    def names(self) -> list[str]:
        """Every name this object has loaded and not yet unloaded (current and superseded)."""
        with self._lock:
            return sorted([loaded.name for loaded in self._loaded.values()] + list(self._stale))
