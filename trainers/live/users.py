"""Users of a live server: their keys, and with ``adapters=per_user`` their adapters.

Keys (``api_keys=<file>``) map each bearer key to one user; an ``admin`` key may also
export or delete any user. The file is lines of ``<key> <user id> [admin]`` (``#``
comments, blank lines skipped) or a JSON object ``{"<key>": "<user id>"}`` whose values
may be ``{"user": "<user id>", "admin": true}``.

:class:`UserAdapters` serves every user's adapter from one base model: a copy of the
policy's sampling model (packed as the policy packs its own, the embeddings shared), with
an :class:`~agents.multi_lora.AdapterBank` of ``max_adapters`` slots and an
:class:`~agents.adapter_store.AdapterStore` under ``<out>/adapters``. A generation batch
leases its users' slots and decodes its rows together, each with its own user's adapter
(:func:`~agents.multi_lora.decode_mixed`). The learner saves a user's adapter under the same
lock a batch holds, so a batch in flight finishes on the versions it started with. A
user's weight version (``system_fingerprint`` ``clawgym-v<n>``) is the number of updates
their adapter has had, kept in ``<out>/adapters/<user>/state.json``.

With ``engine=vllm|sglang`` (:meth:`UserAdapters.serve_on`) the rows are sampled on the
inference server instead, each naming its user's adapter, which
:class:`~agents.engines.users.UserLoras` loads there under a name of its own per version:
when a request first needs it and right after each update. Nothing then holds the lock
for a batch: a save (or delete) holds it only while files change, so a user's update never
waits for, nor stalls, other users' requests.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch

from agents.adapter_store import CONFIG, USER_ID, WEIGHTS, AdapterStore
from agents.decode import RowStop, TokenCallback
from agents.engines import EnginePolicy
from agents.engines.users import UserLoras
from agents.multi_lora import AdapterBank, decode_mixed, lora_targets
from agents.openai_protocol import RequestError
from agents.packed_linear import pack_linears
from agents.policy import Completion, SamplingParams, TransformersPolicy
from agents.server import Caller

STATE = "state.json"
"""A user's learner state beside their adapter: ``{"version": n, "turn_ids": [...]}``."""


def read_keys(path: str | Path) -> dict[str, Caller]:
    """The users' keys in ``path`` (module docstring); a ``ValueError`` saying which line is
    wrong, never quoting a key."""
    text = Path(path).read_text()
    keys: dict[str, Caller] = {}
    if text.lstrip().startswith("{"):
        try:
            entries = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"api_keys={path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
        for number, (key, value) in enumerate(entries.items(), 1):
            user, admin = (value, False) if isinstance(value, str) else (
                (value.get("user"), bool(value.get("admin"))) if isinstance(value, dict) else (None, False))
            keys[key] = _caller(path, f"entry {number}", key, user, admin, keys)
        return keys
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] != "admin"):
            raise ValueError(f"api_keys={path} line {number}: write '<key> <user id>' or '<key> <user id> admin'")
        keys[fields[0]] = _caller(path, f"line {number}", fields[0], fields[1], len(fields) == 3, keys)
    return keys


def _caller(path: str | Path, where: str, key: str, user: Any, admin: bool, seen: dict[str, Caller]) -> Caller:
    if not isinstance(user, str) or not USER_ID.fullmatch(user):
        raise ValueError(f"api_keys={path} {where}: the user id must be 1-128 letters, digits or ._@+=- "
                         "(not starting with a dot)")
    if not key or key in seen:
        raise ValueError(f"api_keys={path} {where}: a key is empty or listed twice")
    return Caller(user, admin)


def check_user(user: str | None) -> str:
    """A request's user id, or a 400 saying how to name one."""
    if user is None:
        raise RequestError(400, "adapters=per_user needs to know the user: send a users' key (api_keys), "
                                "the body's 'user' field or the X-User-Id header", param="user",
                           code="invalid_value")
    if not isinstance(user, str) or not USER_ID.fullmatch(user):
        raise RequestError(400, "a user id is 1-128 letters, digits or ._@+=- (not starting with a dot)",
                           param="user", code="invalid_value")
    return user


class UserAdapters:
    """Every user's adapter, served in mixed batches (module docstring)."""

    def __init__(self, policy: TransformersPolicy, root: Path, capacity: int) -> None:
        self.policy = policy
        serve = policy.serve_model  # still the base: per_user never merges into the policy
        embeddings = {id(p): p for m in serve.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        base = copy.deepcopy(serve, embeddings).eval()  # not policy.serve_model: its merge writes those layers
        if policy.device == "cpu" and policy.dtype == "float32":
            pack_linears(base)  # before the bank wraps them, so q/k/v and gate/up stay one product
        self.bank = AdapterBank(base, lora_targets(policy.model), policy.lora, capacity)
        self.store = AdapterStore(root, self.bank)
        self.lock = threading.Lock()
        """Held by a generation batch and by a save or delete: a batch never sees a swap."""
        self._versions: dict[str, int] = {}
        self._calls = 0
        self.engine: UserLoras | None = None
        """With engine=vllm|sglang: the users' adapters on the server, which samples every row."""

    def serve_on(self, policy: EnginePolicy) -> None:
        """Sample on ``policy``'s inference server from now on, each row with its user's
        adapter loaded there (module docstring); at most ``max_adapters`` users' names loaded."""
        self.engine = UserLoras(policy, policy.settings.max_loaded_loras or self.store.max_adapters,
                                self.version, self.snapshot)

    def snapshot(self, user: str, folder: Path) -> int:
        """Write ``user``'s adapter as saved now into ``folder`` (hard links: a save replaces
        the files, so the links keep these bytes) and return its version; 0 and nothing
        written when they have no adapter."""
        with self.lock:  # a save in progress finishes first: files and version agree
            if not self.store.exists(user):
                return 0
            folder.mkdir(parents=True)
            for name in (WEIGHTS, CONFIG):
                try:
                    os.link(self.store.path(user) / name, folder / name)
                except OSError:  # another filesystem, or no hard links there
                    shutil.copy2(self.store.path(user) / name, folder / name)
            return self.version(user)

    # ---- versions ----------------------------------------------------------------------------
    def state(self, user: str) -> dict[str, Any]:
        """``user``'s learner state: ``{"version": 0, "turn_ids": []}`` for a new user."""
        file = self.store.path(user) / STATE
        return json.loads(file.read_text()) if file.exists() else {"version": 0, "turn_ids": []}

    def version(self, user: str | None) -> int:
        if user is None:
            return 0
        if user not in self._versions:
            self._versions[user] = int(self.state(user)["version"])
        return self._versions[user]

    def users(self) -> list[str]:
        """Users with an adapter on disk."""
        return sorted(p.name for p in self.store.root.iterdir() if (p / STATE).exists())

    def save(self, user: str, weights: dict[str, torch.Tensor], optimizer: dict[str, Any], version: int,
             turn_ids: list[int]) -> None:
        """A user's update: optimizer state, adapter, then the state naming its version (the
        last write: a crash before it leaves the turns to be trained again, never lost)."""
        directory = self.store.path(user)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".optimizer.pt.tmp{os.getpid()}"
        torch.save(optimizer, tmp)
        os.replace(tmp, directory / "optimizer.pt")
        with self.lock:  # between batches: the next one decodes the new weights, under the new version
            self.store.save(user, weights)
            tmp = directory / f".{STATE}.tmp{os.getpid()}"
            tmp.write_text(json.dumps({"version": version, "turn_ids": turn_ids}))
            os.replace(tmp, directory / STATE)
            self._versions[user] = version
        if self.engine is not None:  # loaded now, so the user's next request does not wait for it
            self.engine.refresh(user)

    def optimizer_state(self, user: str) -> dict[str, Any] | None:
        file = self.store.path(user) / "optimizer.pt"
        return torch.load(file, weights_only=True) if file.exists() else None

    def delete(self, user: str) -> bool:
        with self.lock:
            self._versions.pop(user, None)
            deleted = self.store.delete(user)
        if self.engine is not None:  # unloaded from the server (once their requests in flight end)
            self.engine.forget(user)
        return deleted

    def reseed(self, offset: int) -> None:
        """Make the next batches' sampling seeds a function of ``offset``, as
        :meth:`~agents.policy.TransformersPolicy.reseed` does (trainers.run adapters=per_user:
        the step, so a resumed run samples what the stopped one would have)."""
        with self.lock:
            self._calls = offset

    # ---- generation (agents.batching.MixedGenerate) --------------------------------------------
    def __call__(self, prompt_ids: list[list[int]], users: list[str | None], sampling: SamplingParams,
                 on_token: TokenCallback | None, stop: RowStop | None) -> list[Completion]:
        if self.engine is not None:
            return self.engine.generate(prompt_ids, users, sampling, on_token, stop)
        policy = self.policy
        room = policy.max_context - max(len(p) for p in prompt_ids)
        max_new = min(sampling.max_new_tokens, room)
        if max_new <= 0:
            return [policy._completion(p, [], [], "context", sampling) for p in prompt_ids]
        with self.lock, self.store.lease(users) as slots:
            versions = [self.version(u) for u in users]
            torch.manual_seed(policy._seed * 1_000_003 + self._calls)
            self._calls += 1
            rows = decode_mixed(self.bank, prompt_ids, slots, pad_id=policy.tokenizer.pad_token_id,
                                eos_id=policy.tokenizer.eos_token_id, max_new=max_new,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                share_prompts=policy.share_prompts, on_token=on_token, stop=stop)
        return [policy._completion(p, row.tokens, row.logprobs, row.finish_reason, sampling, version)
                for p, row, version in zip(prompt_ids, rows, versions)]
