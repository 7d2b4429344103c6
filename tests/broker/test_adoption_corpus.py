"""Adopting retry topologies that real applications declare (`make adopt`, issue 32), on real 3.10 and 4.3 brokers.

Each shape below is re-declared with pika the way its framework declares it at runtime (names, exchange types,
queue arguments, bindings), read from the public source it is named by; the framework's own code is not copied,
only what it declares. Each is adopted exactly as docs/operations.md says, with messages ready in the work queues,
waiting in every TTL queue and parked in the dead-letter queues:
`make adopt` (tools.lib.adopt), `pulumi up` in the engine's order with the program's hooks (`apply_update` with
`ProgramHooks`), then for a recognised loop its migration: `make migrate-retire` (unbind), drained, step retire,
`make migrate-retire` (delete). What must hold for every shape:
- nothing is lost: every message is where it was, or in its successor;
- no wait ends early: a message waiting in a TTL queue leaves it only by expiring (its `x-death` says `expired`),
  and one waiting in a long TTL queue is still there after adoption;
- nothing is dropped: every queue the stack declares is imported with exactly the arguments the broker holds, or
  is a recognised loop's successor;
- the retry loop works before, during and after the migration: a message that fails after adoption comes back to
  the queue its consumers read, through the loop's own wait;
- the producers' own publishes still route after retire (published mandatory, with confirms).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from components.config.load import load_stack_config, load_vhost
from components.pulumi.stack_resources import plan_stack
from rabbitmq_retry_client.depth import BrokerAccess
from tests.support.adoption import summary
from tests.support.amqp import channel, message_counts, next_message
from tests.support.hooks import ProgramHooks
from tests.support.mirror import Broker, apply_update, call, esc, read_back
from tests.support.stack import Stack, record_stack, stack_vhost
from tools.lib.adopt import IMPORT, adopt, shovel_port
from tools.lib.drift import Finding, drifted, findings
from tools.lib.evaluation import infos
from tools.lib.migrate_retire import Broker as RetireBroker
from tools.lib.migrate_retire import Found, retire
from tools.lib.snapshot import Snapshot, read_live

LONG_MS = 600_000
"""A wait that outlasts the test: its messages must still be waiting after adoption."""
SHORT_MS = 2_000
"""A wait the test sees end: its messages must come back, by expiry, to the queue the consumers read."""
ARRIVAL_S = 25.0
"""Generous bound for a message to arrive (an eventual condition, not a figure)."""
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@dataclass(frozen=True)
class Seed:
    """Messages put in before adoption: published to `exchange` with `key`, landing in `queue`."""

    exchange: str
    key: str
    queue: str
    count: int = 1
    waits_ms: int | None = None
    """The queue's TTL when the messages wait there (a retry in progress)."""
    back_to: str = ""
    """The queue a waiting message comes back to, when not the shape's `work_queue` (another loop's)."""


@dataclass(frozen=True)
class Shape:
    name: str
    source: str
    """The public code it is re-declared from."""
    declare: Callable[[BlockingChannel], None]
    seeds: tuple[Seed, ...]
    work_queue: str
    """The queue its consumers read (before adoption)."""
    producer: tuple[str, str]
    """(exchange, routing key) the producers publish to: it must route to the consumers' queue after retire."""
    fail: Callable[[BlockingChannel, Any, pika.BasicProperties, bytes], None]
    """What the consumer does with a message that fails, as the framework does it (reject, or republish + ack)."""
    recognised: str | None = None
    """The kind `make adopt` recognises (taken over beside by a strategy of ours), or None: kept as it is."""
    parks_in: str | None = None
    """Where `fail` puts a message for good when the framework's retries are not the broker's (in memory): the
    failed message must land there; None: it must come back to the consumers' queue by expiring from a wait."""
    more_loops: tuple[tuple[str, tuple[str, str]], ...] = ()
    """Other workers' loops of the shape, each (work queue, producer's exchange and key), exercised like the first."""

    def loops(self) -> list[tuple[str, tuple[str, str]]]:
        return [(self.work_queue, self.producer), *self.more_loops]


def _reject(ch: BlockingChannel, method: Any, properties: pika.BasicProperties, body: bytes) -> None:
    ch.basic_reject(method.delivery_tag, requeue=False)


def _republish(exchange: str, key: str) -> Callable[[BlockingChannel, Any, pika.BasicProperties, bytes], None]:
    def fail(ch: BlockingChannel, method: Any, properties: pika.BasicProperties, body: bytes) -> None:
        ch.basic_publish(exchange, key, body, PERSISTENT, mandatory=True)
        ch.basic_ack(method.delivery_tag)
    return fail


# --- The shapes -----------------------------------------------------------------------------------------------------

def declare_spring_amqp_ttl_tiers(ch: BlockingChannel) -> None:
    """Spring AMQP `Declarables` of a Spring Boot service (`QueueBuilder.durable(..).ttl(..).deadLetterExchange(..)`):
    a topic work exchange, a DLX and DLQ without retry, and a topic retry exchange feeding three TTL queues that
    dead-letter back to the work exchange; the listener republishes a failed message to the retry exchange."""
    ch.exchange_declare("orders", "topic", durable=True)
    ch.exchange_declare("orders.dlx", "direct", durable=True)
    ch.exchange_declare("orders.retry", "topic", durable=True)
    ch.queue_declare("orders.created", durable=True, arguments={"x-dead-letter-exchange": "orders.dlx",
                                                                "x-dead-letter-routing-key": "orders.created"})
    ch.queue_bind("orders.created", "orders", "order.created")
    ch.queue_declare("orders.created.dlq", durable=True)
    ch.queue_bind("orders.created.dlq", "orders.dlx", "orders.created")
    for tier, ttl in (("10s", SHORT_MS), ("1m", LONG_MS), ("10m", LONG_MS)):
        ch.queue_declare(f"orders.retry.{tier}", durable=True, arguments={
            "x-message-ttl": ttl, "x-dead-letter-exchange": "orders", "x-dead-letter-routing-key": "order.created"})
        ch.queue_bind(f"orders.retry.{tier}", "orders.retry", f"retry.{tier}")


def declare_spring_cloud_stream_dlq(ch: BlockingChannel) -> None:
    """Spring Cloud Stream's Rabbit binder (RabbitExchangeQueueProvisioner, `autoBindDlq: true`): destination
    `invoices` (topic), group queue `invoices.billing` dead-lettering to the shared `DLX` with its own name as key,
    and `invoices.billing.dlq` bound there. Retries happen in the binder's memory; the DLQ parks."""
    ch.exchange_declare("invoices", "topic", durable=True)
    ch.exchange_declare("DLX", "direct", durable=True)
    ch.queue_declare("invoices.billing", durable=True, arguments={
        "x-dead-letter-exchange": "DLX", "x-dead-letter-routing-key": "invoices.billing"})
    ch.queue_bind("invoices.billing", "invoices", "#")
    ch.queue_declare("invoices.billing.dlq", durable=True)
    ch.queue_bind("invoices.billing.dlq", "DLX", "invoices.billing")


def declare_spring_cloud_stream_dlq_ttl(ch: BlockingChannel) -> None:
    """The binder's documented delayed retry through the DLQ (`autoBindDlq`, `dlqTtl`, `dlqDeadLetterExchange: ''`):
    the DLQ holds a rejected message for `dlqTtl`, then dead-letters it through the default exchange, by its routing
    key (the group queue's name), back to the group queue."""
    ch.exchange_declare("payments", "topic", durable=True)
    ch.exchange_declare("DLX", "direct", durable=True)
    ch.queue_declare("payments.ledger", durable=True, arguments={
        "x-dead-letter-exchange": "DLX", "x-dead-letter-routing-key": "payments.ledger"})
    ch.queue_bind("payments.ledger", "payments", "#")
    ch.queue_declare("payments.ledger.dlq", durable=True, arguments={
        "x-message-ttl": SHORT_MS, "x-dead-letter-exchange": ""})
    ch.queue_bind("payments.ledger.dlq", "DLX", "payments.ledger")


def declare_taskbunny(ch: BlockingChannel) -> None:
    """TaskBunny (shinyscorpion/task_bunny, lib/task_bunny/queue.ex `declare_with_retry`): `Q` dead-letters through
    the default exchange to `Q.retry` (TTL), which dead-letters back to `Q` the same way; `Q.rejected` is plain.
    Jobs are published to the default exchange with the queue's name as key."""
    ch.queue_declare("jobs.email", durable=True, arguments={"x-dead-letter-exchange": "",
                                                            "x-dead-letter-routing-key": "jobs.email.retry"})
    ch.queue_declare("jobs.email.retry", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.email", "x-message-ttl": SHORT_MS})
    ch.queue_declare("jobs.email.rejected", durable=True)


def declare_pika_quorum_worker(ch: BlockingChannel) -> None:
    """A Python pika worker on quorum lanes: direct exchanges `…commands/results/retry/dlx.v1`; the work queue
    dead-letters at-least-once (with `reject-publish`, which at-least-once needs) to a DLQ; the retry queue (TTL),
    fed by the worker's republish, dead-letters back to the commands exchange the same way."""
    quorum = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    for name in ("render.commands.v1", "render.results.v1", "render.retry.v1", "render.dlx.v1"):
        ch.exchange_declare(name, "direct", durable=True)
    ch.queue_declare("render.commands.v1", durable=True, arguments={**quorum, "x-dead-letter-exchange":
                                                                    "render.dlx.v1"})
    ch.queue_bind("render.commands.v1", "render.commands.v1", "render")
    ch.queue_declare("render.results.v1", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("render.results.v1", "render.results.v1", "render")
    ch.queue_declare("render.dlq.v1", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("render.dlq.v1", "render.dlx.v1", "render")
    ch.queue_declare("render.retry.v1", durable=True, arguments={
        **quorum, "x-message-ttl": SHORT_MS, "x-dead-letter-exchange": "render.commands.v1"})
    ch.queue_bind("render.retry.v1", "render.retry.v1", "render")


def declare_sneakers(ch: BlockingChannel) -> None:
    """Sneakers' maxretry handler (jondot/sneakers, lib/sneakers/handlers/maxretry.rb): exchanges `Q-retry`,
    `Q-retry-requeue`, `Q-error`; `Q-retry` holds a rejected message for its TTL and dead-letters it to the requeue
    exchange `Q` is bound to; `Q-error` parks."""
    for name in ("mailer-retry", "mailer-error", "mailer-retry-requeue", "events"):
        ch.exchange_declare(name, "topic", durable=True)
    ch.queue_declare("mailer-retry", durable=True, arguments={"x-dead-letter-exchange": "mailer-retry-requeue",
                                                              "x-message-ttl": SHORT_MS})
    ch.queue_bind("mailer-retry", "mailer-retry", "#")
    ch.queue_declare("mailer-error", durable=True)
    ch.queue_bind("mailer-error", "mailer-error", "#")
    ch.queue_declare("mailer", durable=True, arguments={"x-dead-letter-exchange": "mailer-retry"})
    ch.queue_bind("mailer", "mailer-retry-requeue", "#")
    ch.queue_bind("mailer", "events", "mail.#")


def declare_masstransit(ch: BlockingChannel) -> None:
    """MassTransit's RabbitMQ topology (receive endpoint `submit-order`): a fanout exchange per endpoint bound to its
    queue, the message type's exchange `Contracts:SubmitOrder` bound to it (exchange to exchange), and the
    `submit-order_error` / `submit-order_skipped` exchanges and queues where faults and unknown messages go. Its
    retries are in memory (UseMessageRetry)."""
    for name in ("submit-order", "Contracts:SubmitOrder", "submit-order_error", "submit-order_skipped"):
        ch.exchange_declare(name, "fanout", durable=True)
    ch.exchange_bind("submit-order", "Contracts:SubmitOrder")
    for queue in ("submit-order", "submit-order_error", "submit-order_skipped"):
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, queue)


def declare_nservicebus(ch: BlockingChannel) -> None:
    """NServiceBus' RabbitMQ transport (Particular/NServiceBus.RabbitMQ, DelayedDelivery/DelayInfrastructure.cs): 28
    quorum delay levels `nsb.v2.delay-level-NN` (TTL 2^NN s, at-least-once, dead-lettering to the next lower level's
    exchange, level 00 to `nsb.v2.delay-delivery`), topic exchanges bound level to level on the delay's bits, and the
    endpoint `Sales` (conventional routing: a fanout exchange of its name) bound to the delivery exchange on
    `#.Sales`; `error` and `audit` queues. A delayed retry publishes to the highest set bit's level."""
    key = "1.#"
    for level in range(27, -1, -1):
        name = f"nsb.v2.delay-level-{level:02d}"
        ch.exchange_declare(name, "topic", durable=True)
        ch.queue_declare(name, durable=True, arguments={
            "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
            "x-message-ttl": (2 ** level) * 1000,
            "x-dead-letter-exchange": f"nsb.v2.delay-level-{level - 1:02d}" if level else "nsb.v2.delay-delivery"})
        ch.queue_bind(name, name, key)
        key = "*." + key
    key = "0.#"
    for level in range(27, 0, -1):
        ch.exchange_bind(f"nsb.v2.delay-level-{level - 1:02d}", f"nsb.v2.delay-level-{level:02d}", key)
        key = "*." + key
    ch.exchange_declare("nsb.v2.delay-delivery", "topic", durable=True)
    ch.exchange_bind("nsb.v2.delay-delivery", "nsb.v2.delay-level-00", key)
    ch.exchange_declare("Sales", "fanout", durable=True)
    for queue in ("Sales", "error", "audit"):
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("Sales", "Sales")
    ch.queue_bind("Sales", "nsb.v2.delay-delivery", "#.Sales")


def nsb_delay_key(seconds: int, address: str) -> str:
    """The delay's 28 bits, highest first, then the address (DelayInfrastructure.CalculateRoutingKey)."""
    return ".".join("1" if seconds >> level & 1 else "0" for level in range(27, -1, -1)) + "." + address


def declare_celery(ch: BlockingChannel) -> None:
    """Celery/kombu's defaults: a direct exchange `celery` and the queue `celery` bound with key `celery`
    (`task_default_queue`), plus a dead-letter setup as Celery's docs give it for `task_reject_on_worker_lost`:
    the queue dead-letters to `celery.dlx`, which routes to `celery.dlq`. Retries (`self.retry(countdown=…)`) wait in
    the worker's memory, unacknowledged."""
    ch.exchange_declare("celery", "direct", durable=True)
    ch.exchange_declare("celery.dlx", "direct", durable=True)
    ch.queue_declare("celery", durable=True, arguments={"x-dead-letter-exchange": "celery.dlx",
                                                        "x-dead-letter-routing-key": "celery"})
    ch.queue_bind("celery", "celery", "celery")
    ch.queue_declare("celery.dlq", durable=True)
    ch.queue_bind("celery.dlq", "celery.dlx", "celery")


def declare_symfony_messenger(ch: BlockingChannel) -> None:
    """Symfony Messenger's AMQP transport (symfony/symfony, Messenger/Bridge/Amqp/Transport/Connection.php): fanout
    exchange `messages` and queue `messages`; a retry waits in a per-delay queue `delay_messages__<ms>_retry` bound to
    the direct `delays` exchange, with TTL, `x-expires` (delay + 10 s) and dead-lettering through the default exchange
    with the queue's name as key."""
    ch.exchange_declare("messages", "fanout", durable=True)
    ch.queue_declare("messages", durable=True)
    ch.queue_bind("messages", "messages")
    ch.exchange_declare("delays", "direct", durable=True)
    delay = f"delay_messages__{LONG_MS}_retry"
    ch.queue_declare(delay, durable=True, arguments={"x-message-ttl": LONG_MS, "x-expires": LONG_MS + 10_000,
                                                     "x-dead-letter-exchange": "", "x-dead-letter-routing-key":
                                                     "messages"})
    ch.queue_bind(delay, "delays", delay)


def declare_sneakers_handlers_delayed_retry(ch: BlockingChannel) -> None:
    """alphasights/sneakers_handlers' DelayedRetryHandler (lib/sneakers_handlers/delayed_retry_handler.rb), two
    workers of one application on the topic exchange `domain_events`: each worker's queue dead-letters to the one
    shared topic exchange `domain_events.retry`; its retry queue `Q.retry`, bound there with the worker's own routing
    key, holds a rejected message for the worker's delay and dead-letters it back to `domain_events` (the message
    keeps its key); `Q.error`, on `domain_events.error`, parks. The management API lists the digest's retry binding
    before the mailer's."""
    for name in ("domain_events", "domain_events.retry", "domain_events.error"):
        ch.exchange_declare(name, "topic", durable=True)
    for worker, key, delay in (("my-app.mailer", "mailer.send", SHORT_MS),
                               ("my-app.mailer-digest", "mailer.digest", SHORT_MS + 1_000)):
        ch.queue_declare(worker, durable=True, arguments={"x-dead-letter-exchange": "domain_events.retry"})
        ch.queue_bind(worker, "domain_events", key)
        ch.queue_declare(f"{worker}.retry", durable=True, arguments={
            "x-dead-letter-exchange": "domain_events", "x-message-ttl": delay})
        ch.queue_bind(f"{worker}.retry", "domain_events.retry", key)
        ch.queue_declare(f"{worker}.error", durable=True)
        ch.queue_bind(f"{worker}.error", "domain_events.error", key)


def _laravel_delay_queue(ch: BlockingChannel, ms: int) -> str:
    """The delay queue a released job waits in, declared at use: TTL `ms`, deleted when unused for `2 × ms`,
    dead-lettering through the default exchange to `default` (getDelayQueueArguments)."""
    name = f"default.delay.{ms}"
    ch.queue_declare(name, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key":
                                                    "default", "x-message-ttl": ms, "x-expires": 2 * ms})
    return name


def declare_laravel_queue(ch: BlockingChannel) -> None:
    """vyuldashev/laravel-queue-rabbitmq (src/Queue/RabbitMQQueue.php, `later`) with its default config: queue
    `default`, published to through the default exchange; a job released with a delay waits in `default.delay.<ms>`
    (self-deleting), which the worker declares then and there."""
    ch.queue_declare("default", durable=True)
    _laravel_delay_queue(ch, LONG_MS)


def _laravel_release(ch: BlockingChannel, method: Any, properties: pika.BasicProperties, body: bytes) -> None:
    """A failed job released for a short delay: its delay queue declared, the job published there, then acked."""
    _republish("", _laravel_delay_queue(ch, SHORT_MS))(ch, method, properties, body)


def _symfony_retry(ch: BlockingChannel, method: Any, properties: pika.BasicProperties, body: bytes) -> None:
    """Symfony declares a delay queue for the delay it needs (here a short one), then publishes there."""
    delay = f"delay_messages__{SHORT_MS}_retry"
    ch.queue_declare(delay, durable=True, arguments={"x-message-ttl": SHORT_MS, "x-expires": SHORT_MS + 10_000,
                                                     "x-dead-letter-exchange": "", "x-dead-letter-routing-key":
                                                     "messages"})
    ch.queue_bind(delay, "delays", delay)
    _republish("delays", delay)(ch, method, properties, body)


SHAPES = [
    Shape("spring-amqp-ttl-tiers", "Spring AMQP Declarables of a Spring Boot service (QueueBuilder ttl + DLX)",
          declare_spring_amqp_ttl_tiers,
          (Seed("orders", "order.created", "orders.created", 3),
           Seed("orders.retry", "retry.10s", "orders.retry.10s", 1, SHORT_MS),
           Seed("orders.retry", "retry.1m", "orders.retry.1m", 2, LONG_MS),
           Seed("orders.retry", "retry.10m", "orders.retry.10m", 1, LONG_MS),
           Seed("orders.dlx", "orders.created", "orders.created.dlq", 2)),
          "orders.created", ("orders", "order.created"), _republish("orders.retry", "retry.10s")),
    Shape("spring-cloud-stream-dlq", "spring-cloud-stream-binder-rabbit RabbitExchangeQueueProvisioner (autoBindDlq)",
          declare_spring_cloud_stream_dlq,
          (Seed("invoices", "invoice.created", "invoices.billing", 3), Seed("DLX", "invoices.billing",
                                                                            "invoices.billing.dlq", 2)),
          "invoices.billing", ("invoices", "invoice.paid"), _reject, recognised="spring-cloud-stream",
          parks_in="invoices.billing.dlq"),
    Shape("spring-cloud-stream-dlq-ttl",
          "spring-cloud-stream-binder-rabbit (autoBindDlq, dlqTtl, dlqDeadLetterExchange)",
          declare_spring_cloud_stream_dlq_ttl,
          (Seed("payments", "payment.taken", "payments.ledger", 2),
           Seed("DLX", "payments.ledger", "payments.ledger.dlq", 1, SHORT_MS)),
          "payments.ledger", ("payments", "payment.taken"), _reject),
    Shape("taskbunny", "shinyscorpion/task_bunny lib/task_bunny/queue.ex (declare_with_retry)", declare_taskbunny,
          (Seed("", "jobs.email", "jobs.email", 3), Seed("", "jobs.email.retry", "jobs.email.retry", 2, SHORT_MS),
           Seed("", "jobs.email.rejected", "jobs.email.rejected", 1)),
          "jobs.email", ("", "jobs.email"), _reject),
    Shape("pika-quorum-worker", "a Python pika worker on quorum lanes (at-least-once DLX, republish to retry)",
          declare_pika_quorum_worker,
          (Seed("render.commands.v1", "render", "render.commands.v1", 3),
           Seed("render.retry.v1", "render", "render.retry.v1", 2, SHORT_MS),
           Seed("render.dlx.v1", "render", "render.dlq.v1", 1),
           Seed("render.results.v1", "render", "render.results.v1", 1)),
          "render.commands.v1", ("render.commands.v1", "render"), _republish("render.retry.v1", "render")),
    Shape("sneakers-maxretry", "jondot/sneakers lib/sneakers/handlers/maxretry.rb", declare_sneakers,
          (Seed("events", "mail.welcome", "mailer", 3), Seed("mailer-retry", "mail.retry", "mailer-retry", 2, SHORT_MS),
           Seed("mailer-error", "mail.failed", "mailer-error", 2)),
          "mailer", ("events", "mail.after"), _reject, recognised="sneakers"),
    Shape("masstransit", "MassTransit RabbitMQ transport topology (_error and _skipped queues)", declare_masstransit,
          (Seed("Contracts:SubmitOrder", "", "submit-order", 3),
           Seed("submit-order_error", "", "submit-order_error", 2),
           Seed("submit-order_skipped", "", "submit-order_skipped", 1)),
          "submit-order", ("Contracts:SubmitOrder", ""), _republish("submit-order_error", ""),
          parks_in="submit-order_error"),
    Shape("nservicebus-delay-levels", "Particular/NServiceBus.RabbitMQ DelayedDelivery/DelayInfrastructure.cs",
          declare_nservicebus,
          (Seed("Sales", "", "Sales", 3), Seed("nsb.v2.delay-level-00", nsb_delay_key(1, "Sales"),
                                               "nsb.v2.delay-level-00", 1, 1000),
           Seed("nsb.v2.delay-level-09", nsb_delay_key(600, "Sales"), "nsb.v2.delay-level-09", 2, 512_000),
           Seed("", "error", "error", 1)),
          "Sales", ("Sales", ""), _republish("nsb.v2.delay-level-01", nsb_delay_key(2, "Sales"))),
    Shape("celery-kombu", "celery/kombu defaults (queue `celery` on direct exchange `celery`) with a DLX",
          declare_celery,
          (Seed("celery", "celery", "celery", 3), Seed("celery.dlx", "celery", "celery.dlq", 1)),
          "celery", ("celery", "celery"), _reject, parks_in="celery.dlq"),
    Shape("sneakers-handlers-shared-retry-exchange",
          "alphasights/sneakers_handlers lib/sneakers_handlers/delayed_retry_handler.rb (two workers)",
          declare_sneakers_handlers_delayed_retry,
          (Seed("domain_events", "mailer.send", "my-app.mailer", 3),
           Seed("domain_events", "mailer.digest", "my-app.mailer-digest", 2),
           Seed("domain_events.retry", "mailer.send", "my-app.mailer.retry", 1, SHORT_MS),
           Seed("domain_events.retry", "mailer.digest", "my-app.mailer-digest.retry", 2, SHORT_MS + 1_000,
                back_to="my-app.mailer-digest"),
           Seed("domain_events.error", "mailer.digest", "my-app.mailer-digest.error", 1)),
          "my-app.mailer", ("domain_events", "mailer.send"), _reject, recognised="dlx-ttl-loop",
          more_loops=(("my-app.mailer-digest", ("domain_events", "mailer.digest")),)),
    Shape("laravel-queue-rabbitmq", "vyuldashev/laravel-queue-rabbitmq src/Queue/RabbitMQQueue.php (later)",
          declare_laravel_queue,
          (Seed("", "default", "default", 3), Seed("", f"default.delay.{LONG_MS}", f"default.delay.{LONG_MS}", 1,
                                                   LONG_MS)),
          "default", ("", "default"), _laravel_release),
    Shape("symfony-messenger", "symfony/symfony Messenger/Bridge/Amqp/Transport/Connection.php",
          declare_symfony_messenger,
          (Seed("messages", "", "messages", 3), Seed("delays", f"delay_messages__{LONG_MS}_retry",
                                                     f"delay_messages__{LONG_MS}_retry", 1, LONG_MS)),
          "messages", ("messages", ""), _symfony_retry),
]


# --- The run ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def runtime_vhost(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throw-away vhost created as an operator would, before any stack exists; the stack's shovel user renamed."""
    with stack_vhost(broker, monkeypatch, "corpus") as name:
        call(broker, "PUT", f"vhosts/{esc(name)}", {})
        call(broker, "PUT", f"permissions/{esc(name)}/{esc(broker.username)}",
             {"configure": ".*", "write": ".*", "read": ".*"})
        yield name


def _snapshot(broker: Broker, vhost: str) -> Snapshot:
    return read_live(broker.client(), vhost)


def _until(condition: Callable[[], bool], timeout: float = ARRIVAL_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _seed(broker: Broker, vhost: str, shape: Shape) -> None:
    with channel(broker, vhost) as ch:
        for seed in shape.seeds:
            for n in range(seed.count):
                ch.basic_publish(seed.exchange, seed.key, f"{seed.queue}-{n}".encode(), PERSISTENT, mandatory=True)


def _expired_from(properties: pika.BasicProperties) -> set[str]:
    return {str(d["queue"]) for d in (properties.headers or {}).get("x-death", []) if d["reason"] == "expired"}


def _step(config: dict[str, Any], step: str) -> dict[str, Any]:
    return {**config, "migrations": [{**m, "step": step} for m in config.get("migrations", [])]}


def _retire(broker: Broker, vhost: str, config: dict[str, Any]) -> list[str]:
    """`make migrate-retire … APPLY=1` for every migration of the stack, run again after a refusal (as the docs say:
    an old queue a wait just expired into still shows publishes for a few seconds) until nothing is refused; the
    lines of the last run."""
    model = load_vhost(config, "vhosts[0]")
    access = BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port)
    lines: list[str] = []

    def run() -> bool:
        lines.clear()
        return all([retire(Found(vhost, m), _snapshot(broker, vhost), RetireBroker(access, vhost), True,
                           lines.append) for m in model.migrations])

    assert _until(run, 2 * ARRIVAL_S), lines
    return lines


def _exercise(broker: Broker, vhost: str, shape: Shape, queue: str, tag: bytes) -> str | None:
    """A message the producers publish reaches `queue` and fails once, handled as the framework handles a failure:
    it comes back to `queue` by expiring from a wait (never sooner), and is then acknowledged; or, where the
    framework's retries are in memory, it lands in `shape.parks_in`, which is returned. Messages ahead of it stay
    where they are (taken unacknowledged, given back at the end)."""
    with channel(broker, vhost) as ch:
        ch.basic_publish(shape.producer[0], shape.producer[1], tag, PERSISTENT, mandatory=True)

        def take(source: str = queue) -> Any:
            while (got := next_message(ch, source, ARRIVAL_S)) is not None and got[2] != tag:
                pass  # held unacknowledged until the channel closes, then back in the queue
            return got

        first = take()
        assert first is not None, f"{tag!r} never reached {queue}"
        shape.fail(ch, *first)
        if shape.parks_in is not None:
            assert take(shape.parks_in) is not None, f"{tag!r} never reached {shape.parks_in}"
            return shape.parks_in
        again = take()
        assert again is not None, f"{tag!r} never came back to {queue}"
        assert _expired_from(again[1]), f"{tag!r} came back to {queue} without waiting"
        ch.basic_ack(again[0].delivery_tag)
        return None


def _total(broker: Broker, vhost: str) -> dict[str, int]:
    """Ready messages of every queue of the vhost (no consumer is left, so none is unacknowledged)."""
    names = sorted(_snapshot(broker, vhost).queues)
    return {q: n for q, n in message_counts(broker, vhost, names).items() if n}


def _drift(broker: Broker, vhost: str, stack: Stack) -> list[Finding]:
    """`make drift` of the stack: what it counts (exit 2 on any), its migrations' old objects expected until retire."""
    migrations = infos(plan_stack(load_stack_config({"vhosts": [stack.config]})))
    return drifted(findings(stack.resources, {vhost: _snapshot(broker, vhost)}, broker.username, migrations))


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_real_retry_topology_is_adopted_with_nothing_lost_and_no_wait_ended_early(
        broker: Broker, runtime_vhost: str, shape: Shape) -> None:
    vhost = runtime_vhost
    with channel(broker, vhost) as ch:
        shape.declare(ch)
    _seed(broker, vhost, shape)
    seeded: dict[str, int] = {}
    for seed in shape.seeds:
        seeded[seed.queue] = seeded.get(seed.queue, 0) + seed.count
    waits = {s.queue: s.waits_ms for s in shape.seeds if s.waits_ms is not None}
    long_waits = {q: seeded[q] for q, ms in waits.items() if ms is not None and ms > 60_000}
    short_waits = [q for q in waits if q not in long_waits]
    returns = {s.queue: s.back_to or shape.work_queue for s in shape.seeds if s.queue in short_waits}
    expected_total = sum(seeded.values())

    # Every loop works before adoption.
    for work_queue, producer in shape.loops():
        expected_total += _exercise(broker, vhost, replace(shape, producer=producer), work_queue,
                                    b"before") is not None

    before = _snapshot(broker, vhost)
    adoption = adopt(before)
    assert [t.kind for t in adoption.topologies] == [shape.recognised] * len(shape.loops()) \
        if shape.recognised else adoption.topologies == []
    # Nothing dropped: each queue the stack declares under an existing name holds the broker's arguments exactly,
    # and is imported (never created over, never moved).
    entries = {q["name"]: q for q in adoption.vhost["queues"]}
    for name, entry in entries.items():
        if "arguments" in entry:
            assert entry["arguments"] == before.queues[name]["arguments"], name
    imported = {n for t, n in summary(adoption.decisions).get(IMPORT, []) if t == "Queue"}
    assert imported == {n for n in entries if n in before.queues}

    # The first `pulumi up`, in the engine's order, with the program's hooks.
    hooks = ProgramHooks(broker)
    moving = record_stack(broker, vhost, adoption.vhost)
    apply_update(broker, [], moving.resources, hooks.before_delete, hooks.before_update)
    assert read_back(broker, moving.resources) == [], "the next `pulumi up` would change something"
    # No wait ended early: what waits long is still waiting.
    assert message_counts(broker, vhost, list(long_waits)) == long_waits
    # Drift settles: what adopt left alone on purpose is expected, the old objects are still draining.
    assert _drift(broker, vhost, moving) == []

    successor = {q: adoption.beside.get(q, q) for q, _ in shape.loops()} | {
        q: adoption.beside.get(q, q) for q in returns.values()}
    final = moving
    ours = replace(shape, fail=_reject, parks_in=None)
    if shape.recognised:
        # The shovels connect to the broker's own AMQP port, which adopt writes from its listeners (5673 on 4.3).
        assert shovel_port(before) == broker.amqp_port
        assert {m["move"]["from"]: m["move"]["to"] for m in adoption.vhost["migrations"]} == {
            q: successor[q] for q, _ in shape.loops()}
        _retire(broker, vhost, adoption.vhost)  # step move: unbind the old queue where its successor is bound
        # During the migration each successor follows our retry contract: a failure waits in its first tier.
        for work_queue, producer in shape.loops():
            _exercise(broker, vhost, replace(ours, producer=producer), successor[work_queue], b"during")
        old = [q for t in adoption.topologies for q in t.queues]  # what the migrations drain and retire
        assert _until(lambda: set(message_counts(broker, vhost, old).values()) == {0}), "the old queues never drained"
        retiring = {k: v for k, v in _step(adoption.vhost, "retire").items() if k != "import"}
        final = record_stack(broker, vhost, retiring)
        apply_update(broker, moving.resources, final.resources, hooks.before_delete, hooks.before_update)
        lines = _retire(broker, vhost, retiring)
        assert not set(old) & set(_snapshot(broker, vhost).queues)
        if shape.more_loops:  # the first loop's retire kept the retry exchange the second's route still used
            assert any("refused: still on the retry route of another loop" in line
                       and f"`{shape.more_loops[0][0]}`" in line for line in lines), lines
    else:
        assert "migrations" not in adoption.vhost and adoption.beside == {}

    # The short waits ended by expiring, through their own loop, into the queue its consumers read.
    assert _until(lambda: all(n == 0 for q, n in message_counts(broker, vhost, [
        q for q in short_waits if q in _snapshot(broker, vhost).queues]).items()))
    with channel(broker, vhost) as ch:
        came_back = dict.fromkeys(returns, 0)
        for consumers in sorted(set(successor.values())):
            while (got := ch.basic_get(consumers))[0] is not None:
                for wait in _expired_from(got[1]) & set(short_waits):
                    came_back[wait] += successor[returns[wait]] == consumers
    assert came_back == {q: seeded[q] for q in short_waits}, "a waiting retry never came back, or came back early"
    # Nothing lost.
    assert sum(_total(broker, vhost).values()) == expected_total, _total(broker, vhost)

    # Every loop works after adoption (and after retire for a recognised one); the producers' publishes still route.
    for work_queue, producer in shape.loops():
        parked = _exercise(broker, vhost, replace(ours if shape.recognised else shape, producer=producer),
                           successor[work_queue], b"after")
        expected_total += parked is not None
    assert sum(_total(broker, vhost).values()) == expected_total
    # Drift: nothing the stack declares is missing or different, and nothing counts as drift.
    assert _drift(broker, vhost, final) == []
