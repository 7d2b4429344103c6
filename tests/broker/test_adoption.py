"""Adopting a vhost whose topology applications declared at runtime (`make adopt`), and detecting drift
(`make drift`), on real 3.10 and 4.3 brokers.

The runtime side is declared with pika exactly as the applications do: Sneakers' maxretry handler and the
DLX + TTL loop of a consumer that declares its own topology, with messages waiting in the work, retry and
error queues. The adopted stack is then applied the provider's way (`tests/support/mirror.py`): imported
objects are read and compared, never written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from components import Vhost
from components.config.load import load_vhost
from components.model import naming
from components.plan.planner import plan_vhost
from components.pulumi.resources import ShovelAccess
from rabbitmq_retry_client.depth import BrokerAccess
from tests.support.admin import version
from tests.support.adoption import summary
from tests.support.amqp import channel, message_counts, next_message
from tests.support.mirror import Broker, ImportRefusedError, MirrorError, apply, call, esc, read_back
from tools.lib import engine
from tools.lib.adopt import BESIDE, IMPORT, RETIRE, adopt, record_vhost
from tools.lib.drift import findings
from tools.lib.evaluation import infos
from tools.lib.migrate_retire import Broker as RetireBroker
from tools.lib.migrate_retire import Found, retire
from tools.lib.mockrun import record
from tools.lib.snapshot import Snapshot, read_live

SNEAKERS_TTL_MS = 600_000
"""Long enough that the messages waiting in `mailer-retry` stay there for the whole test."""
LOOP_TTL_MS = 1_000
"""The DLX + TTL loop's wait: the adopted queue's retry delay, exercised after adoption."""
ARRIVAL_S = 15.0
"""Generous bound for a message to show up (an eventual condition, not a figure)."""

WAITING = {"mailer": 3, "mailer-retry": 2, "mailer-error": 2, "service_a_input_q": 3, "audit": 2, "legacy": 1}
"""Messages put in each runtime queue before adoption."""


@pytest.fixture
def runtime_vhost(broker: Broker, vhost: str) -> str:
    """The throw-away vhost, created as an operator would, before any stack exists."""
    call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
    call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(broker.username)}",
         {"configure": ".*", "write": ".*", "read": ".*"})
    return vhost


@contextmanager
def _application(broker: Broker, vhost: str) -> Iterator[BlockingChannel]:
    with pika.BlockingConnection(pika.ConnectionParameters(
            broker.host, broker.amqp_port, vhost, pika.PlainCredentials(broker.username, broker.password))) as c:
        opened = c.channel()
        opened.confirm_delivery()
        yield opened


def declare_sneakers(ch: BlockingChannel, queue: str = "mailer") -> None:
    """Sneakers 2.x `Maxretry#initialize`, as the worker runs it at start-up."""
    retry, error, requeue = f"{queue}-retry", f"{queue}-error", f"{queue}-retry-requeue"
    for name in (retry, error, requeue):
        ch.exchange_declare(name, "topic", durable=True)
    ch.queue_declare(retry, durable=True, arguments={"x-dead-letter-exchange": requeue,
                                                     "x-message-ttl": SNEAKERS_TTL_MS})
    ch.queue_bind(retry, retry, "#")
    ch.queue_declare(error, durable=True)
    ch.queue_bind(error, error, "#")
    ch.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": retry})
    ch.queue_bind(queue, requeue, "#")
    ch.exchange_declare("events", "topic", durable=True)
    ch.queue_bind(queue, "events", "mail.#")


def declare_dlx_ttl_loop(ch: BlockingChannel) -> None:
    """The consumer of a DLX + TTL loop: rejected messages wait in a TTL queue, then return through the
    work exchange."""
    ch.exchange_declare("service_a_inner_exch", "fanout", durable=True)
    ch.exchange_declare("dead_letter_exchange", "fanout", durable=True)
    ch.queue_declare("service_a_input_q", durable=True,
                     arguments={"x-dead-letter-exchange": "dead_letter_exchange"})
    ch.queue_declare("dead_letter_queue", durable=True,
                     arguments={"x-message-ttl": LOOP_TTL_MS, "x-dead-letter-exchange": "service_a_inner_exch"})
    ch.queue_bind("dead_letter_queue", "dead_letter_exchange")
    ch.queue_bind("service_a_input_q", "service_a_inner_exch")


def declare_plain(ch: BlockingChannel) -> None:
    """A quorum queue (its type is always stored) and a classic one declared without a type."""
    ch.queue_declare("audit", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("audit", "events", "audit.#")
    ch.queue_declare("legacy", durable=True)
    ch.queue_bind("legacy", "events", "legacy.*")


def _publish(ch: BlockingChannel, exchange: str, key: str, count: int, tag: str) -> None:
    for n in range(count):
        ch.basic_publish(exchange, key, f"{tag}-{n}".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)


def _runtime(broker: Broker, vhost: str) -> None:
    with _application(broker, vhost) as ch:
        declare_sneakers(ch)
        declare_dlx_ttl_loop(ch)
        declare_plain(ch)
        _publish(ch, "events", "mail.welcome", WAITING["mailer"], "mail")
        _publish(ch, "mailer-retry", "mail.retry", WAITING["mailer-retry"], "retrying")
        _publish(ch, "mailer-error", "mail.failed", WAITING["mailer-error"], "parked")
        _publish(ch, "service_a_inner_exch", "", WAITING["service_a_input_q"], "task")
        _publish(ch, "events", "legacy.x", WAITING["legacy"], "legacy")
        _publish(ch, "events", "audit.x", WAITING["audit"], "audit")


def _moved(vhost_config: dict[str, Any]) -> dict[str, str]:
    """Old queue → the queue its migration's shovel moves it to (an old error queue to the successor's)."""
    moved = {}
    for m in vhost_config.get("migrations", []):
        move = m["move"]
        moved[move["from"]] = move["to"]
        if isinstance(move["external"], dict) and move["external"].get("error_queue"):
            moved[move["external"]["error_queue"]] = naming.error_queue(move["to"])
    return moved


def _settled(broker: Broker, vhost: str, expected: dict[str, int]) -> bool:
    """Whether the queues reach these counts within ARRIVAL_S (the shovels move asynchronously)."""
    deadline = time.monotonic() + ARRIVAL_S
    while message_counts(broker, vhost, list(expected)) != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _snapshot(broker: Broker, vhost: str) -> Snapshot:
    return read_live(broker.client(), vhost)


def _without_imports(vhost_config: dict[str, Any], shovel_user: ShovelAccess) -> list[Any]:
    return record_vhost({k: v for k, v in vhost_config.items() if k != "import"}, shovel_user, reveal_secrets=True)


def test_adopting_runtime_topologies_imports_what_matches_and_loses_nothing(broker: Broker, runtime_vhost: str,
                                                                            shovel_user: ShovelAccess) -> None:
    vhost = runtime_vhost
    _runtime(broker, vhost)
    assert message_counts(broker, vhost, list(WAITING)) == WAITING

    adoption = adopt(_snapshot(broker, vhost))
    decided = summary(adoption.decisions)
    assert {(t.kind, t.queue) for t in adoption.topologies} == {("sneakers", "mailer"),
                                                               ("dlx-ttl-loop", "service_a_input_q")}
    assert adoption.beside["mailer"] == "mailer.v2"
    assert adoption.beside["service_a_input_q"] == "service_a_input_q.v2"
    assert {("Exchange", "events"), ("Exchange", "service_a_inner_exch"), ("Queue", "audit")} <= set(decided[IMPORT])
    assert {("Queue", q) for q in ("mailer", "mailer-retry", "mailer-error", "service_a_input_q",
                                   "dead_letter_queue")} <= set(decided[RETIRE])
    # RabbitMQ 4 stores x-queue-type on every queue; 3.10 stores none: kept with exactly what it holds, never moved.
    assert ("Queue", "legacy") in decided[IMPORT] and ("Queue", "legacy.v2") not in decided.get(BESIDE, [])

    records = record_vhost(adoption.vhost, shovel_user, reveal_secrets=True)
    imported = [r for r in records if r.import_id]
    assert imported and read_back(broker, imported) == [], "an import that needs a write was planned"
    apply(broker, records)
    assert read_back(broker, records) == [], "the next `pulumi up` would change something"
    # Each migration's shovels carry what an old queue (and its error queue) holds to its successor; the rest stays.
    moved = _moved(adoption.vhost)
    expected = {**WAITING, **{old: 0 for old in moved}, **{new: WAITING[old] for old, new in moved.items()}}
    assert _settled(broker, vhost, expected), "adoption lost or duplicated a message"

    # Removing `import` after the first `pulumi up` plans no change.
    steps = engine.diff(records, _without_imports(adoption.vhost, shovel_user))
    assert {s.op for s in steps if s.custom} == {"same"}

    # Drift: nothing missing or different; the extras are exactly the objects left to retire.
    found = findings(records, {vhost: _snapshot(broker, vhost)}, broker.username)
    assert [f for f in found if f.kind != "extra"] == []
    assert {(f.type, f.name) for f in found} == set(decided[RETIRE])
    # What `make drift` reads from the stack's evaluation: its migrations, in step move. The objects left to retire
    # are what they still drain, expected until step retire, and their shovels are on the broker as planned.
    plan = plan_vhost(load_vhost(adoption.vhost, "vhosts[0]"), "vhosts[0]", str(shovel_user.user))
    assert findings(records, {vhost: _snapshot(broker, vhost)}, broker.username, infos([("shop", plan)])) == []


def test_the_adopted_retry_loop_works_for_messages_published_after_adoption(
        broker: Broker, runtime_vhost: str, shovel_user: ShovelAccess) -> None:
    vhost = runtime_vhost
    _runtime(broker, vhost)
    adoption = adopt(_snapshot(broker, vhost))
    apply(broker, record_vhost(adoption.vhost, shovel_user, reveal_secrets=True))
    # The report's next step: `make migrate-retire … APPLY=1` unbinds each old queue where its successor is bound.
    model = load_vhost({k: v for k, v in adoption.vhost.items() if k != "import"}, "vhosts[0]")
    access = BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port)
    for migration in model.migrations:
        lines: list[str] = []
        assert retire(Found(vhost, migration), _snapshot(broker, vhost), RetireBroker(access, vhost), True,
                      lines.append), lines
    # What waited moved to the successors; take it away so that the new messages below come first.
    moved = _moved(adoption.vhost)
    assert _settled(broker, vhost, {**{old: 0 for old in moved},
                                    **{new: WAITING[old] for old, new in moved.items()}})
    with channel(broker, vhost) as ch:
        for queue in ("mailer.v2", "service_a_input_q.v2"):
            ch.queue_purge(queue)
    new = adoption.beside["service_a_input_q"]
    with channel(broker, vhost) as ch:
        _publish(ch, "service_a_inner_exch", "", 1, "after")
        first = next_message(ch, new, ARRIVAL_S)
        assert first is not None and first[2] == b"after-0"
        ch.basic_reject(first[0].delivery_tag, requeue=False)
        again = next_message(ch, new, ARRIVAL_S + LOOP_TTL_MS / 1000)
        assert again is not None and again[2] == b"after-0"
        deaths = again[1].headers["x-death"]
        assert [(d["queue"], d["reason"]) for d in deaths] == [(f"{new}.wait.1", "expired"), (new, "rejected")]
        ch.basic_ack(again[0].delivery_tag)
        # The Sneakers work queue's successor: a rejected message waits in its tier (the old TTL, 10 minutes).
        _publish(ch, "events", "mail.after", 1, "mail-after")
        mail = next_message(ch, "mailer.v2", ARRIVAL_S)
        assert mail is not None and mail[2] == b"mail-after-0"
        ch.basic_reject(mail[0].delivery_tag, requeue=False)
        waiting = next_message(ch, "mailer.v2.wait.1", ARRIVAL_S)
        assert waiting is not None and waiting[2] == b"mail-after-0"
        ch.basic_nack(waiting[0].delivery_tag, requeue=True)
    counts = message_counts(broker, vhost, ["service_a_input_q", "mailer", "mailer-retry", "mailer-error"])
    # Unbound, the old queues received nothing new; what still waits in Sneakers' retry queue stays there.
    assert counts == {"service_a_input_q": 0, "mailer": 0, "mailer-retry": WAITING["mailer-retry"],
                      "mailer-error": 0}, "the old queues lost or gained a message"


def test_creating_our_design_over_a_runtime_queue_fails_with_inequivalent_arg(broker: Broker,
                                                                              runtime_vhost: str) -> None:
    """What `make adopt` avoids by creating beside: declaring `mailer` our way over Sneakers' `mailer`."""
    with _application(broker, runtime_vhost) as ch:
        declare_sneakers(ch)
    config = {"name": runtime_vhost, "existing": True,
              "queues": [{"name": "mailer", "type": "classic", "retry": {"delays": ["1m"]}}]}
    with pytest.raises(MirrorError) as refused:
        apply(broker, record(lambda: Vhost("t", {"vhost": config})))
    assert refused.value.status == 400 and "inequivalent arg" in refused.value.reason


def test_importing_a_queue_whose_inputs_differ_is_refused(broker: Broker, runtime_vhost: str) -> None:
    """Every queue input forces a replace, and Pulumi refuses to replace what it imports."""
    with _application(broker, runtime_vhost) as ch:
        declare_sneakers(ch)
    config = {"name": runtime_vhost, "existing": True, "import": [f"queue mailer@{runtime_vhost}"],
              "queues": [{"name": "mailer", "type": "classic"}]}
    with pytest.raises(ImportRefusedError, match="x-dead-letter-exchange"):
        apply(broker, record(lambda: Vhost("t", {"vhost": config})))


def test_a_queue_declared_without_a_type_is_silently_taken_over_then_replaced_on_3_10(
        broker: Broker, runtime_vhost: str) -> None:
    """Why such a queue is created beside on RabbitMQ 3.x: our create succeeds over it (equivalent), and the
    provider's Read then finds no x-queue-type, so every later `pulumi up` would replace it."""
    with _application(broker, runtime_vhost) as ch:
        ch.queue_declare("legacy", durable=True)
    config = {"name": runtime_vhost, "existing": True, "queues": [{"name": "legacy", "type": "classic"}]}
    records = record(lambda: Vhost("t", {"vhost": config}))
    apply(broker, records)
    differences = read_back(broker, records)
    if version(broker) >= (4,):
        assert differences == []
    else:
        assert differences and all(line.endswith("(replace)") for line in differences)


OURS = {"exchanges": [{"name": "orders", "type": "topic"}],
        "queues": [{"name": "billing", "type": "quorum", "max_length": 1000,
                    "bindings": [{"exchange": "orders", "routing_key": "order.*"}],
                    "retry": {"delays": ["1s", "5s"], "max_retries": 2, "error_retention": "168h"}},
                   {"name": "audit", "type": "classic", "bindings": [{"exchange": "orders", "routing_key": "#"}]}],
        "policies": [{"name": "lazy-audit", "pattern": "^audit$", "definition": {"queue-version": 2}}]}


def test_re_adopting_our_own_topology_after_state_loss_imports_everything(broker: Broker, deploy: Any) -> None:
    deployed = deploy(OURS)
    assert read_back(broker, deployed.resources) == []
    adoption = adopt(_snapshot(broker, deploy.vhost))
    decided = summary(adoption.decisions)
    assert set(decided) == {IMPORT}, decided
    assert [(t.kind, t.queue, t.delays_ms) for t in adoption.topologies] == [("ours", "billing", (1000, 5000))]
    records = adoption.records
    assert all(r.import_id for r in records if r.custom and r.type in COMPARED_TYPES)
    apply(broker, records)
    assert read_back(broker, records) == []
    # The same logical names and inputs as the stack that was lost (which created the vhost the adopted
    # stack finds existing): nothing to replace.
    ours = {r.urn.rsplit("::", 1)[-1]: r.inputs for r in deployed.resources if r.custom and r.type != engine.VHOST}
    adopted = {r.urn.rsplit("::", 1)[-1].replace(naming.vhost_key(deploy.vhost), "t", 1): r.inputs
               for r in records if r.custom}
    assert adopted == ours


COMPARED_TYPES = (engine.QUEUE, engine.EXCHANGE, engine.BINDING, engine.POLICY)


def test_drift_reports_missing_different_and_extra_objects(broker: Broker, deploy: Any) -> None:
    deployed = deploy(OURS)
    vhost = deploy.vhost
    assert findings(deployed.resources, {vhost: _snapshot(broker, vhost)}, broker.username) == []
    call(broker, "PUT", f"policies/{esc(vhost)}/lazy-audit",
         {"pattern": "^audit$", "apply-to": "queues", "priority": 0, "definition": {"queue-version": 1}})
    call(broker, "DELETE", f"exchanges/{esc(vhost)}/billing.requeue")  # takes its binding with it
    with _application(broker, vhost) as ch:
        ch.queue_declare("declared-by-an-app", durable=True)
    found = {(f.kind, f.type, f.name)
             for f in findings(deployed.resources, {vhost: _snapshot(broker, vhost)}, broker.username)}
    assert found == {("mutable", "Policy", "lazy-audit"), ("missing", "Exchange", "billing.requeue"),
                     ("missing", "Binding", "billing.requeue → billing ('')"),
                     ("extra", "Queue", "declared-by-an-app")}


def test_drift_reports_widened_missing_and_undeclared_permissions(broker: Broker, deploy: Any) -> None:
    user = f"{deploy.vhost}-billing-app"
    config = {**OURS, "applications": [{"user": user, "consumes": ["billing"]}]}
    deployed = deploy(config, passwords={user: "s3cret-app"})
    vhost = deploy.vhost
    other = f"{deploy.vhost}-legacy"
    try:
        assert findings(deployed.resources, {vhost: _snapshot(broker, vhost)}, broker.username) == []
        call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(user)}", {"configure": ".*", "write": ".*", "read": ".*"})
        call(broker, "PUT", f"users/{esc(other)}", {"password": "legacy", "tags": ""})
        call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(other)}", {"configure": "", "write": ".*", "read": ".*"})
        found = {(f.kind, f.type, f.name)
                 for f in findings(deployed.resources, {vhost: _snapshot(broker, vhost)}, broker.username)}
        assert found == {("mutable", "Permissions", user), ("extra", "Permissions", other)}
        call(broker, "DELETE", f"permissions/{esc(vhost)}/{esc(user)}")
        found = {(f.kind, f.type, f.name)
                 for f in findings(deployed.resources, {vhost: _snapshot(broker, vhost)}, broker.username)}
        assert ("missing", "Permissions", user) in found
    finally:
        for name in (user, other):
            call(broker, "DELETE", f"users/{esc(name)}")
