"""The live backend: sessions, batched generation, the durable record, background learning.

Implements :class:`agents.server.ChatBackend`. A request is *prepared* (model name and
context checked, session and turn type settled, prompt tokenized), generated through the
:class:`BatchingGenerator` on whatever weight version is current when its batch starts,
then *recorded*: the turn, its next state for the session's previous turn, and the
session's pointer go into SQLite in one transaction before the reply is sent. A request
whose client left is *abandoned*: its generations stop at the next decode step and it is
recorded as never delivered (store.py: never a next state, never trained on).

With ``adapters=per_user`` every request has a user (its key's, else the body's ``user`` or
``X-User-Id``): it is placed only among that user's sessions, generated with that user's
adapter (trainers/live/users.py) and recorded as theirs; ``export_user`` and
``delete_user`` reach everything kept about one user. With ``engine=vllm|sglang`` too, the
users' adapters are loaded into the inference server under their own names and each row
names its user's (trainers/live/users.py, agents/engines/users.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from agents.batching import BatchingGenerator
from agents.engines import EnginePolicy
from agents.openai_protocol import ChatRequest, RequestError, response_message
from agents.policy import Completion, SamplingParams, TransformersPolicy
from agents.server import TurnHeaders, new_request_id
from envs.messages import Message
from trainers.live import sessions
from trainers.live.config import ServeConfig
from trainers.live.learner import Learner
from trainers.live.store import Store
from trainers.live.user_learner import UserLearner
from trainers.live.users import UserAdapters, check_user


@dataclass
class Turn:
    """A prepared request (agents.server.PreparedTurn)."""

    request_id: str
    prompt_ids: list[int]
    model: str
    n: int
    has_tools: bool
    messages: list[Message]
    tools: list[dict[str, Any]]
    sampling: SamplingParams
    turn_type: str
    session: sessions.Placement
    session_done: bool
    started: float
    user: str | None = None
    """Whose adapter serves it and whose record it joins (per-user adapters only)."""
    generations: list[Future[Completion]] = field(default_factory=list)
    """One future per choice, as submitted."""


class Counters:
    """Monotonic counters and a latency reservoir for /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, float] = {}
        self.latencies: list[float] = []

    def add(self, name: str, amount: float = 1.0) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0.0) + amount

    def latency(self, seconds: float) -> None:
        with self._lock:
            self.latencies.append(seconds)
            if len(self.latencies) > 4096:
                del self.latencies[:2048]

    def snapshot(self) -> tuple[dict[str, float], list[float]]:
        with self._lock:
            return dict(self.values), list(self.latencies)


class LiveService:
    def __init__(self, config: ServeConfig, policy: TransformersPolicy, store: Store,
                 learner: Learner | None, adapters: UserAdapters | None = None) -> None:
        self.config = config
        self.policy = policy
        self.store = store
        self.learner = learner
        self.adapters = adapters
        """Every user's adapter, with adapters=per_user; None with a shared one."""
        if adapters is not None and isinstance(policy, EnginePolicy):
            adapters.serve_on(policy)  # engine=vllm|sglang: users' adapters are served by the engine
        self.generator = BatchingGenerator(policy, max_batch=config.max_batch, wait_s=config.batch_wait_ms / 1000,
                                           mixed=adapters)
        self.model_ids = [config.served_model_name]
        self._aliases = {config.served_model_name, "default", policy.model_dir.name}
        self.counters = Counters()
        self._known_users = set() if adapters is None else store.users() | set(adapters.users())
        """Users with a record or an adapter, admitted under max_users."""
        self._users_lock = threading.Lock()
        self.started = time.time()
        self._stop = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_idle, name="session-sweeper", daemon=True)
        self._sweeper.start()

    def close(self) -> None:
        self._stop.set()
        self.generator.close()
        if self.learner is not None:
            self.learner.close()

    # ---- ChatBackend ------------------------------------------------------------------------
    def prepare(self, request: ChatRequest, headers: TurnHeaders) -> Turn:
        if request.model not in self._aliases:
            raise RequestError(404, f"the model {request.model!r} does not exist; this server serves "
                                    f"{self.config.served_model_name!r} (GET /v1/models)",
                               param="model", code="model_not_found")
        messages = request.chat_messages()
        tools = request.tools or []
        prompt_ids = self.policy.encode(messages, tools or None)
        limit = request.completion_limit(self.config.max_new_tokens)
        if len(prompt_ids) + 1 > self.config.max_context:
            raise RequestError(400, f"the prompt is {len(prompt_ids)} tokens; this model's context window is "
                                    f"{self.config.max_context} tokens including the reply",
                               param="messages", code="context_length_exceeded")
        turn_type = headers.turn_type or request.turn_type or sessions.classify(messages)
        done = headers.session_done if headers.session_done is not None else bool(request.session_done)
        user = None
        if self.adapters is not None:
            user = self._admit(check_user(headers.user_id or (request.model_extra or {}).get("user")))
        placement = sessions.place(messages, headers.session_id or request.session_id, self.store, user)
        sampling = SamplingParams(temperature=self.config.temperature if request.temperature is None
                                  else request.temperature,
                                  top_p=1.0 if request.top_p is None else request.top_p,
                                  max_new_tokens=min(limit, self.config.max_context - len(prompt_ids)))
        return Turn(new_request_id(), prompt_ids, request.model, request.n, bool(tools), messages, tools,
                    sampling, turn_type, placement, done, time.perf_counter(), user)

    def submit(self, turn: Turn, index: int, on_token: Callable[[int], None] | None = None) -> Future[Completion]:
        future = self.generator.submit(turn.prompt_ids, turn.sampling, on_token, turn.user)
        turn.generations.append(future)
        return future

    def abandon(self, turn: Turn) -> None:
        """The client left before its reply: stop the turn's generations at the next decode
        step and, once they have all ended, record it as never delivered. Returns at once
        (it is called where the server cannot wait)."""
        futures = list(turn.generations)
        if not futures:
            return
        for future in futures:
            self.generator.cancel(future)
        remaining = [len(futures)]
        lock = threading.Lock()

        def settled(_: Future[Completion]) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            completions = [f.result() for f in futures if not f.cancelled() and f.exception() is None]
            if completions:
                self.record(turn, completions, delivered=False)

        for future in futures:
            future.add_done_callback(settled)

    def record(self, turn: Turn, completions: list[Completion], delivered: bool = True) -> None:
        first = None
        for i, completion in enumerate(completions):
            response = response_message(completion)
            # of n choices the first is the turn, until the client goes on from another
            main = turn.turn_type == "main" and i == 0
            turn_id = self.store.record_turn(
                request_id=turn.request_id if i == 0 else f"{turn.request_id}-{i}",
                session_id=turn.session.session_id, turn_type="main" if main else "side",
                messages=turn.messages, tools=turn.tools, response=response, prompt_ids=completion.prompt_ids,
                completion_ids=completion.completion_ids, logprobs=completion.logprobs,
                weight_version=completion.weight_version, finish_reason=completion.finish_reason,
                temperature=completion.temperature, continuation=sessions.continuation(turn.messages, response),
                next_state=turn.session.next_state if i == 0 else None, next_role=turn.session.next_role,
                client_id=turn.session.client_id, chosen=turn.session.chosen if i == 0 else None,
                choice_of=first if turn.turn_type == "main" else None, delivered=delivered, user_id=turn.user)
            if i == 0:
                first = turn_id
        if not delivered:
            self.counters.add("requests_abandoned_total")
            return
        if turn.session_done:
            self.store.close_session(turn.session.session_id, "done")
        self.counters.add("requests_total")
        self.counters.add(f"turns_{turn.turn_type}_total")
        self.counters.add("completion_tokens_total", sum(len(c.completion_ids) for c in completions))
        self.counters.latency(time.perf_counter() - turn.started)
        if self.learner is not None:
            self.learner.notify()

    def reject(self, error: RequestError) -> None:
        try:
            self.store.record_rejection(error.status, error.code or error.type, error.message)
        except Exception:  # a refusal is still answered if the record is unavailable
            pass

    # ---- users ------------------------------------------------------------------------------
    def _admit(self, user: str) -> str:
        """``user``, or a 429 when they would be one more than ``max_users``: without api_keys
        any client can name a new user, and each trained one holds an adapter on disk."""
        with self._users_lock:
            if user not in self._known_users:
                if 0 < self.config.max_users <= len(self._known_users):
                    raise RequestError(429, f"this server already has max_users={self.config.max_users} users; "
                                            "an admin can delete one (DELETE /v1/users/<id>), or restart the "
                                            "server with a larger max_users", type="insufficient_quota",
                                       param="user", code="max_users")
                self._known_users.add(user)
        return user

    def _users(self, user: str) -> UserAdapters:
        if self.adapters is None:
            raise RequestError(404, "this server runs adapters=shared: it keeps no record per user "
                                    "(start it with adapters=per_user)", code="not_found")
        try:
            self.adapters.store.path(user)
        except ValueError as exc:
            raise RequestError(400, str(exc), param="user", code="invalid_value") from None
        return self.adapters

    def export_user(self, user: str) -> dict[str, Any]:
        """``user``'s sessions with every turn (as ``trainers.serve export`` writes them) and
        their adapter's version."""
        from trainers.serve import export_turn

        adapters = self._users(user)
        return {"user": user, "weight_version": adapters.version(user), "adapter": adapters.store.exists(user),
                "sessions": [{"session_id": session_id, "turns": [export_turn(t) for t in turns]}
                             for session_id, turns in self.store.sessions(user)]}

    def delete_user(self, user: str) -> dict[str, Any]:
        """Remove ``user``'s sessions, turns (with their scores and hints), samples waiting,
        adapter and optimizer state. Turns a request of theirs still in flight records
        afterwards start a new record."""
        adapters = self._users(user)
        learner = self.learner  # with adapters=per_user a UserLearner, or None when learn=false
        with learner.lock if isinstance(learner, UserLearner) else contextlib.nullcontext():
            # the learner neither takes nor trains this user's samples meanwhile
            if isinstance(learner, UserLearner):
                learner.forget(user)
            removed_sessions, removed_turns = self.store.delete_user(user)
            adapter = adapters.delete(user)
        with self._users_lock:
            self._known_users.discard(user)
        return {"user": user, "deleted": True, "sessions": removed_sessions, "turns": removed_turns,
                "adapter": adapter}

    def decode(self, token_ids: list[int]) -> str:
        return self.policy.tokenizer.decode(token_ids, skip_special_tokens=True)

    def health(self) -> dict[str, Any]:
        return {"model": self.config.served_model_name, "weight_version": self.policy.weight_version,
                "learning": self.learner is not None, "idle": self.learner is None or self.learner.idle,
                "samples_waiting": 0 if self.learner is None else self.learner.samples_waiting(),
                "uptime_s": round(time.time() - self.started, 1)}

    def metrics_text(self) -> str:
        values, latencies = self.counters.snapshot()
        counts = self.store.counts()
        lines = []

        def metric(name: str, kind: str, value: float, help_text: str, labels: str = "") -> None:
            lines.append(f"# HELP clawgym_{name} {help_text}")
            lines.append(f"# TYPE clawgym_{name} {kind}")
            lines.append(f"clawgym_{name}{labels} {value:g}")

        metric("requests_total", "counter", values.get("requests_total", 0), "Chat completions served.")
        metric("requests_abandoned_total", "counter", values.get("requests_abandoned_total", 0),
               "Chat completions whose client left before the reply (generation stopped, turn not trained).")
        metric("turns_served_total", "counter", counts["turns"], "Turns in the record (all runs of this dir).")
        metric("turns_main_total", "counter", counts["main_turns"], "Main (trainable) turns in the record.")
        metric("turns_abandoned_total", "counter", counts["abandoned"],
               "Turns in the record no client received (never trained on).")
        metric("turns_scored_total", "counter", counts["scored"], "Turns the judge has scored.")
        metric("turns_trained_total", "counter", counts["trained"], "Turns that went into an update.")
        metric("sessions_open", "gauge", counts["sessions_open"], "Sessions not yet closed.")
        metric("rejections_total", "counter", counts["rejections"], "Requests refused with a 4xx (all runs of this dir).")
        metric("weight_version", "gauge", self.policy.weight_version, "Weight version new requests use.")
        metric("completion_tokens_total", "counter", values.get("completion_tokens_total", 0), "Tokens generated.")
        metric("generate_batches_total", "counter", self.generator.batches, "Generation batches run.")
        metric("generate_rows_total", "counter", self.generator.rows, "Requests generated in those batches.")
        metric("generate_rows_running", "gauge", self.generator.running, "Requests being generated now.")
        if self.learner is not None:
            stats = self.learner.stats
            metric("train_steps_total", "counter", self.learner.version, "Optimizer steps (weight versions) so far.")
            metric("train_staleness", "gauge", stats.last_staleness,
                   "Mean versions the last update's samples lagged the trainer.")
            metric("learner_errors_total", "counter", stats.errors, "Learner iterations that failed.")
            metric("train_samples_waiting", "gauge", self.learner.samples_waiting(),
                   "Scored samples waiting for the next update.")
        if self.adapters is not None and self.adapters.engine is not None:
            engine = self.adapters.engine
            metric("adapters_resident", "gauge", len(engine.loaded()), "Users' adapters loaded on the engine now.")
            metric("adapter_loads_total", "counter", engine.stats.loads,
                   "Users' adapters loaded into the engine (first use, after an update, after an eviction).")
            metric("adapter_evictions_total", "counter", engine.stats.evictions,
                   "Idle users' adapters unloaded from the engine for another (least recently used).")
        elif self.adapters is not None:
            users = self.adapters.store
            metric("adapters_resident", "gauge", len(users.resident()), "Users' adapters held in memory now.")
            metric("adapter_loads_total", "counter", users.stats.loads, "Users' adapters read from disk (cold loads).")
            metric("adapter_evictions_total", "counter", users.stats.evictions,
                   "Users' adapters dropped from memory for another (least recently used).")
        if latencies:
            ordered = sorted(latencies)
            lines.append("# HELP clawgym_request_seconds Request latency (recent requests).")
            lines.append("# TYPE clawgym_request_seconds summary")
            for q in (0.5, 0.95, 0.99):
                lines.append(f'clawgym_request_seconds{{quantile="{q}"}} '
                             f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.6f}")
            lines.append(f"clawgym_request_seconds_count {len(ordered)}")
        return "\n".join(lines) + "\n"

    # ---- sessions -----------------------------------------------------------------------------
    def _sweep_idle(self) -> None:
        period = min(30.0, self.config.session_idle_s / 4)
        while not self._stop.wait(period):
            for session_id in self.store.idle_sessions(time.time() - self.config.session_idle_s):
                self.store.close_session(session_id, "idle")
                if self.learner is not None:
                    self.learner.notify()
