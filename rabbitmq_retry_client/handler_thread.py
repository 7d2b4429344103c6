"""The thread that runs a consumer's handler, one delivery at a time, for as long as the consumer lives.

Starting a thread per delivery cost more than a fast handler. Deliveries go in and outcomes (None or the handler's
exception) come back through two `queue.SimpleQueue`s, whose waits are C-level: with an Event per delivery a
sampling profiler found a sizeable share of the client's time in its waits, and the queues made plain consume
faster (bench/README.md). bench/floor.py times this same hand-off beside a bare pika loop.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from pika.spec import BasicProperties

from .metrics import NO_METRICS, Metrics

Handler = Callable[[bytes, BasicProperties], None]
"""`handler(body, properties)`: returns on success; raises on failure (PermanentError: park at once)."""


class NotRunError(Exception):
    """Its handler was never started: the consumer was stopping (`stop()`) when its turn came. The delivery goes
    back to the queue, unhandled, as a prefetched one does."""


class DeadlineExceededError(Exception):
    """The handler was still running at `handler_timeout`: the attempt counts as a transient failure."""


class HandlerThread:
    """Runs `handler` for each delivery submitted, in order; `retire()` lets it finish its current handler and
    exit. Each call's duration goes to `metrics.handled` for `queue`."""

    def __init__(self, handler: Handler, stopping: threading.Event | None = None, metrics: Metrics = NO_METRICS,
                 queue_name: str = "") -> None:
        self._handler = handler
        self._metrics, self._queue_name = metrics, queue_name
        self._stopping = stopping
        self._jobs: queue.SimpleQueue[tuple[bytes, BasicProperties] | None] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="rabbitmq-retry-handler", daemon=True).start()

    def submit(self, body: bytes, properties: BasicProperties) -> None:
        self._jobs.put((body, properties))

    def outcome(self, timeout: float) -> tuple[bool, BaseException | None]:
        """(finished, the handler's exception or None) of the delivery submitted last; (False, None) while it
        still runs after `timeout` seconds."""
        try:
            return True, self._outcomes.get(timeout=timeout)
        except queue.Empty:
            return False, None

    def retire(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            outcome: BaseException | None = None
            if self._stopping is not None and self._stopping.is_set():
                # The consumer is stopping: a delivery given ahead with others is not started (`NotRunError`).
                self._outcomes.put(NotRunError("the consumer was stopping"))
                continue
            started = time.perf_counter()
            try:
                self._handler(*job)
            except BaseException as error:  # any failure of the handler is a failed attempt
                # Even SystemExit or KeyboardInterrupt raised in this thread: acking it would drop a message whose
                # handler never finished, and letting it end the thread would leave the consumer waiting forever.
                outcome = error
            if self._metrics is not NO_METRICS:
                self._metrics.handled(self._queue_name, time.perf_counter() - started, outcome is not None)
            self._outcomes.put(outcome)


