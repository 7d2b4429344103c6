"""How late retried messages come back, per broker, queue type and client mode.

A retried message may never come back before its tier's delay (the broker tests assert that); how
much later it comes back depends on the broker and on the machine's load, so it is measured here and
printed, not asserted. For each broker × queue type × mode this deploys a retryable queue in a
throw-away vhost (as tests/broker do, through tests/support), lets rabbitmq_retry_client fail every message
a planned number of times, and reports the lateness (wait minus the tier's delay) of each step:

- reject mode: tiers 300 ms, 1 s; every message fails twice, so it waits twice in tier 1;
- republish mode: tiers 200, 300, 500 ms; every message fails four times: 200, 300, 500, 500 ms;
- native (strategy native, quorum on RabbitMQ 4.3.1 or later only): min 200 ms, max 500 ms; every message
  fails four times: 200, 400, 500, 500 ms in the input queue itself.

Run it with the brokers up (`scripts/brokers.sh ensure`; RABBITMQ_BROKERS as for the tests):
    .venv/bin/python -m bench.retry_timing [--messages 30] [--queue-types classic quorum]
        [--modes reject republish native]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from bench import strategies
from rabbitmq_retry_client import MODES, Mode, RetryingConsumer
from tests.support.admin import version
from tests.support.amqp import parameters
from tests.support.deploy import Deployer, configured_brokers, throwaway_vhost, unreachable
from tests.support.mirror import Broker
from tests.support.retrying import Recorder, publish_ids, retryable_queue, run_consumers

QUEUE_TYPES = ("classic", "quorum")
SCENARIOS: dict[str, tuple[list[int], int]] = {"reject": ([300, 1000], 2), "republish": ([200, 300, 500], 4),
                                               "native": ([200, 500], 4)}
"""Per mode: the tiers' delays (ms; native: min and max) and how often each message fails (= max_retries: none
is parked)."""
NATIVE = "native"
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Step:
    """The lateness of one retry step over every message: wait minus the tier's delay, in ms."""

    broker: str
    queue_type: str
    mode: str
    attempt: int
    """The delivery that ended the wait (2 = the first retry)."""
    tier: str
    delay_ms: int
    lateness_ms: tuple[float, ...]

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile (defined for a single value too)."""
        ordered = sorted(self.lateness_ms)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _queue(mode: str, queue_type: str) -> dict[str, Any]:
    delays, failures = SCENARIOS[mode]
    if mode == NATIVE:
        return {"name": "timed", "type": queue_type, "bindings": [{"exchange": "in"}],
                "retry": {"strategy": NATIVE, "min_delay": f"{delays[0]}ms", "max_delay": f"{delays[1]}ms",
                          "max_retries": failures}}
    return retryable_queue("timed", queue_type, [f"{d}ms" for d in delays], failures)


def measure(broker: Broker, queue_type: str, mode: str, messages: int) -> list[Step]:
    """Deploy one retryable queue in a throw-away vhost, run the scenario of `mode`, return its steps."""
    delays, failures = SCENARIOS[mode]
    with throwaway_vhost(broker) as vhost:
        deployment = Deployer(broker, vhost)({
            "exchanges": [{"name": "in", "type": "fanout"}], "queues": [_queue(mode, queue_type)]})
        contract = deployment.contracts["timed"]
        ids = [f"b{i:04d}" for i in range(messages)]
        recorder = Recorder(lambda _: failures)
        consumer = RetryingConsumer(parameters(broker, vhost), contract, recorder,
                                    "reject" if mode == NATIVE else cast(Mode, mode))
        publish_ids(broker, vhost, "in", ids)
        run_consumers([consumer], lambda: consumer.processed >= messages, timeout=TIMEOUT_S)
    if sorted(recorder.succeeded) != ids or consumer.parked:
        raise RuntimeError(f"{broker.name} {queue_type} {mode}: {len(recorder.succeeded)} of {messages} "
                           f"processed, {consumer.parked} parked within {TIMEOUT_S}s")
    steps = []
    if mode == NATIVE:
        for n in range(1, failures + 1):
            delay = min(delays[0] * n, delays[1])
            lateness = tuple(recorder.gaps_ms(i)[n - 1] - delay for i in ids)
            steps.append(Step(broker.name, queue_type, mode, n + 1, "timed", delay, lateness))
        return steps
    tiers = contract["tiers"]
    for n in range(1, failures + 1):
        tier = tiers[0] if mode == "reject" else tiers[min(n, len(tiers)) - 1]
        lateness = tuple(recorder.gaps_ms(i)[n - 1] - tier["delay_ms"] for i in ids)
        steps.append(Step(broker.name, queue_type, mode, n + 1, tier["queue"], tier["delay_ms"], lateness))
    return steps


def render(steps: Sequence[Step]) -> str:
    header = (f"{'broker':<7} {'queue':<8} {'mode':<10} {'attempt':>7} {'tier':<13} {'delay':>6} {'n':>4} "
              f"{'min':>6} {'p50':>6} {'p99':>6} {'max':>6}")
    lines = [header, "-" * len(header)]
    for s in steps:
        lines.append(f"{s.broker:<7} {s.queue_type:<8} {s.mode:<10} {s.attempt:>7} {s.tier:<13} {s.delay_ms:>6} "
                     f"{len(s.lateness_ms):>4} {min(s.lateness_ms):>6.1f} {s.percentile(50):>6.1f} "
                     f"{s.percentile(99):>6.1f} {max(s.lateness_ms):>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retry_timing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=30, help="messages per run, all in flight (default 30)")
    parser.add_argument("--queue-types", nargs="+", choices=QUEUE_TYPES, default=list(QUEUE_TYPES))
    parser.add_argument("--modes", nargs="+", choices=(*MODES, NATIVE), default=[*MODES, NATIVE])
    parser.add_argument("--brokers", nargs="+", help="names from RABBITMQ_BROKERS (default: all)")
    args = parser.parse_args(argv)

    brokers = [b for b in configured_brokers() if not args.brokers or b.name in args.brokers]
    print(f"lateness = wait - tier delay, ms; {args.messages} messages per run; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs", flush=True)
    steps: list[Step] = []
    for broker in brokers:
        if problem := unreachable(broker):
            print(f"skipped: {problem}", file=sys.stderr)
            continue
        for queue_type in args.queue_types:
            for mode in args.modes:
                if mode == NATIVE and strategies.NATIVE.unsupported(version(broker), queue_type):
                    continue
                steps += measure(broker, queue_type, mode, args.messages)
    print(render(steps))
    return 0 if steps else 1


if __name__ == "__main__":
    sys.exit(main())
