"""Continuous request batching for a local policy: concurrent requests share decode steps.

On CPU a decode step of a small model costs about the same for 1 row as for 16 (it is
overhead-bound), so a server that generated request by request would serve 16 clients
16 times slower than one that batches them. One worker thread takes the oldest waiting
request, gathers every other waiting request with the same sampling settings (up to
``max_batch``, waiting at most ``wait_s`` for company), and generates them in one call.
Requests are answered through :class:`concurrent.futures.Future`.

A request whose client has left is ``cancel``-ed: if its batch has not started it never
runs, else its row stops at the next decode step while its batch-mates go on (a batch
whose rows have all stopped ends). Either way its future resolves, with what had been
generated and ``finish_reason`` ``cancelled``, so the caller can still record it.

With per-user adapters a request names its ``user`` and the generator is given ``mixed``,
which decodes a batch whose rows carry different users' adapters (trainers/live/users.py
on agents/multi_lora.py): users do not split batches, only sampling settings do.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Protocol

from agents.decode import RowStop, TokenCallback
from agents.policy import Completion, SamplingParams, TransformersPolicy


class MixedGenerate(Protocol):
    """Generates ``prompt_ids`` in one batch, row ``i`` with ``users[i]``'s adapter, as
    :meth:`TransformersPolicy.generate_ids` does with the one adapter."""

    def __call__(self, prompt_ids: list[list[int]], users: list[str | None], sampling: SamplingParams,
                 on_token: TokenCallback | None, stop: RowStop | None) -> list[Completion]: ...


@dataclass
class _Job:
    prompt_ids: list[int]
    sampling: SamplingParams
    on_token: Callable[[int], None] | None
    user: str | None = None
    future: Future[Completion] = field(default_factory=Future)
    cancelled: bool = False
    started: bool = False


class BatchingGenerator:
    """``submit(prompt_ids, sampling)`` from any thread; generation happens in one worker."""

    def __init__(self, policy: TransformersPolicy, max_batch: int = 16, wait_s: float = 0.01,
                 mixed: MixedGenerate | None = None) -> None:
        self.policy = policy
        self.mixed = mixed
        self.max_batch = max_batch
        self.wait_s = wait_s
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._held: list[_Job] = []  # taken from the queue but incompatible with the last batch
        self._jobs: dict[Future[Completion], _Job] = {}  # unresolved jobs, for cancel()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.batches = 0
        self.rows = 0
        self.running = 0
        """Rows in the batch being generated now."""
        self._worker = threading.Thread(target=self._run, name="batching-generator", daemon=True)
        self._worker.start()

    def submit(self, prompt_ids: list[int], sampling: SamplingParams,
               on_token: Callable[[int], None] | None = None, user: str | None = None) -> Future[Completion]:
        """``user``: whose adapter generates it (only with ``mixed``)."""
        if self._stopped.is_set():
            raise RuntimeError("the generator is stopped")
        job = _Job(prompt_ids, sampling, on_token, user)
        with self._lock:
            self._jobs[job.future] = job
        job.future.add_done_callback(self._forget)
        self._queue.put(job)
        return job.future

    def cancel(self, future: Future[Completion]) -> None:
        """Stop the generation behind ``future`` (its client left): one not started yet is
        resolved at once with an empty completion, a running row stops at the next decode
        step. The future resolves with ``finish_reason == "cancelled"`` either way (or as it
        would have, had it already ended)."""
        with self._lock:
            job = self._jobs.get(future)
            if job is None or job.cancelled:
                return
            job.cancelled = True
            if job.started:
                return
        job.future.set_result(self._unstarted(job))

    def _forget(self, future: Future[Completion]) -> None:
        with self._lock:
            self._jobs.pop(future, None)

    def _unstarted(self, job: _Job) -> Completion:
        temperature = job.sampling.temperature if job.sampling.temperature > 0 else 1.0
        return Completion({"role": "assistant", "content": ""}, "", list(job.prompt_ids), [], [],
                          self.policy.weight_version, "cancelled", temperature)

    def close(self) -> None:
        self._stopped.set()
        self._queue.put(None)
        self._worker.join(timeout=60)

    # ---- worker ------------------------------------------------------------------------
    def _next(self, timeout: float | None) -> _Job | None:
        if self._held:
            return self._held.pop(0)
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _gather(self, first: _Job) -> list[_Job]:
        batch = [first]
        deadline = time.monotonic() + self.wait_s
        skipped: list[_Job] = []
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                job = self._queue.get_nowait() if remaining <= 0 else self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if job is None:
                self._stopped.set()
                break
            (batch if job.sampling == first.sampling else skipped).append(job)
        self._held.extend(skipped)
        return batch

    def _run(self) -> None:
        while not (self._stopped.is_set() and not self._held):
            first = self._next(timeout=0.5)
            if first is None:
                if self._stopped.is_set():
                    break
                continue
            batch = self._start(self._gather(first))
            if not batch:
                continue

            def on_token(row: int, token: int, batch: list[_Job] = batch) -> None:
                job = batch[row]
                if job.on_token is None or job.cancelled:
                    return
                try:
                    job.on_token(token)
                except Exception:  # a consumer that cannot take tokens is gone: stop its row only
                    job.cancelled = True

            self.running = len(batch)
            streamed = on_token if any(job.on_token for job in batch) else None
            try:
                if self.mixed is not None:
                    completions = self.mixed([job.prompt_ids for job in batch], [job.user for job in batch],
                                             batch[0].sampling, streamed, lambda row, batch=batch: batch[row].cancelled)
                else:
                    completions = self.policy.generate_ids(
                        [job.prompt_ids for job in batch], batch[0].sampling, on_token=streamed,
                        stop=lambda row, batch=batch: batch[row].cancelled)
            except BaseException as exc:  # a failed batch fails its requests, never the worker
                for job in batch:
                    job.future.set_exception(exc)
                continue
            finally:
                self.running = 0
            self.batches += 1
            self.rows += len(batch)
            for job, completion in zip(batch, completions):
                job.future.set_result(completion)
        for job in self._held:
            job.future.cancel()

    def _start(self, batch: list[_Job]) -> list[_Job]:
        """The jobs of ``batch`` still wanted, now marked started (cancel() stops those by row)."""
        with self._lock:
            # a job cancel() saw unstarted is resolved there; one cancelled through its Future never runs
            started = [job for job in batch if not job.cancelled and job.future.set_running_or_notify_cancel()]
            for job in started:
                job.started = True
        return started
