"""`make adopt` without a broker: the `import` config key, the import IDs the components register, the
recognised runtime retry topologies, and the decisions and files written from a definitions export.

The same adoption on real 3.10 and 4.3 brokers: tests/broker/test_adoption.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import Vhost
from components.config.load import load_vhost
from components.model import naming
from components.model.naming import vhost_key
from components.model.problems import ConfigError
from components.plan import checks
from components.plan.planner import plan_vhost
from tests.support.adoption import summary
from tools import adopt as adopt_tool
from tools.lib import engine
from tools.lib.adopt import ALONE, BESIDE, IMPORT, RETIRE, adopt, report, stack_file
from tools.lib.mockrun import Registered, record
from tools.lib.recognise import dead_letter, recognise
from tools.lib.snapshot import Snapshot, read_file

ROOT = Path(__file__).resolve().parents[1]

ADOPTED_SHOVEL_USER = naming.shovel_user("rabbitmq-retry", "adopted")
"""The shovel user of stack `adopted`, whose stack files these tests plan (their migrations move runtime queues)."""


def _vhost(**extra: Any) -> dict[str, Any]:
    return {"name": "shop", "existing": True, "exchanges": [{"name": "orders", "type": "topic"}],
            "queues": [{"name": "audit", "type": "classic",
                        "bindings": [{"exchange": "orders", "routing_key": "order.#"}]},
                       {"name": "billing", "type": "classic", "retry": {"delays": ["1s"]}}], **extra}


def _problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as error:
        plan_vhost(load_vhost(config, "vhosts[0]"), "vhosts[0]")
    return error.value.problems


def _recorded(config: dict[str, Any]) -> list[Registered]:
    return record(lambda: Vhost(vhost_key(config["name"]), {"vhost": config}))


# --- the `import` key ------------------------------------------------------------------------------------------


def test_import_ids_reach_the_resources_they_name_and_no_other() -> None:
    config = _vhost(**{"import": [
        "exchange orders@shop", "queue audit@shop", "binding shop/orders/audit/queue/order.%23",
        "exchange billing.retry@shop", "binding shop/billing.requeue/billing/queue/~"]})
    imported = {r.name: r.import_id for r in _recorded(config) if r.import_id}
    assert imported == {"shop-exchange-orders": "orders@shop", "shop-queue-audit": "audit@shop",
                        "shop-binding-audit-orders-order.#": "shop/orders/audit/queue/order.%23",
                        "shop-billing-retry-exchange": "billing.retry@shop",
                        "shop-billing-requeue-binding": "shop/billing.requeue/billing/queue/~"}


def test_removing_the_import_list_plans_no_change() -> None:
    config = _vhost(**{"import": ["exchange orders@shop", "queue audit@shop"]})
    without = {k: v for k, v in config.items() if k != "import"}
    steps = engine.diff(_recorded(config), _recorded(without))
    assert {s.op for s in steps if s.custom} == {"same"}


def test_a_binding_with_arguments_is_imported_by_its_routing_key_and_argument_hash() -> None:
    config = {"name": "shop", "existing": True, "exchanges": [{"name": "h", "type": "headers"}],
              "queues": [{"name": "q", "type": "classic",
                          "bindings": [{"exchange": "h", "arguments": {"x-match": "all", "k": 1}}]}],
              "import": ["binding shop/h/q/queue/~bis9TA"]}
    assert [r.import_id for r in _recorded(config) if r.import_id] == ["shop/h/q/queue/~bis9TA"]


@pytest.mark.parametrize(("imports", "existing", "expected"), [
    (["queue audit"], True, ("vhosts[0].import[0]", "'audit' is not an ID of this vhost (name@shop)")),
    (["queue"], True, ("vhosts[0].import[0]", "expected \"<kind> <provider ID>\"")),
    (["topic audit@shop"], True, ("vhosts[0].import[0]", "kind one of queue, exchange, binding")),
    (["queue audit@other"], True, ("vhosts[0].import[0]", "is not an ID of this vhost (name@shop)")),
    (["queue audit@shop", "queue audit@shop"], True, ("vhosts[0].import", "an object is listed twice")),
    (["queue audit@shop"], False, ("vhosts[0].import", "only objects of an existing vhost can be imported")),
    ([7], True, ("vhosts[0].import[0]", "got 7")),
])
def test_malformed_import_entries_are_refused_with_their_key_path(imports: list[Any], existing: bool,
                                                                  expected: tuple[str, str]) -> None:
    problems = _problems(_vhost(existing=existing, **{"import": imports}))
    assert any(path == expected[0] and expected[1] in message for path, message in problems), problems


@pytest.mark.parametrize(("entry", "message"), [
    ("queue nothing@shop", "no queue this vhost declares has the ID 'nothing@shop'"),
    ("exchange audit@shop", "no exchange this vhost declares has the ID 'audit@shop'"),
    ("binding shop/orders/audit/queue/other", "no binding this vhost declares"),
    ("binding other/orders/audit/queue/order.%23", "is not a binding ID of this vhost"),
])
def test_an_import_that_names_nothing_declared_is_refused_before_anything_runs(entry: str, message: str) -> None:
    [(path, text)] = _problems(_vhost(**{"import": [entry]}))
    assert path == "vhosts[0].import[0]" and message in text


# --- recognising runtime topologies ----------------------------------------------------------------------------


def _snapshot(queues: dict[str, dict[str, Any]], exchanges: dict[str, str], bindings: list[tuple[str, str, str]],
              policies: dict[str, dict[str, Any]] | None = None) -> Snapshot:
    return Snapshot(
        "shop", "test",
        queues={n: {"name": n, "durable": True, "auto_delete": False, "arguments": a} for n, a in queues.items()},
        exchanges={n: {"name": n, "type": t, "durable": True, "auto_delete": False, "internal": False,
                       "arguments": {}} for n, t in exchanges.items()},
        bindings=[{"source": s, "destination": d, "destination_type": "queue", "routing_key": k, "arguments": {}}
                  for s, d, k in bindings],
        policies=policies or {})


SNEAKERS = _snapshot(
    {"mailer": {"x-dead-letter-exchange": "mailer-retry"},
     "mailer-retry": {"x-dead-letter-exchange": "mailer-retry-requeue", "x-message-ttl": 60000},
     "mailer-error": {}},
    {"events": "topic", "mailer-retry": "topic", "mailer-error": "topic", "mailer-retry-requeue": "topic"},
    [("mailer-retry", "mailer-retry", "#"), ("mailer-error", "mailer-error", "#"),
     ("mailer-retry-requeue", "mailer", "#"), ("events", "mailer", "mail.#")])

SPRING = _snapshot(
    {"orders.billing": {"x-dead-letter-exchange": "DLX", "x-dead-letter-routing-key": "orders.billing"},
     "orders.billing.dlq": {}},
    {"orders": "topic", "DLX": "direct"},
    [("orders", "orders.billing", "#"), ("DLX", "orders.billing.dlq", "orders.billing")])

# A DLX + TTL loop whose dead-lettering is set by a policy, not by queue arguments.
LOOP_BY_POLICY = _snapshot(
    {"service_a_input_q": {}, "dead_letter_queue": {"x-message-ttl": 30000,
                                                    "x-dead-letter-exchange": "service_a_inner_exch"}},
    {"service_a_inner_exch": "fanout", "dead_letter_exchange": "fanout"},
    [("service_a_inner_exch", "service_a_input_q", ""), ("dead_letter_exchange", "dead_letter_queue", "")],
    {"dlx": {"name": "dlx", "pattern": "^service_a_input_q$", "apply-to": "queues", "priority": 0,
             "definition": {"dead-letter-exchange": "dead_letter_exchange"}}})


def test_sneakers_maxretry_is_recognised_with_its_ttl_and_default_retry_limit() -> None:
    [topology] = recognise(SNEAKERS)
    assert (topology.kind, topology.queue, topology.delays_ms, topology.max_retries) == (
        "sneakers", "mailer", (60000,), 5)
    assert set(topology.queues) == {"mailer", "mailer-retry", "mailer-error"}
    assert set(topology.exchanges) == {"mailer-retry", "mailer-error", "mailer-retry-requeue"}
    assert topology.error_queue == "mailer-error"


def test_spring_cloud_stream_dlq_is_recognised_and_its_dlx_retired() -> None:
    [topology] = recognise(SPRING)
    assert (topology.kind, topology.queue, topology.queues, topology.exchanges) == (
        "spring-cloud-stream", "orders.billing", ("orders.billing", "orders.billing.dlq"), ("DLX",))


def test_a_dlx_set_by_policy_is_followed_and_the_policy_retired() -> None:
    assert dead_letter(LOOP_BY_POLICY, "service_a_input_q").policy == "dlx"
    [topology] = recognise(LOOP_BY_POLICY)
    assert (topology.kind, topology.queue, topology.delays_ms, topology.policies) == (
        "dlx-ttl-loop", "service_a_input_q", (30000,), ("dlx",))
    adoption = adopt(LOOP_BY_POLICY)
    assert ("Policy", "dlx") in summary(adoption.decisions)[RETIRE]
    assert not adoption.vhost["policies"]


def test_a_runtime_retry_queue_is_taken_over_beside_and_its_work_bindings_copied() -> None:
    adoption = adopt(SNEAKERS)
    [queue] = [q for q in adoption.vhost["queues"] if q["name"] == "mailer.v2"]
    assert queue["bindings"] == [{"exchange": "events", "routing_key": "mail.#"}]
    assert queue["retry"] == {"delays": ["1m"], "max_retries": 5}
    decided = summary(adoption.decisions)
    assert ("Exchange", "events") in decided[IMPORT]
    assert {("Queue", "mailer.v2"), ("Queue", "mailer.v2.wait.1"), ("Queue", "mailer.v2.error")} <= set(decided[BESIDE])
    assert {("Queue", "mailer"), ("Queue", "mailer-retry"), ("Queue", "mailer-error"),
            ("Exchange", "mailer-retry-requeue"), ("Binding", "events → mailer ('mail.#')")} <= set(decided[RETIRE])
    # Nothing planned over an existing name: every create is beside.
    existing = set(SNEAKERS.queues) | set(SNEAKERS.exchanges)
    assert not {name for kind, name in decided[BESIDE] if kind in ("Queue", "Exchange")} & existing


def test_each_queue_taken_over_beside_gets_a_migration_naming_the_old_runtime_objects() -> None:
    """The old objects are not the stack's (`move.external`): it shovels what they hold, never declares them, and
    `make migrate-retire` deletes them once empty."""
    adoption = adopt(SNEAKERS)
    assert adoption.vhost["migrations"] == [{"name": "adopt-mailer", "step": "move", "move": {
        "from": "mailer", "to": "mailer.v2", "external": {
            "error_queue": "mailer-error", "queues": ["mailer-retry"],
            "exchanges": list(recognise(SNEAKERS)[0].exchanges)}}}]
    plan = plan_vhost(load_vhost({k: v for k, v in adoption.vhost.items() if k != "import"}, "vhosts[0]"),
                      "vhosts[0]", ADOPTED_SHOVEL_USER)
    assert [(s.source, s.destination) for s in plan.shovels] == [("mailer", "mailer.v2"),
                                                                ("mailer-error", "mailer.v2.error")]
    report_text = report(adoption, "adopted")
    assert "make migrate-retire STACK=adopted MIGRATION=adopt-mailer APPLY=1" in report_text
    assert "passwords.rabbitmq-retry-shovel" in report_text and "DELETE /api/" not in report_text


def test_an_unrecognised_queue_is_kept_with_every_argument_and_never_moved() -> None:
    """A TTL queue that dead-letters back by the default exchange (TaskBunny's `Q.retry`), a DLQ and a quorum queue
    with at-least-once dead-lettering: none is a loop a strategy of ours keeps, so each is imported as it is."""
    arguments = {"jobs": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.retry"},
                 "jobs.retry": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs",
                                "x-message-ttl": 60000},
                 "jobs.rejected": {},
                 "lane": {"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx", "x-dead-letter-strategy":
                          "at-least-once", "x-overflow": "reject-publish", "x-delivery-limit": 5},
                 "lane.dlq": {"x-queue-type": "quorum"}}
    snapshot = _snapshot(arguments, {"dlx": "direct"}, [("dlx", "lane.dlq", "lane")])
    adoption = adopt(snapshot)
    decided = summary(adoption.decisions)
    assert set(decided[IMPORT]) >= {("Queue", q) for q in arguments}
    assert {t for t, _ in decided[BESIDE]} == {"Policy"}  # the quorum queues' delivery-limit policies
    assert "migrations" not in adoption.vhost and adoption.topologies == []
    entries = {q["name"]: q for q in adoption.vhost["queues"]}
    assert {name: entries[name].get("arguments", {"x-queue-type": "quorum"}) for name in arguments} == arguments
    assert entries["lane"]["delivery_limit"] == 5
    plan = plan_vhost(load_vhost(adoption.vhost, "vhosts[0]"), "vhosts[0]", ADOPTED_SHOVEL_USER)
    assert {q.name: dict(q.arguments) for q in plan.queues} == arguments
    assert "dead-letters to the default exchange with key `jobs`" in adoption.kept["jobs.retry"]
    assert "comes back on time" in adoption.kept["jobs.retry"]


# sneakers_handlers' DelayedRetryHandler, two workers: one topic retry exchange, a key per worker, a wait queue each
# dead-lettering back through the workers' exchange. The management API lists the digest's wait binding first.
SHARED_RETRY = _snapshot(
    {"my-app.mailer": {"x-dead-letter-exchange": "domain_events.retry"},
     "my-app.mailer-digest": {"x-dead-letter-exchange": "domain_events.retry"},
     "my-app.mailer-digest.retry": {"x-dead-letter-exchange": "domain_events", "x-message-ttl": 20000},
     "my-app.mailer.retry": {"x-dead-letter-exchange": "domain_events", "x-message-ttl": 30000}},
    {"domain_events": "topic", "domain_events.retry": "topic"},
    [("domain_events", "my-app.mailer", "mailer.send"), ("domain_events", "my-app.mailer-digest", "mailer.digest"),
     ("domain_events.retry", "my-app.mailer-digest.retry", "mailer.digest"),
     ("domain_events.retry", "my-app.mailer.retry", "mailer.send")])


def test_two_loops_sharing_a_retry_exchange_each_get_their_own_route() -> None:
    loops = {t.queue: t for t in recognise(SHARED_RETRY)}
    assert {q: (t.queues, t.delays_ms) for q, t in loops.items()} == {
        "my-app.mailer": (("my-app.mailer", "my-app.mailer.retry"), (30000,)),
        "my-app.mailer-digest": (("my-app.mailer-digest", "my-app.mailer-digest.retry"), (20000,))}
    assert [SHARED_RETRY.bindings[i]["destination"] for i in loops["my-app.mailer"].bindings] == ["my-app.mailer.retry"]
    adoption = adopt(SHARED_RETRY)
    retired = set(summary(adoption.decisions)[RETIRE])
    assert {("Binding", "domain_events.retry → my-app.mailer.retry ('mailer.send')"),
            ("Binding", "domain_events.retry → my-app.mailer-digest.retry ('mailer.digest')")} <= retired
    [shared] = [d.detail for d in adoption.decisions if d.name == "domain_events.retry"]
    assert "shared by the loops of `my-app.mailer`, `my-app.mailer-digest`" in shared


def _retire_plan(snapshot: Snapshot, adoption_of: Snapshot, queue: str, **external: Any) -> list[Any]:
    from tools.lib.migrate_retire import Found, plan

    vhost = {k: v for k, v in adopt(adoption_of).vhost.items() if k != "import"}
    for m in vhost["migrations"]:
        m["step"] = "retire"
        m["move"]["external"] |= external
    model = load_vhost(vhost, "vhosts[0]")
    [migration] = [m for m in model.migrations if m.source == queue]
    return plan(Found("shop", migration), snapshot)


def test_retire_keeps_what_another_loop_s_route_still_uses_and_names_that_loop() -> None:
    actions = {(a.kind, a.name): a for a in _retire_plan(SHARED_RETRY, SHARED_RETRY, "my-app.mailer")}
    assert actions[("delete exchange", "domain_events.retry")].shared == (
        "still on the retry route of another loop: it routes what `my-app.mailer-digest` dead-letters; kept, it goes "
        "with the last loop that uses it")
    assert actions[("delete queue", "my-app.mailer.retry")].shared is None
    # A migration that lists another loop's wait queue (as a finder that guessed once did) never deletes it.
    wrong = _retire_plan(SHARED_RETRY, SHARED_RETRY, "my-app.mailer", queues=["my-app.mailer-digest.retry"])
    [kept] = [a for a in wrong if a.name == "my-app.mailer-digest.retry"]
    assert kept.shared is not None and "`my-app.mailer-digest`" in kept.shared
    # Once the digest's loop is gone too, nothing else uses the exchange.
    alone = dataclasses.replace(SHARED_RETRY, queues={q: i for q, i in SHARED_RETRY.queues.items()
                                                      if "digest" not in q})
    assert all(a.shared is None for a in _retire_plan(alone, SHARED_RETRY, "my-app.mailer"))


def test_an_ambiguous_route_keeps_the_queue_as_it_is_with_the_reason() -> None:
    """A work queue bound with a pattern whose dead-lettered messages reach a wait queue for some keys only."""
    snapshot = _snapshot(
        {"jobs": {"x-dead-letter-exchange": "jobs.retry"},
         "jobs.wait": {"x-dead-letter-exchange": "jobs", "x-message-ttl": 5000}},
        {"jobs": "topic", "jobs.retry": "topic"},
        [("jobs", "jobs", "job.#"), ("jobs.retry", "jobs.wait", "job.email")])
    adoption = adopt(snapshot)
    assert adoption.topologies == [] and "migrations" not in adoption.vhost
    assert "for some keys only: `jobs.wait`" in adoption.kept["jobs"]
    assert "jobs" in report(adoption, "adopted") and adoption.vhost["queues"][0]["arguments"] == {
        "x-dead-letter-exchange": "jobs.retry"}


def test_the_new_name_skips_names_already_taken() -> None:
    taken = _snapshot({**{n: a["arguments"] for n, a in SNEAKERS.queues.items()}, "mailer.v2": {}},
                      {n: x["type"] for n, x in SNEAKERS.exchanges.items()},
                      [(b["source"], b["destination"], b["routing_key"]) for b in SNEAKERS.bindings])
    assert adopt(taken).beside["mailer"] == "mailer.v3"


def test_a_user_policy_that_would_also_match_the_new_queues_is_left_alone() -> None:
    snapshot = _snapshot({n: a["arguments"] for n, a in SNEAKERS.queues.items()},
                         {n: x["type"] for n, x in SNEAKERS.exchanges.items()},
                         [(b["source"], b["destination"], b["routing_key"]) for b in SNEAKERS.bindings],
                         {"all-mail": {"name": "all-mail", "pattern": "^mailer", "apply-to": "queues", "priority": 1,
                                       "definition": {"max-length": 100000}}})
    adoption = adopt(snapshot)
    assert ("Policy", "all-mail") in summary(adoption.decisions)[ALONE]


def test_a_quorum_queue_s_group_size_is_kept_so_that_it_imports_as_it_is() -> None:
    """The stack declares `x-quorum-initial-group-size` itself: a queue with it imports with the same size, and
    one created beside (for an argument the stack does not declare) keeps the size."""
    snapshot = _snapshot({"invoices": {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
                          "audit": {"x-queue-type": "quorum", "x-quorum-initial-group-size": 2, "x-max-length": 10}},
                         {"orders": "topic"}, [("orders", "invoices", "#"), ("orders", "audit", "#")])
    adoption = adopt(snapshot)
    decided = summary(adoption.decisions)
    assert ("Queue", "invoices") in decided[IMPORT] and ("Queue", "audit") in decided[IMPORT]
    entries = {q["name"]: q for q in adoption.vhost["queues"]}
    assert entries["invoices"]["quorum_group_size"] == 3
    assert entries["audit"]["arguments"] == snapshot.queues["audit"]["arguments"]
    plan = plan_vhost(load_vhost(adoption.vhost, "vhosts[0]"), "vhosts[0]", ADOPTED_SHOVEL_USER)
    assert {q.name: q.arguments for q in plan.queues}["invoices"] == snapshot.queues["invoices"]["arguments"]


# --- from a definitions export --------------------------------------------------------------------------------


def _export(tmp_path: Path) -> Path:
    """What `GET /api/definitions` of a RabbitMQ 3.10 broker holds: no x-queue-type, no properties_key."""
    definitions = {
        "rabbit_version": "3.10.8", "vhosts": [{"name": "shop"}],
        "queues": [{"name": "audit", "vhost": "shop", "durable": True, "auto_delete": False, "arguments": {}},
                   {"name": "invoices", "vhost": "shop", "durable": True, "auto_delete": False,
                    "arguments": {"x-queue-type": "quorum"}},
                   {"name": "amq.gen-1", "vhost": "shop", "durable": False, "auto_delete": True, "arguments": {}}],
        "exchanges": [{"name": "orders", "vhost": "shop", "type": "topic", "durable": True, "auto_delete": False,
                       "internal": False, "arguments": {}},
                      {"name": "with-ae", "vhost": "shop", "type": "topic", "durable": True, "auto_delete": False,
                       "internal": False, "arguments": {"alternate-exchange": "orders"}}],
        "bindings": [{"source": "orders", "vhost": "shop", "destination": "audit", "destination_type": "queue",
                      "routing_key": "order.#", "arguments": {}},
                     {"source": "orders", "vhost": "shop", "destination": "invoices", "destination_type": "queue",
                      "routing_key": "invoice created~", "arguments": {}},
                     {"source": "orders", "vhost": "shop", "destination": "audit", "destination_type": "queue",
                      "routing_key": "invoice created~", "arguments": {}},
                     {"source": "orders", "vhost": "shop", "destination": "with-ae", "destination_type": "exchange",
                      "routing_key": "x", "arguments": {}}],
        "policies": [{"vhost": "shop", "name": "cap", "pattern": "^invoices$", "apply-to": "queues",
                      "priority": 0, "definition": {"max-length": 5000}},
                     {"vhost": "shop", "name": "archive", "pattern": "^archive$", "apply-to": "queues",
                      "priority": 0, "definition": {"message-ttl": 86400000}}],
    }
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(definitions))
    return path


def test_adopting_from_a_3_10_export(tmp_path: Path) -> None:
    adoption = adopt(read_file(_export(tmp_path), "shop"))
    decided = summary(adoption.decisions)
    assert ("Policy", "archive") in decided[IMPORT]
    # Our quorum queue would get its own delivery-limit policy, which would take `cap`'s place on it and drop its
    # max-length: the queue is left as it is, under `cap`, which the stack keeps.
    assert ("Queue", "invoices") in decided[ALONE] and ("Policy", "cap") in decided[IMPORT]
    [why] = [d.detail for d in adoption.decisions if d.name == "invoices" and d.type == "Queue"]
    assert why.startswith("user policy `cap` applies to it (max-length)")
    # No x-queue-type stored (RabbitMQ before 4.0): imported with exactly the arguments it has (none), never moved,
    # so producers that publish to it by name keep reaching it; the report says what to add after an upgrade to 4.
    assert ("Queue", "audit") in decided[IMPORT] and BESIDE not in decided
    assert {q["name"]: q.get("arguments") for q in adoption.vhost["queues"]}["audit"] == {}
    assert any("1 queue without x-queue-type" in w and ": `audit`." in w for w in adoption.warnings)
    assert ("Queue", "amq.gen-1") in decided[ALONE] and ("Exchange", "with-ae") in decided[ALONE]
    # properties_key computed for a binding without arguments, as RabbitMQ makes it (`~` as %7E).
    assert not any("invoices" in i for i in adoption.vhost["import"])
    assert "binding shop/orders/audit/queue/invoice+created%7E" in adoption.vhost["import"]


def test_the_command_writes_a_stack_file_that_loads_and_a_report(tmp_path: Path) -> None:
    status = adopt_tool.main(["--vhost", "shop", "--stack", "adopted", "--definitions", str(_export(tmp_path)),
                              "--root", str(tmp_path)])
    assert status == 0
    document = yaml.safe_load((tmp_path / "Pulumi.adopted.yaml").read_text())
    [vhost] = document["config"]["rabbitmq-retry:vhosts"]
    plan = plan_vhost(load_vhost(vhost, "vhosts[0]"), "vhosts[0]", ADOPTED_SHOVEL_USER)
    assert {q.name for q in plan.queues} == {"audit"}
    report = (tmp_path / "adopt-adopted.md").read_text()
    assert "## Import" in report and "## Moving consumers and retiring the old objects" not in report
    # A second run never overwrites a stack.
    assert adopt_tool.main(["--vhost", "shop", "--stack", "adopted", "--definitions", str(_export(tmp_path)),
                            "--root", str(tmp_path)]) == 1


def test_the_written_stack_runs_as_a_program(tmp_path: Path) -> None:
    """The stack file is in the project's own schema: the program plans it under mocks."""
    from tools.lib.mockrun import record_program

    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "components").symlink_to(ROOT / "components")
    assert adopt_tool.main(["--vhost", "shop", "--stack", "adopted", "--definitions", str(_export(tmp_path)),
                            "--root", str(tmp_path)]) == 0
    records = record_program("adopted", tmp_path)
    assert {r.import_id for r in records if r.import_id} >= {"audit@shop", "orders@shop", "archive@shop", "cap@shop"}


def test_a_missing_message_count_is_explained_by_where_the_snapshot_was_read():
    from tools.lib.adopt import _messages
    from tools.lib.snapshot import Snapshot

    live = Snapshot("shop", "http://127.0.0.1:15672", queues={"jobs": {"name": "jobs"}, "audit": {"messages": 5}},
                    live=True)
    assert _messages(live, "audit") == "5 messages now"
    assert _messages(live, "jobs") == ("message count not reported yet by the management API (read live); check it "
                                       "before applying")
    assert "read from a file" not in _messages(live, "jobs")
    exported = Snapshot("shop", "definitions.json", queues={"jobs": {"name": "jobs"}})
    assert _messages(exported, "jobs") == "message count unknown (read from a file)"


def test_the_stack_file_gives_the_shovels_the_broker_s_own_amqp_port() -> None:
    """The shovels run on the broker and connect to its AMQP port: read from the management API's listeners (the
    local 4.3 listens on 5673, where the default 5672 is the other broker)."""
    from dataclasses import replace

    from tools.lib.snapshot import amqp_ports

    assert amqp_ports({"listeners": [{"protocol": "amqp", "port": 5673}, {"protocol": "http", "port": 15673},
                                     {"protocol": "amqp/ssl", "port": 5671}, {"protocol": "clustering",
                                                                                "port": 25673}]}) == (5673,)
    adoption = adopt(replace(SNEAKERS, amqp_ports=(5673,)))
    document = yaml.safe_load(stack_file(adoption, None))
    assert document["config"]["rabbitmq-retry:amqp_port"] == 5673
    assert "rabbitmq-retry:amqp_port" not in yaml.safe_load(stack_file(adopt(SNEAKERS), None))["config"]


def test_a_versioned_name_gets_the_next_version_not_a_doubled_suffix() -> None:
    snapshot = _snapshot({"render.v1": {"x-dead-letter-exchange": "render.v1-retry"},
                          "render.v1-retry": {"x-dead-letter-exchange": "render.v1-retry-requeue",
                                              "x-message-ttl": 60000}},
                         {"render.v1-retry": "topic", "render.v1-retry-requeue": "topic"},
                         [("render.v1-retry", "render.v1-retry", "#"), ("render.v1-retry-requeue", "render.v1", "#")])
    assert adopt(snapshot).beside == {"render.v1": "render.v2"}
    assert adopt(SNEAKERS).beside == {"mailer": "mailer.v2"}


def test_the_report_says_what_is_kept_and_only_true_sentences() -> None:
    """A kept TTL queue is listed with its wait and route; a moved queue bound from no exchange is not said to be
    bound like anything, and producers by name are named in its block."""
    kept = adopt(_snapshot({"jobs": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.retry"},
                            "jobs.retry": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs",
                                           "x-message-ttl": 60000}}, {}, []))
    text = report(kept, "x")
    assert "## Kept as they are" in text and "| jobs.retry | holds a message 1m; dead-letters to the default " \
        "exchange with key `jobs`; a retry waiting here comes back on time" in text
    assert "## Moving consumers" not in text
    unbound = adopt(_snapshot({n: a["arguments"] for n, a in SNEAKERS.queues.items()},
                              {n: x["type"] for n, x in SNEAKERS.exchanges.items()},
                              [(b["source"], b["destination"], b["routing_key"]) for b in SNEAKERS.bindings
                               if b["source"] != "events"]))
    text = report(unbound, "x")
    assert "binds it" not in text and "`mailer` is bound from no exchange but its own topology's" in text
    assert "Right away" not in text
    assert "Producers that publish to `mailer` by name" in text
    assert text.count("\n### ") == 1


def test_a_refusal_of_the_checks_is_placed_by_its_key_path_never_by_its_message(monkeypatch) -> None:
    """An operator policy whose expiry would reach the new queues is left alone because of where the problem is
    (its `Problem.path`); reworded messages change nothing but the reason shown."""
    snapshot = dataclasses.replace(SNEAKERS, operator_policies={"ops": {
        "name": "ops", "pattern": "^mailer", "apply-to": "queues", "priority": 0,
        "definition": {"expires": 3600000}}})
    as_written = adopt(snapshot)
    assert ("OperatorPolicy", "ops") in summary(as_written.decisions)[ALONE]
    monkeypatch.setattr("tools.lib.adopt.check_vhost", lambda plan: [
        dataclasses.replace(problem, message=f"reworded: {problem.code}") for problem in checks.check_vhost(plan)])
    reworded = adopt(snapshot)
    assert {action: sorted(decided) for action, decided in summary(reworded.decisions).items()} == {
        action: sorted(decided) for action, decided in summary(as_written.decisions).items()}
    assert [d.detail for d in reworded.decisions if d.name == "ops"] == [
        f"refused by the config or the preview checks: reworded: {checks.EXPIRES_ON_QUEUE}"]


def test_lists_of_names_are_unambiguous_whatever_the_names_contain() -> None:
    """EasyNetQ's queue names contain ", ": each name of a list is a code span of its own."""
    from tools.lib.markdown import names

    assert names(["Orders:Placed, Shop_billing", "a`b", ""]) == '`Orders:Placed, Shop_billing`, ``a`b``, `""`'
    queues = {"Orders:Placed, Shop_billing": {}, "plain": {}}
    adoption = adopt(_snapshot(queues, {}, []))
    [warning] = [w for w in adoption.warnings if "without x-queue-type" in w]
    assert ": `Orders:Placed, Shop_billing`, `plain`." in warning


def test_a_user_s_permissions_are_granted_as_they_are_only_when_this_project_grants_them_so() -> None:
    from tools.lib.adopt import GRANT, names_granted

    names = ["orders.billing.retry", "orders", "orders.billing"]
    assert names_granted(r"^(orders|orders\.billing\.retry)$", names) == ["orders", "orders.billing.retry"]
    assert names_granted("^$", names) == [] and names_granted(".*", names) is None
    assert names_granted(r"^(b|a)$", ["a", "b"]) is None and names_granted(r"^(a|b)$", ["a"]) is None
    plain = _snapshot({"audit": {"x-queue-type": "classic"}}, {"orders": "topic"}, [("orders", "audit", "#")])
    snapshot = dataclasses.replace(plain, permissions={
        "billing": {"configure": "^$", "write": "^(orders)$", "read": "^(audit)$"},
        "legacy": {"configure": ".*", "write": ".*", "read": ".*"},
        "reader": {"configure": ".*", "write": ".*", "read": ".*"}}, reader="reader")
    adoption = adopt(snapshot)
    decided = summary(adoption.decisions)
    assert ("Permissions", "billing") in decided[GRANT] and ("Permissions", "legacy") in decided[ALONE]
    assert "reader" not in {name for pairs in decided.values() for _, name in pairs}
