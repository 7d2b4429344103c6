"""`make drift` without a broker: the program's recorded inputs against a vhost snapshot, compared as the
provider's Read fills its state (docs/provider.md §7) under the diff rules of `tools/lib/engine.py`.

Against real 3.10 and 4.3 brokers: tests/broker/test_adoption.py.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from components import Vhost
from tools import drift as drift_command
from tools.lib import engine
from tools.lib.drift import Finding, drifted, findings, render
from tools.lib.mockrun import Registered, record
from tools.lib.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"name": "shop", "existing": True, "exchanges": [{"name": "orders", "type": "topic"}],
          "queues": [{"name": "audit", "type": "classic", "bindings": [{"exchange": "orders", "routing_key": "#"}]}],
          "policies": [{"name": "cap", "pattern": "^audit$", "definition": {"max-length": 10}}]}


def _records() -> list[Registered]:
    return record(lambda: Vhost("shop", {"vhost": CONFIG}))


def _in_sync(**changes: Any) -> Snapshot:
    """The broker as `pulumi up` of CONFIG leaves it (policy numbers are stored as numbers)."""
    queues = {"audit": {"name": "audit", "durable": True, "auto_delete": False,
                        "arguments": {"x-queue-type": "classic"}}}
    exchanges = {"orders": {"name": "orders", "type": "topic", "durable": True, "auto_delete": False,
                            "arguments": {}}}
    bindings = [{"source": "orders", "destination": "audit", "destination_type": "queue", "routing_key": "#",
                 "arguments": {}, "properties_key": "%23"}]
    policies = {"cap": {"name": "cap", "pattern": "^audit$", "apply-to": "queues", "priority": 0,
                        "definition": {"max-length": 10}}}
    return Snapshot("shop", "test", **{"queues": queues, "exchanges": exchanges, "bindings": bindings,
                                       "policies": policies, **changes})


def _kinds(snapshot: Snapshot) -> set[tuple[str, str, str]]:
    return {(f.kind, f.type, f.name) for f in findings(_records(), {"shop": snapshot})}


def test_a_vhost_as_the_stack_left_it_is_in_sync() -> None:
    assert _kinds(_in_sync()) == set()
    assert "**In sync**" in render("s", [], {"shop": _in_sync()})


def test_a_changed_queue_argument_is_immutable_drift() -> None:
    changed = {"audit": {"name": "audit", "durable": True, "auto_delete": False,
                         "arguments": {"x-queue-type": "classic", "x-max-length": 5}}}
    [finding] = findings(_records(), {"shop": _in_sync(queues=changed)})
    assert (finding.kind, finding.name) == ("immutable", "audit")
    assert "settings.argumentsJson.x-max-length" in finding.detail


def test_a_queue_without_x_queue_type_as_3_10_stores_it_is_immutable_drift() -> None:
    bare = {"audit": {"name": "audit", "durable": True, "auto_delete": False, "arguments": {}}}
    assert _kinds(_in_sync(queues=bare)) == {("immutable", "Queue", "audit")}


def test_a_policy_changed_by_hand_is_mutable_drift() -> None:
    edited = {"cap": {"name": "cap", "pattern": "^audit$", "apply-to": "queues", "priority": 0,
                      "definition": {"max-length": 99}}}
    assert _kinds(_in_sync(policies=edited)) == {("mutable", "Policy", "cap")}


def test_missing_and_extra_objects() -> None:
    snapshot = _in_sync(bindings=[{"source": "orders", "destination": "runtime", "destination_type": "queue",
                                   "routing_key": "x", "arguments": {}}],
                        queues={"runtime": {"name": "runtime", "durable": True, "auto_delete": False,
                                            "arguments": {}, "messages": 4}})
    assert _kinds(snapshot) == {("missing", "Queue", "audit"), ("missing", "Binding", "orders → audit ('#')"),
                                ("extra", "Queue", "runtime"), ("extra", "Binding", "orders → runtime ('x')")}
    extra = next(f for f in findings(_records(), {"shop": snapshot}) if f.name == "runtime")
    assert extra.detail == "4 messages"


def test_permissions_are_compared_and_undeclared_grants_are_extra() -> None:
    """Who may do what in the vhost drifts too: a widened grant, a missing one, a user nobody declared. The
    provider's own user (the one reading the vhost) holds the grants it created the vhost with."""
    config = {**CONFIG, "applications": [{"user": "audit-app", "consumes": ["audit"]}]}
    records = record(lambda: Vhost("shop", {"vhost": config, "passwords": {"audit-app": "x"}}))
    (grant,) = [r.inputs["permissions"] for r in records if r.type == engine.PERMISSIONS]
    as_declared = {"audit-app": dict(grant)}
    everyone = {**as_declared, "deployer": {"configure": ".*", "write": ".*", "read": ".*"},
                "legacy-app": {"configure": ".*", "write": ".*", "read": ".*"}}

    def kinds(permissions: dict[str, Any], own_user: str = "deployer") -> set[tuple[str, str, str]]:
        snapshot = _in_sync(permissions=permissions)
        return {(f.kind, f.type, f.name) for f in findings(records, {"shop": snapshot}, own_user)}

    assert kinds(as_declared) == set()
    assert kinds({}) == {("missing", "Permissions", "audit-app")}
    assert kinds({"audit-app": {**grant, "read": ".*"}}) == {("mutable", "Permissions", "audit-app")}
    assert kinds(everyone) == {("extra", "Permissions", "legacy-app")}
    assert kinds(everyone, own_user="") == {("extra", "Permissions", "legacy-app"),
                                            ("extra", "Permissions", "deployer")}


def test_a_missing_vhost_is_drift_and_pulumi_up_creates_it_only_when_the_stack_does() -> None:
    absent = Snapshot("shop", "test", exists=False)
    created = {(f.kind, f.type, f.name) for f in findings(
        record(lambda: Vhost("shop", {"vhost": {**CONFIG, "existing": False}})), {"shop": absent})}
    assert ("missing", "VHost", "shop") in created and {kind for kind, _, _ in created} == {"missing"}
    # `existing: true` is referenced, never created: `pulumi up` fails with 404 instead (tests/broker/
    # test_existing_vhost.py shows it on both brokers).
    referenced = _kinds(absent)
    assert ("uncreatable", "VHost", "shop") in referenced and {kind for kind, _, _ in referenced} == {"uncreatable"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "components").symlink_to(ROOT / "components")
    (tmp_path / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {"rabbitmq-retry:vhosts": [CONFIG]}}))
    return tmp_path


def _export(path: Path, snapshot: Snapshot) -> Path:
    path.write_text(json.dumps({
        "vhosts": [{"name": "shop"}],
        "queues": [{**q, "vhost": "shop"} for q in snapshot.queues.values()],
        "exchanges": [{**x, "vhost": "shop"} for x in snapshot.exchanges.values()],
        "bindings": [{**b, "vhost": "shop"} for b in snapshot.bindings],
        "policies": [{**p, "vhost": "shop"} for p in snapshot.policies.values()]}))
    return path


def test_exit_status_0_in_sync_2_drift_1_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(*extra: str) -> int:
        return drift_command.main(["--stack", "s", "--root", str(project), *extra])

    assert run("--definitions", str(_export(project / "same.json", _in_sync()))) == 0
    edited = _in_sync(policies={})
    output = project / "drift.md"
    assert run("--definitions", str(_export(project / "edited.json", edited)), "--output", str(output)) == 2
    assert "## Missing" in output.read_text() and "| shop | Policy | cap |" in output.read_text()
    assert run("--definitions", str(project / "absent.json")) == 1
    assert "error:" in capsys.readouterr().err


def test_the_scheduled_drift_workflow_passes_actionlint_and_is_off_by_default() -> None:
    from tests.test_workflow import actionlint

    workflow = ROOT / ".github" / "workflows" / "drift.yml"
    result = actionlint(workflow)
    assert result.returncode == 0, result.stdout + result.stderr
    document = yaml.safe_load(workflow.read_text())
    triggers = document[True]  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    assert document["jobs"]["drift"]["if"] == "vars.DRIFT_STACKS != ''"
    runs = " ".join(s.get("run", "") for s in document["jobs"]["drift"]["steps"])
    assert 'pip install ".[tools]"' in runs and "rabbitmq-retry drift --stack" in runs


def test_a_users_limits_are_compared_broker_wide_when_the_snapshot_carries_them() -> None:
    """An application's limits (`applications[].limits`) against the users' limits read live or from a full
    export; a single-vhost export carries none, and then they are not compared."""
    config = {**CONFIG, "applications": [{"user": "billing", "consumes": ["audit"],
                                          "limits": {"max_connections": 5}}]}
    records = record(lambda: Vhost("shop", {"vhost": config, "passwords": {"billing": "pw"}}))
    permissions = {"billing": {"configure": "^$", "write": "^$", "read": "^(audit)$"}}

    def limits_findings(user_limits: dict[str, dict[str, Any]] | None) -> list[tuple[str, str, str, str]]:
        snapshot = _in_sync(permissions=permissions, user_limits=user_limits)
        return [(f.kind, f.type, f.name, f.detail) for f in findings(records, {"shop": snapshot})
                if f.type == "UserLimits"]

    assert limits_findings({"billing": {"max-connections": 5}, "other": {"max-channels": 1}}) == []
    assert limits_findings(None) == []
    [(kind, _, name, detail)] = limits_findings({"billing": {"max-connections": 9, "max-queues-unmanaged": 1}})
    assert (kind, name) == ("mutable", "billing")
    assert detail == "limits.max-connections: stack 5, broker 9"
    [(kind, _, name, _)] = limits_findings({"billing": {}})
    assert (kind, name) == ("missing", "billing")


def test_a_policy_the_stack_does_not_declare_that_changes_a_queue_s_ttl_or_route_is_drift_where_it_counts() -> None:
    """Every declared object reads back equal, yet another team's broader policy of higher priority applies to
    `audit` instead of `cap` (RabbitMQ applies one user policy): its TTL and dead-letter route are not the stack's."""
    broad = {"name": "ttl-all", "pattern": ".*", "apply-to": "queues", "priority": 5,
             "definition": {"message-ttl": 1000, "dead-letter-exchange": "elsewhere"}}
    found = findings(_records(), {"shop": _in_sync(policies={**_in_sync().policies, "ttl-all": broad})})
    assert {(f.kind, f.type, f.name) for f in found} == {("effective", "Queue", "audit"),
                                                         ("extra", "Policy", "ttl-all")}
    [effective] = [f for f in found if f.kind == "effective"]
    assert effective.detail == ("message-ttl: stack none, broker 1000 (policy ttl-all); dead-letter-exchange: stack "
                                "none, broker 'elsewhere' (policy ttl-all)")
    assert "## Different where it counts" in render("s", found, {"shop": _in_sync()})


# What a migration still drains (issue 33, point 11): after `make adopt` and `pulumi up` of step move, the adopted
# runtime topology is on the broker beside its successor until step retire; drift reads the migration from the
# stack's evaluation, expects those objects, and compares the migration's shovels and user like the rest.

def _adopted_stack(project: Path, step: str = "move") -> str:
    from tests.test_migrate_external import adopted

    (project / "Pulumi.moving.yaml").write_text(yaml.safe_dump({"config": {"rabbitmq-retry:vhosts": [adopted(step)]}}))
    return "moving"


def _broker_after_step_move(project: Path, stack: str) -> dict[str, Any]:
    """A broker-wide export as `pulumi up` of the stack leaves it beside the runtime topology it adopted (the
    Sneakers queues `orders`, `orders-retry`, `orders-error` and their exchanges, still draining), with the shovels
    as the broker stores them and every user."""
    from tools.lib.definitions import export
    from tools.lib.evaluation import evaluate

    recording = evaluate(stack, project).recording
    definitions = export(recording).definitions
    definitions["vhosts"].append({"name": "shop"})  # `existing: true`: the broker's, never the stack's
    runtime = {"orders": {"x-dead-letter-exchange": "orders-retry"},
               "orders-retry": {"x-dead-letter-exchange": "orders-retry-requeue", "x-message-ttl": 600000},
               "orders-error": {}}
    definitions["queues"] += [{"name": name, "vhost": "shop", "durable": True, "auto_delete": False,
                               "arguments": arguments} for name, arguments in runtime.items()]
    definitions["exchanges"] += [{"name": name, "vhost": "shop", "type": "topic", "durable": True,
                                  "auto_delete": False, "internal": False, "arguments": {}}
                                 for name in ("orders-retry", "orders-retry-requeue", "orders-error")]
    old_bindings = (("orders-retry", "orders-retry"), ("orders-error", "orders-error"),
                    ("orders-retry-requeue", "orders"))
    definitions["bindings"] += [{"source": source, "vhost": "shop", "destination": queue, "destination_type": "queue",
                                 "routing_key": "#", "arguments": {}} for source, queue in old_bindings]
    definitions["parameters"] += [
        {"vhost": "shop", "component": "shovel", "name": name,
         "value": {"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": source, "dest-queue": target,
                   "ack-mode": "on-confirm", "src-delete-after": "never"}}
        for name, source, target in (("rabbitmq-retry.migrate.adopt-orders", "orders", "orders.v2"),
                                     ("rabbitmq-retry.migrate.adopt-orders.error", "orders-error", "orders.v2.error"))]
    return definitions


def test_what_a_migration_still_drains_is_expected_and_its_shovels_and_user_are_compared(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = _adopted_stack(project)
    definitions = _broker_after_step_move(project, stack)
    shovels = [p["name"] for p in definitions["parameters"] if p["component"] == "shovel"]
    assert any(u["name"].startswith("rabbitmq-retry-shovel") for u in definitions["users"])

    def drift(edited: dict[str, Any]) -> tuple[int, str]:
        path = project / "broker.json"
        path.write_text(json.dumps(edited))
        status = drift_command.main(["--stack", stack, "--root", str(project), "--definitions", str(path)])
        return status, capsys.readouterr().out

    status, report = drift(definitions)
    assert status == 0, report
    assert "**In sync**" in report
    assert "Still draining, expected until their migration's step retire" in report
    assert "`shop/orders`, `shop/orders-error`, `shop/orders-retry`" in report

    without_shovel = {**definitions, "parameters": [p for p in definitions["parameters"] if p["name"] != shovels[0]]}
    status, report = drift(without_shovel)
    assert status == 2 and f"| shop | Shovel | {shovels[0]} |" in report.split("## Missing", 1)[1]

    stray = {"vhost": "shop", "component": "shovel", "name": "by-hand", "value": {"src-queue": "orders",
                                                                                "dest-queue": "elsewhere"}}
    status, report = drift({**definitions, "parameters": [*definitions["parameters"], stray]})
    assert status == 2 and "| shop | Shovel | by-hand | orders → elsewhere |" in report.split("## Extra", 1)[1]

    moved = [{**p, "value": {**p["value"], "dest-queue": "elsewhere"}} if p["name"] == shovels[0] else p
             for p in definitions["parameters"]]
    status, report = drift({**definitions, "parameters": moved})
    assert status == 2 and f"| shop | Shovel | {shovels[0]} | src-queue, dest-queue: stack orders → orders.v2, " \
        "broker orders → elsewhere |" in report.split("## Different, immutable", 1)[1]

    users = [u for u in definitions["users"] if not u["name"].startswith("rabbitmq-retry-shovel")]
    status, report = drift({**definitions, "users": users})
    assert status == 2 and "| shop | User | rabbitmq-retry-shovel" in report.split("## Missing", 1)[1]


def test_at_step_retire_the_old_objects_are_extra_until_make_migrate_retire_removes_them(project: Path) -> None:
    definitions = _broker_after_step_move(project, _adopted_stack(project))
    _adopted_stack(project, "retire")
    path = project / "broker.json"
    path.write_text(json.dumps({**definitions, "parameters": []}))
    assert drift_command.main(["--stack", "moving", "--root", str(project), "--definitions", str(path)]) == 2


def test_the_report_lists_rows_in_a_fixed_order_whatever_order_the_program_registered_in() -> None:
    """The program registers its resources in no fixed order; the same broker reports the same bytes."""
    absent = Snapshot("shop", "test", exists=False)
    records = record(lambda: Vhost("shop", {"vhost": {**CONFIG, "existing": False}}))
    forward = render("s", findings(records, {"shop": absent}), {"shop": absent})
    backward = render("s", findings(records[::-1], {"shop": absent}), {"shop": absent})
    assert forward == backward
    rows = [line for line in forward.splitlines() if line.startswith("| shop |")]
    assert rows[0].startswith("| shop | VHost | shop |") and len(rows) > 3


def test_what_the_stack_cannot_own_in_a_referenced_vhost_is_expected_not_drift() -> None:
    """Queues an application declares at use and that delete themselves (Laravel's `Q.delay.<ms>`), with their
    bindings, and exchange-to-exchange bindings: `make adopt` leaves them alone, and drift lists them apart."""
    base = _in_sync()
    delay = {"name": "orders.delay.5000", "durable": True, "auto_delete": False, "arguments": {
        "x-expires": 15000, "x-message-ttl": 5000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "audit"}}
    snapshot = _in_sync(queues={**base.queues, "orders.delay.5000": delay},
                        exchanges={**base.exchanges, "events": {"name": "events", "type": "topic", "durable": True}},
                        bindings=[*base.bindings,
                                  {"source": "orders", "destination": "orders.delay.5000", "destination_type": "queue",
                                   "routing_key": "delay", "arguments": {}},
                                  {"source": "events", "destination": "orders", "destination_type": "exchange",
                                   "routing_key": "#", "arguments": {}}])
    found = findings(_records(), {"shop": snapshot})
    assert {(f.kind, f.type, f.name) for f in found} == {
        ("expected", "Queue", "orders.delay.5000"), ("expected", "Binding", "orders → orders.delay.5000 ('delay')"),
        ("expected", "Binding", "events → orders ('#')"), ("extra", "Exchange", "events")}
    assert [f.name for f in drifted(found)] == ["events"]
    [queue] = [f for f in found if f.type == "Queue"]
    assert queue.detail.startswith("deletes itself when unused (x-expires 15s)")
    in_sync = [f for f in found if f.kind == "expected"]
    assert "**In sync**" in render("s", in_sync, {"shop": snapshot}) and "## Expected, not drift" in render(
        "s", in_sync, {"shop": snapshot})


def test_drift_as_json_follows_its_schema(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edited = _export(project / "edited.json", _in_sync(policies={}))
    assert drift_command.main(["--stack", "s", "--root", str(project), "--definitions", str(edited),
                               "--format", "json"]) == 2
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, json.loads((ROOT / "docs/schemas/drift.schema.json").read_text()))
    assert report["status"] == 2 and report["vhosts"] == ["shop"]
    assert {"kind": "missing", "vhost": "shop", "type": "Policy", "name": "cap"} in [
        {k: f[k] for k in ("kind", "vhost", "type", "name")} for f in report["findings"]]


def test_drift_json_schema_takes_expected_findings_which_are_not_drift() -> None:
    """An expected finding is in the JSON with its kind, and `status` (the exit status) stays 0."""
    expected = [Finding("expected", "shop", "Queue", "orders.delay.5000", "deletes itself when unused (x-expires 15s)")]
    schema = json.loads((ROOT / "docs/schemas/drift.schema.json").read_text())
    jsonschema.validate({"schema_version": 1, "stack": "s", "status": 0, "vhosts": ["shop"],
                         "findings": [asdict(f) for f in expected], "still_draining": []}, schema)
    assert drifted(expected) == []
