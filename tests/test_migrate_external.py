"""A move whose old queue is not the stack's (`move.external`): the topology an application declared at runtime
and `make adopt` took over beside. The stack plans only the shovels and the shovel user's permissions; the old
objects are retired on the broker by `make migrate-retire`, never by `pulumi up`."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components import Vhost
from components.pulumi.resources import ShovelAccess
from tests.conftest import of_type
from tests.test_migration_review import Run, review_of  # noqa: F401 (the review's fixture)
from tests.test_migrations import plan, problems
from tools.lib.mockrun import record

SHOVEL = "rabbitmq:index/shovel:Shovel"


def adopted(step: str = "move", external: Any = None) -> dict[str, Any]:
    """`orders.v2` takes over the runtime queue `orders` (Sneakers: `orders-retry` waits, `orders-error` parks)."""
    return {"name": "shop", "existing": True, "exchanges": [{"name": "events", "type": "topic"}],
            "queues": [{"name": "orders.v2", "type": "classic",
                        "bindings": [{"exchange": "events", "routing_key": "order.*"}],
                        "retry": {"delays": ["1m"], "max_retries": 5}}],
            "migrations": [{"name": "adopt-orders", "step": step, "move": {
                "from": "orders", "to": "orders.v2",
                "external": external if external is not None else {
                    "error_queue": "orders-error", "queues": ["orders-retry"],
                    "exchanges": ["orders-retry", "orders-retry-requeue", "orders-error"]}}}]}


def test_step_move_plans_a_shovel_for_the_old_queue_and_one_for_its_error_queue_and_nothing_of_the_old_objects():
    vhost = plan(adopted())
    assert [(s.name, s.source, s.destination, s.external_source) for s in vhost.shovels] == [
        ("rabbitmq-retry.migrate.adopt-orders", "orders", "orders.v2", True),
        ("rabbitmq-retry.migrate.adopt-orders.error", "orders-error", "orders.v2.error", True)]
    planned = {q.name for q in vhost.queues} | {q.name for r in vhost.retryables for q in r.queues}
    assert not planned & {"orders", "orders-retry", "orders-error"}
    [grant] = vhost.shovel_permissions
    assert (grant.read.regex, grant.write.regex, grant.configure.regex) == (
        r"^(orders|orders\-error)$", r"^amq\.default$", r"^(orders\.v2|orders\.v2\.error)$")
    [migration] = vhost.migrations
    assert migration.old_queues == ("orders-retry", "orders", "orders-error")


def test_external_true_moves_the_old_queue_alone():
    vhost = plan(adopted(external=True))
    assert [(s.source, s.destination) for s in vhost.shovels] == [("orders", "orders.v2")]
    assert vhost.migrations[0].old_queues == ("orders",)


def test_step_retire_plans_no_shovel_and_keeps_the_old_objects_for_status_and_retire():
    vhost = plan(adopted("retire"))
    assert not vhost.shovels and not vhost.shovel_permissions and not vhost.migrations[0].bindings
    assert vhost.migrations[0].old_queues == ("orders-retry", "orders", "orders-error")


def test_the_successor_contract_names_its_predecessor():
    contract = plan(adopted()).retryables[0].contract("shop")
    assert contract["migration"] == {"name": "adopt-orders", "step": "move", "predecessor": "orders",
                                     "drains_by": "shovel"}


@pytest.mark.parametrize("change, path, words", [
    (lambda c: c["queues"].append({"name": "orders"}), "vhosts[0].migrations[adopt-orders].move.from",
     "is declared by this stack (vhosts[0].queues[orders])"),
    (lambda c: c["queues"][0].update(name="orders-retry"), "vhosts[0].migrations[adopt-orders].move.external.queues[0]",
     "is declared by this stack"),
    (lambda c: c["exchanges"].append({"name": "orders-error", "type": "fanout"}),
     "vhosts[0].migrations[adopt-orders].move.external.exchanges[2]", "is declared by this stack"),
    (lambda c: c["queues"][0].pop("retry"), "vhosts[0].migrations[adopt-orders].move.to",
                                            "give orders.v2 a retry block"),
    (lambda c: c["migrations"][0]["move"].update(external="yes"), "vhosts[0].migrations[adopt-orders].move.external",
     "expected true or a mapping"),
    (lambda c: c["migrations"][0]["move"]["external"].update(queue=["x"]),
     "vhosts[0].migrations[adopt-orders].move.external.queue", "unknown key"),
    (lambda c: c["migrations"][0]["move"]["external"].update(queues=["a@b"]),
     "vhosts[0].migrations[adopt-orders].move.external.queues[0]", '"@" breaks'),
])
def test_each_bad_external_entry_is_refused_at_its_key_path(change, path, words):
    config = adopted()
    change(config)
    found = problems(config)
    assert any(p == path and words in m for p, m in found), found


def test_the_vhost_registers_the_shovels_without_waiting_for_a_source_it_does_not_declare():
    access = ShovelAccess("rabbitmq-retry-shovel", "secret", 5672)
    resources = record(lambda: Vhost("shop", {"vhost": adopted(), "shovel_access": access}), reveal_secrets=True)
    shovels = of_type(resources, SHOVEL)
    assert sorted(shovels) == ["shop-shovel-adopt-orders", "shop-shovel-adopt-orders-error"]
    info = shovels["shop-shovel-adopt-orders-error"].inputs["info"]
    assert (info["sourceQueue"], info["destinationQueue"]) == ("orders-error", "orders.v2.error")
    urns = {r.name: r.urn for r in resources}
    dependencies = set(shovels["shop-shovel-adopt-orders-error"].dependencies)
    assert {urns["shop-orders.v2-error"], urns["shop-permissions-rabbitmq-retry-shovel"]} <= dependencies
    assert all("/queue:Queue::shop-orders.v2" in d for d in dependencies if "/queue:Queue::" in d)


# --- review and status ------------------------------------------------------------------------------------------


def external_step(name: str) -> dict[str, Any]:
    """The review's BASE with `orders.v2` taking over the runtime queue `mailer` (not the stack's)."""
    from tests.test_review import BASE

    config = copy.deepcopy(BASE)
    if name == "before":
        return config
    config["vhosts"][0]["queues"].append({"name": "mailer.v2", "bindings": [{"exchange": "events",
                                                                              "routing_key": "mail.#"}],
                                          "retry": {"delays": ["1m"], "max_retries": 5}})
    config["vhosts"][0]["migrations"] = [{"name": "adopt-mailer", "step": name, "move": {
        "from": "mailer", "to": "mailer.v2", "external": {"error_queue": "mailer-error", "queues": ["mailer-retry"]}}}]
    return config


def test_the_review_of_each_step_says_the_old_objects_are_not_the_stacks_and_exits_0(review_of: Run):  # noqa: F811
    run = review_of
    text, status = run(external_step("before"), external_step("move"))
    assert status == 0
    section = text.split("### Migrations", 1)[1]
    assert "move `mailer` → `mailer.v2`, step `move`" in section
    assert ("Not the stack's (`move.external`, declared by applications at runtime): `mailer-retry`, `mailer`, "
            "`mailer-error`") in section
    assert "`make migrate-retire STACK=review MIGRATION=adopt-mailer APPLY=1` unbinds `mailer`" in section
    text, status = run(external_step("move"), external_step("retire"))
    assert status == 0
    section = text.split("### Migrations", 1)[1]
    assert "`pulumi up` never declares, changes or deletes them" in section
    assert "`make migrate-retire STACK=review MIGRATION=adopt-mailer` prints what it would retire" in section


def test_migrate_status_sends_an_external_retire_to_make_migrate_retire():
    from rabbitmq_retry_client.depth import QueueDepth
    from tools.lib.evaluation import MigrationInfo
    from tools.lib.migrate_status import next_step

    move = MigrationInfo("shop",
                         "adopt-mailer", "move", "move", "vhosts[0].migrations[adopt-orders]", "mailer", "mailer.v2",
                         (), ("mailer-retry", "mailer", "mailer-error"), False, None, external=True)
    empty = QueueDepth("shop", "mailer", 0, 0, 0, 0, "classic")
    held = QueueDepth("shop", "mailer-retry", 2, 0, 0, 0, "classic")
    assert next_step(move, [("mailer", empty)], "dev") == \
        "drained: set step: retire in a commit, apply it, then `make migrate-retire STACK=dev MIGRATION=adopt-mailer " \
        "APPLY=1`"
    retire = MigrationInfo("shop", "adopt-mailer", "move", "retire", "p", "mailer", "mailer.v2", (),
                           ("mailer-retry", "mailer"), False, None, external=True)
    assert next_step(retire, [("mailer-retry", held), ("mailer", empty)], "dev") == \
        "retire on the broker: `make migrate-retire STACK=dev MIGRATION=adopt-mailer APPLY=1` deletes " \
        "`mailer-retry`, `mailer`, each only when empty and unused (it refuses while `mailer-retry` holds 2)"
    assert next_step(retire, [("mailer-retry", None), ("mailer", None)], "dev") == "retired: the entry may be removed"


def test_migrate_status_prints_a_stopped_shovel_s_reason_and_what_to_check():
    """RabbitMQ reports a shovel that stopped as `terminated` with a `reason` (rabbit_shovel_status: `{terminated,
    Reason}` → `reason`); one that cannot connect stays `starting` (seen on 3.10.8 with a wrong port or vhost) unless
    its reconnect-delay is 0: then 4.3.6 reports it terminated, "failed to connect to source" (seen live)."""
    from rabbitmq_retry_client.depth import QueueDepth
    from tools.lib.evaluation import MigrationInfo
    from tools.lib.migrate_status import next_step, shovel_state

    stopped = {"name": "s", "state": "terminated", "reason": "{shutdown,\n  {server_initiated_close,530,\n"
               "   <<\"NOT_ALLOWED - vhost shop not found\">>}}"}
    assert shovel_state(stopped) == ('terminated: {shutdown, {server_initiated_close,530, <<"NOT_ALLOWED - vhost '
                                     'shop not found">>}}')
    assert shovel_state({"name": "s", "state": "running"}) == "running"
    # As 4.3.6 reported a shovel with reconnect-delay 0 whose source port nothing listens on (seen live).
    assert shovel_state({"name": "s", "state": "terminated", "reason": '"failed to connect to source"'}) == \
        "terminated: failed to connect to source"
    move = MigrationInfo("shop",
                         "adopt-mailer", "move", "move", "vhosts[0].migrations[adopt-orders]", "mailer", "mailer.v2",
                         (), ("mailer",), False, None, external=True)
    held = QueueDepth("shop", "mailer", 3, 0, 0, 0, "classic")
    step = next_step(move, [("mailer", held)], "dev", [("rabbitmq-retry.migrate.adopt-mailer", shovel_state(stopped))])
    assert step.startswith("shovel rabbitmq-retry.migrate.adopt-mailer has stopped (terminated) and moves nothing")
    assert "rabbitmq-retry:amqp_port" in step
    step = next_step(move, [("mailer", held)], "dev", [("rabbitmq-retry.migrate.adopt-mailer", "starting")])
    assert step.startswith("not yet: mailer holds 3; shovel rabbitmq-retry.migrate.adopt-mailer has not connected yet")
