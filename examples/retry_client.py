"""A consumer that retries through a rabbitmq-retry topology, and a publisher: a small library and a CLI.

Everything the client needs (queue, exchanges, tiers, max retries, attempt header) comes from the retry
contract the stack exports (`pulumi stack output retry_contracts --json`), so no name is hard-coded here.

Modes of `RetryingConsumer`:
- "reject": a failed message is rejected (requeue=False); the broker dead-letters it to tier 1 and counts
  the attempts in `x-death`. Fixed delay (tier 1's), no publish by the client.
- "republish": a failed message is copied to the tier of its attempt (stepped back-off) with the attempt
  in the contract's own header, because RabbitMQ 3.13+/4.x ignores an `x-death` set by a client.
Out of retries, both modes park the message on the error exchange with headers saying why.
Every publish waits for the broker's confirm before the original is settled: at-least-once.

CLI (dev stack: `make up`, then):
    pulumi stack output retry_contracts --json > contracts.json
    python -m examples.retry_client consume --contract contracts.json --queue orders.billing --mode republish
    python -m examples.retry_client publish --exchange orders --routing-key order.created --count 10
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.connection import Parameters
from pika.spec import Basic, BasicProperties

LOG = logging.getLogger("retry_client")

Contract = dict[str, Any]
Handler = Callable[[bytes, BasicProperties], None]
Mode = Literal["reject", "republish"]
ConnectionParams = Parameters | str
"""pika parameters, or an AMQP URL."""

MODES: tuple[Mode, ...] = ("reject", "republish")
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
MAX_REASON_BYTES = 1024

# Parking headers: none starts with "x-" (that prefix belongs to the broker).
ERROR_REASON = "error-reason"
ERROR_QUEUE = "error-queue"
ORIGINAL_EXCHANGE = "original-exchange"
ORIGINAL_ROUTING_KEY = "original-routing-key"
ATTEMPTS = "attempts"
FIRST_FAILURE_AT = "first-failure-at"

_CONTRACT_KEYS: dict[str, type | tuple[type, ...]] = {
    "vhost": str, "queue": str, "queue_type": str, "retry_exchange": str, "reject_routes_to": str,
    "tiers": list, "max_retries": int, "attempt_header": str, "error_exchange": str, "error_queue": str,
}
_DEATH_PREFIXES = ("x-first-death-", "x-last-death-")
_DELIVERY_COUNTERS = ("x-delivery-count", "x-acquired-count")
"""Set by quorum queues on 4.x per delivery: they describe the original's deliveries, not the copy's."""


# --- contract ----------------------------------------------------------------------------------------

def _is_contract(value: object) -> bool:
    return isinstance(value, Mapping) and "queue" in value and "retry_exchange" in value


def _contracts_in(data: object) -> Iterator[Mapping[str, Any]]:
    """A single contract, or every contract nested in `retry_contracts` ({vhost: {queue: contract}})."""
    if _is_contract(data):
        yield data  # type: ignore[misc]
    elif isinstance(data, Mapping):
        for value in data.values():
            yield from _contracts_in(value)


def _whole_numbers(value: Any) -> Any:
    """Pulumi carries numbers as floats (200.0); the contract's numbers are whole."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _validate(source: Mapping[str, Any]) -> Contract:
    contract: Contract = _whole_numbers(source)
    problems = [f"{key}: missing or not {getattr(kind, '__name__', kind)}"
                for key, kind in _CONTRACT_KEYS.items()
                if not isinstance(contract.get(key), kind) or isinstance(contract.get(key), bool)]
    tiers = contract.get("tiers") or []
    if not tiers:
        problems.append("tiers: empty")
    for i, tier in enumerate(tiers):
        if not (isinstance(tier, Mapping) and isinstance(tier.get("routing_key"), str)
                and isinstance(tier.get("delay_ms"), int)):
            problems.append(f"tiers[{i}]: needs routing_key (string) and delay_ms (integer)")
    if problems:
        raise ValueError(f"invalid retry contract for {contract.get('queue')!r}: " + "; ".join(problems))
    return json.loads(json.dumps(contract))  # plain and independent of the caller's dict


def load_contract(source: str | Path | Mapping[str, Any], queue: str | None = None,
                  vhost: str | None = None) -> Contract:
    """Read one queue's contract from a dict or a JSON file.

    Accepts a single contract or the whole stack output (`{vhost: {queue: contract}}`); `queue` and
    `vhost` pick one when there are several, and an ambiguous choice fails instead of guessing.
    """
    data = source if isinstance(source, Mapping) else json.loads(Path(source).read_text())
    found = [c for c in _contracts_in(data)
             if (queue is None or c.get("queue") == queue) and (vhost is None or c.get("vhost") == vhost)]
    if len(found) != 1:
        names = sorted(f"{c.get('vhost')}/{c.get('queue')}" for c in _contracts_in(data))
        what = "no contract matches" if not found else "several contracts match"
        raise ValueError(f"{what} queue={queue!r} vhost={vhost!r}; available: {', '.join(names) or 'none'}")
    return _validate(found[0])


# --- headers -----------------------------------------------------------------------------------------

def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: object) -> int:
    """A counter from a header; a malformed one counts as 0 rather than crashing the consumer."""
    try:
        return int(_text(value)) if value is not None else 0
    except ValueError:
        return 0


def utc_iso(moment: datetime | None = None) -> str:
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def deaths(headers: Mapping[str, Any] | None, queue: str, reason: str = "rejected") -> list[Mapping[str, Any]]:
    """The `x-death` entries the broker wrote for `queue` and `reason`."""
    entries = (headers or {}).get("x-death") or []
    return [e for e in entries if isinstance(e, Mapping)
            and _text(e.get("queue")) == queue and _text(e.get("reason")) == reason]


def rejected_attempts(headers: Mapping[str, Any] | None, queue: str) -> int:
    """How often `queue`'s consumers rejected this message so far (broker-written, reject mode only)."""
    return sum(_int(e.get("count")) for e in deaths(headers, queue))


def without_broker_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Headers minus the broker's dead-letter history and delivery counters: a copy is a new message
    (and 3.13+/4.x ignores a client-set `x-death` anyway)."""
    return {k: v for k, v in (headers or {}).items()
            if k != "x-death" and not k.startswith(_DEATH_PREFIXES) and k not in _DELIVERY_COUNTERS}


def truncate(text: str, limit: int = MAX_REASON_BYTES) -> str:
    """At most `limit` UTF-8 bytes, cut on a character boundary: headers count against frame size."""
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit - 3].decode("utf-8", "ignore") + "..."


def copy_properties(properties: BasicProperties, headers: dict[str, Any]) -> BasicProperties:
    """The original's properties for a republished copy, persistent.

    Dropped: `expiration` (a per-message TTL in a wait queue blocks the messages behind it and would
    shorten the tier; in the error queue it would discard the parked message) and `user_id` (the broker
    refuses a user_id other than the publishing connection's user).
    """
    return BasicProperties(
        content_type=properties.content_type, content_encoding=properties.content_encoding,
        headers=headers, delivery_mode=2, priority=properties.priority,
        correlation_id=properties.correlation_id, reply_to=properties.reply_to,
        message_id=properties.message_id, timestamp=properties.timestamp, type=properties.type,
        app_id=properties.app_id,
    )


def _parameters(params: ConnectionParams, vhost: str | None = None) -> Parameters:
    result = pika.URLParameters(params) if isinstance(params, str) else copy.copy(params)
    if vhost is not None:
        result.virtual_host = vhost
    return result


# --- publisher ---------------------------------------------------------------------------------------

class Publisher:
    """One connection with a confirm-mode channel: `publish` returns only once the broker owns the message,
    and raises `UnroutableError` / `NackError` when it does not."""

    def __init__(self, connection_params: ConnectionParams) -> None:
        self._connection = BlockingConnection(_parameters(connection_params))
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()

    def publish(self, exchange: str, routing_key: str, body: bytes | str, message_id: str | None = None,
                headers: Mapping[str, Any] | None = None, content_type: str | None = None) -> None:
        properties = BasicProperties(delivery_mode=2, message_id=message_id or uuid.uuid4().hex,
                                     headers=dict(headers or {}), content_type=content_type,
                                     timestamp=int(time.time()))
        self._channel.basic_publish(exchange, routing_key, body.encode() if isinstance(body, str) else body,
                                    properties, mandatory=True)

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def publish(connection_params: ConnectionParams, exchange: str, routing_key: str, body: bytes | str,
            message_id: str, headers: Mapping[str, Any] | None = None) -> None:
    """Publish one persistent message, mandatory, and wait for the broker's confirm."""
    with Publisher(connection_params) as publisher:
        publisher.publish(exchange, routing_key, body, message_id, headers)


# --- consumer ----------------------------------------------------------------------------------------

class RetryingConsumer:
    """Consume the contract's queue, call `handler(body, properties)`, and retry or park what it raises on.

    Counters: `processed` (handler succeeded, acked), `retried` (sent to a wait tier), `parked` (sent to the
    error exchange), `requeued` (a retry or parking publish failed: the original was nacked back to the
    queue), `reconnects`. The connection's vhost is the contract's.
    """

    def __init__(self, connection_params: ConnectionParams, contract: Mapping[str, Any], handler: Handler,
                 mode: Mode = "reject", prefetch: int = 10, *, reconnect: bool = True,
                 reconnect_timeout: float = 60.0, publish_failure_pause: float = 1.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.contract = _validate(contract)
        self.queue: str = self.contract["queue"]
        self.handler = handler
        self.mode: Mode = mode
        self.prefetch = prefetch
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.publish_failure_pause = publish_failure_pause
        self.processed = self.retried = self.parked = self.requeued = 0
        self.reconnects = 0
        """Connections lost and re-opened by `run` (a broker restart shows here)."""
        self._params = _parameters(connection_params, self.contract["vhost"])
        self._connection: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._confirm_channel: BlockingChannel | None = None

    # connection ---------------------------------------------------------------------------------------

    def _connect(self) -> BlockingChannel:
        if self._connection is None or not self._connection.is_open:
            self._connection = BlockingConnection(self._params)
            self._channel = self._confirm_channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
            self._channel.basic_qos(prefetch_count=self.prefetch)
        return self._channel

    def _connect_with_retry(self) -> BlockingChannel:
        """Wait for the broker (a restart takes seconds); give up after `reconnect_timeout`."""
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            try:
                return self._connect()
            except pika.exceptions.AMQPConnectionError as error:
                if not self.reconnect or time.monotonic() >= deadline:
                    raise
                LOG.warning("broker unavailable (%s); retrying", error or type(error).__name__)
                self._drop()
                time.sleep(1.0)

    def _drop(self) -> None:
        """Forget a broken connection. Unsettled deliveries go back to the queue when it closes."""
        connection, self._connection, self._channel, self._confirm_channel = self._connection, None, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()

    def _confirming(self) -> BlockingChannel:
        """A second channel for retries and parking, in confirm mode: a broker that refuses a copy (or a
        404 on a missing exchange) closes only this channel, never the consumer's."""
        assert self._connection is not None
        if self._confirm_channel is None or not self._confirm_channel.is_open:
            self._confirm_channel = self._connection.channel()
            self._confirm_channel.confirm_delivery()
        return self._confirm_channel

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> RetryingConsumer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    # loop ---------------------------------------------------------------------------------------------

    def run(self, max_messages: int | None = None, idle_timeout: float | None = None,
            until: Callable[[], bool] | None = None) -> int:
        """Handle deliveries until `max_messages` were handled, nothing arrived for `idle_timeout` seconds,
        or `until()` is true; returns how many were handled. Reconnects after a broker restart."""
        handled = 0
        poll = 0.2 if idle_timeout is None else max(0.01, min(0.2, idle_timeout))
        last_activity = time.monotonic()

        def done() -> bool:
            return (max_messages is not None and handled >= max_messages) or (until is not None and until())

        try:
            while not done():
                try:
                    channel = self._connect_with_retry()
                    for method, properties, body in channel.consume(self.queue, inactivity_timeout=poll):
                        if method is not None:
                            self._handle(channel, method, properties, body)
                            handled += 1
                            last_activity = time.monotonic()
                        if done():
                            return handled
                        if idle_timeout is not None and time.monotonic() - last_activity >= idle_timeout:
                            return handled
                    # The generator ends when the broker cancels the consumer (queue deleted, leader moved).
                    LOG.warning("consumer on %s cancelled by the broker; consuming again", self.queue)
                    time.sleep(0.5)
                except (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelWrongStateError) as error:
                    connection_lost = self._connection is None or not self._connection.is_open
                    if not self.reconnect or not connection_lost:
                        raise
                    LOG.warning("connection lost (%s); reconnecting", error or type(error).__name__)
                    self._drop()
                    self.reconnects += 1
                    last_activity = time.monotonic()
            return handled
        finally:
            self._stop_consuming()

    def _stop_consuming(self) -> None:
        """Cancel the consumer; prefetched, unhandled messages go back to the queue (not lost)."""
        if self._channel is not None and self._channel.is_open:
            try:
                self._channel.cancel()
            except pika.exceptions.AMQPError:
                self._drop()

    # one delivery -------------------------------------------------------------------------------------

    def _handle(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                body: bytes) -> None:
        limit = self.contract.get("delivery_limit")
        deliveries = _int((properties.headers or {}).get("x-delivery-count"))
        if limit and deliveries >= limit:
            # Park before the broker's delivery-limit fires: its dead-letter would jam in a cycle
            # (README: Delivery limit). This catches a message that keeps crashing consumers.
            self._park(channel, method, properties, body, f"x-delivery-count {deliveries} reached the "
                       f"delivery limit {limit}", attempts=deliveries, exchange=method.exchange,
                       routing_key=method.routing_key, first_failure_at=utc_iso())
            return
        try:
            self.handler(body, properties)
        except Exception as error:  # any failure of the handler is a failed attempt
            reason = truncate(f"{type(error).__name__}: {error}")
            if self.mode == "reject":
                self._fail_reject(channel, method, properties, body, reason)
            else:
                self._fail_republish(channel, method, properties, body, reason)
        else:
            channel.basic_ack(method.delivery_tag)
            self.processed += 1

    def _fail_reject(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                     body: bytes, reason: str) -> None:
        headers = properties.headers or {}
        so_far = rejected_attempts(headers, self.queue)
        if so_far < self.contract["max_retries"]:
            # The queue's dead-letter arguments send it to tier 1; the broker records the attempt in x-death.
            channel.basic_reject(method.delivery_tag, requeue=False)
            self.retried += 1
            LOG.info("reject %s: attempt %d failed, broker retries after %d ms (%s)", properties.message_id,
                     so_far + 1, self.contract["tiers"][0]["delay_ms"], reason[:200])
            return
        entry = (deaths(headers, self.queue) or [{}])[0]
        routing_keys = entry.get("routing-keys") or [method.routing_key]
        first = entry.get("time")
        self._park(channel, method, properties, body, reason, attempts=so_far + 1,
                   exchange=_text(entry.get("exchange", method.exchange)), routing_key=_text(routing_keys[0]),
                   first_failure_at=utc_iso(first) if isinstance(first, datetime) else utc_iso())

    def _fail_republish(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                        body: bytes, reason: str) -> None:
        headers = properties.headers or {}
        attempt_header = self.contract["attempt_header"]
        attempt = _int(headers.get(attempt_header)) + 1
        # The first failure records where the message came from: later deliveries come from Q.requeue.
        fresh = attempt == 1 or FIRST_FAILURE_AT not in headers
        origin = {
            ORIGINAL_EXCHANGE: method.exchange if fresh else _text(headers.get(ORIGINAL_EXCHANGE, method.exchange)),
            ORIGINAL_ROUTING_KEY: (method.routing_key if fresh
                                   else _text(headers.get(ORIGINAL_ROUTING_KEY, method.routing_key))),
            FIRST_FAILURE_AT: utc_iso() if fresh else _text(headers[FIRST_FAILURE_AT]),
        }
        if attempt > self.contract["max_retries"]:
            self._park(channel, method, properties, body, reason, attempts=attempt,
                       exchange=origin[ORIGINAL_EXCHANGE], routing_key=origin[ORIGINAL_ROUTING_KEY],
                       first_failure_at=origin[FIRST_FAILURE_AT])
            return
        tiers = self.contract["tiers"]
        tier = tiers[min(attempt, len(tiers)) - 1]
        copy_headers = {**without_broker_headers(headers), **origin, attempt_header: attempt}
        if self._publish_then_ack(channel, method, self.contract["retry_exchange"], tier["routing_key"],
                                  body, copy_properties(properties, copy_headers)):
            self.retried += 1
            LOG.info("retry %s: attempt %d/%d failed, next in %d ms via %s (%s)", properties.message_id,
                     attempt, self.contract["max_retries"], tier["delay_ms"], tier["routing_key"], reason[:200])

    def _park(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes,
              reason: str, *, attempts: int, exchange: str, routing_key: str, first_failure_at: str) -> None:
        # The attempt counter is left out so that a parked message replayed to its exchange gets a full budget.
        headers = without_broker_headers(properties.headers)
        headers.pop(self.contract["attempt_header"], None)
        headers.update({
            ERROR_REASON: reason, ERROR_QUEUE: self.queue, ORIGINAL_EXCHANGE: exchange,
            ORIGINAL_ROUTING_KEY: routing_key, ATTEMPTS: attempts, FIRST_FAILURE_AT: first_failure_at,
        })
        if self._publish_then_ack(channel, method, self.contract["error_exchange"], routing_key, body,
                                  copy_properties(properties, headers)):
            self.parked += 1
            LOG.info("park %s after %d attempts in %s (%s)", properties.message_id, attempts,
                     self.contract["error_queue"], reason[:200])

    def _publish_then_ack(self, channel: BlockingChannel, method: Basic.Deliver, exchange: str,
                          routing_key: str, body: bytes, properties: BasicProperties) -> bool:
        """Ack the original only once the copy is confirmed: a crash in between duplicates, never loses."""
        try:
            self._confirming().basic_publish(exchange, routing_key, body, properties, mandatory=True)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError,
                pika.exceptions.ChannelClosedByBroker) as error:
            channel.basic_nack(method.delivery_tag, requeue=True)
            self.requeued += 1
            LOG.error("could not publish %s to %r (%s: %s); original requeued", properties.message_id, exchange,
                      type(error).__name__, error)
            if self.publish_failure_pause > 0 and self._connection is not None:
                self._connection.sleep(self.publish_failure_pause)  # no hot loop on a broken topology
            return False
        channel.basic_ack(method.delivery_tag)
        return True


# --- CLI ---------------------------------------------------------------------------------------------

def _flaky_handler(fail_rate: float, seed: int | None) -> Handler:
    rng = random.Random(seed)

    def handle(body: bytes, properties: BasicProperties) -> None:
        print(f"  got {properties.message_id} {body[:80]!r} headers={properties.headers or {}}", flush=True)
        if rng.random() < fail_rate:
            raise RuntimeError(f"simulated failure (fail rate {fail_rate})")

    return handle


def _consume(args: argparse.Namespace) -> int:
    contract = load_contract(args.contract, args.queue, args.vhost)
    tiers = ", ".join(f"{t['routing_key']}={t['delay_ms']}ms" for t in contract["tiers"])
    print(f"consuming {contract['vhost']}/{contract['queue']} in {args.mode} mode; tiers {tiers}; "
          f"max_retries {contract['max_retries']}; parking in {contract['error_queue']}", flush=True)
    consumer = RetryingConsumer(args.url, contract, _flaky_handler(args.fail_rate, args.seed), args.mode,
                                args.prefetch)
    try:
        consumer.run(max_messages=args.max_messages, idle_timeout=args.idle_timeout)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        print(f"processed {consumer.processed}, retried {consumer.retried}, parked {consumer.parked}, "
              f"requeued {consumer.requeued}", flush=True)
    return 0


def _publish(args: argparse.Namespace) -> int:
    with Publisher(_parameters(args.url, args.vhost)) as publisher:
        for n in range(1, args.count + 1):
            message_id = uuid.uuid4().hex
            body = json.dumps({"n": n, "published_at": utc_iso()})
            publisher.publish(args.exchange, args.routing_key, body, message_id, content_type="application/json")
            print(f"published {message_id} {body}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.retry_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("RABBITMQ_URL", DEFAULT_URL),
                        help="AMQP URL (default $RABBITMQ_URL or %(default)s); the vhost comes from the contract")
    commands = parser.add_subparsers(dest="command", required=True)

    consume = commands.add_parser("consume", help="consume a retryable queue with a flaky handler")
    consume.add_argument("--contract", required=True, type=Path,
                         help="JSON of `pulumi stack output retry_contracts --json`, or one contract")
    consume.add_argument("--queue", help="which queue, when the file holds several contracts")
    consume.add_argument("--vhost", help="which vhost, when the queue name is in several")
    consume.add_argument("--mode", choices=MODES, default="reject")
    consume.add_argument("--fail-rate", type=float, default=0.3, help="probability that one attempt fails")
    consume.add_argument("--seed", type=int, help="seed of the simulated failures")
    consume.add_argument("--prefetch", type=int, default=10)
    consume.add_argument("--max-messages", type=int, help="stop after this many deliveries")
    consume.add_argument("--idle-timeout", type=float, help="stop after this many idle seconds")
    consume.set_defaults(run=_consume)

    publish_cmd = commands.add_parser("publish", help="publish test messages (persistent, confirmed, mandatory)")
    publish_cmd.add_argument("--exchange", required=True)
    publish_cmd.add_argument("--routing-key", default="")
    publish_cmd.add_argument("--count", type=int, default=1)
    publish_cmd.add_argument("--vhost", default="shop", help="vhost of the exchange (default: the dev stack's)")
    publish_cmd.set_defaults(run=_publish)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)
    try:
        return int(args.run(args))
    except (ValueError, OSError, pika.exceptions.AMQPError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
