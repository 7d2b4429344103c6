"""Alerting rules derived from the plan (components/plan/alert_rules.py): every retryable queue gets its rules, the
`alerts` blocks are strict, and Prometheus's own `promtool` accepts every generated file (`check rules`) and evaluates
each rule kind as meant on synthetic series, firing and not firing (`test rules`)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config.load import load_stack_config
from components.model.alerts import RULE_KINDS
from components.plan.alert_rules import prometheus_rule, rule_file, rules_by_key, stack_rules
from components.pulumi.stack_resources import plan_stack
from tests.conftest import ROOT
from tests.support.environment import missing
from tests.support.problems import config_problems
from tools.lib.evaluation import evaluate

STACKS = {"dev": ROOT, "prod": ROOT, "every": ROOT / "tests" / "recordings"}


def rules_of(raw: dict[str, Any], stack: str = "test") -> dict[str, Any]:
    config = load_stack_config(raw)
    return rule_file(stack_rules(stack, config.alerts, [p for _, p in plan_stack(config, "shovel")]))


def stack(**alerts: Any) -> dict[str, Any]:
    """A vhost with a `tiers` quorum queue, a `levels` one and its delay levels, and a plain queue."""
    return {"defaults": {"queue_type": "quorum"}, **({"alerts": alerts} if alerts else {}), "vhosts": [{
        "name": "shop", "exchanges": [{"name": "events", "type": "topic"}],
        "delay_levels": {"unit": "1s", "max_delay": "4s"},
        "applications": [{"user": "billing-app", "consumes": ["orders"]}],
        "queues": [
            {"name": "orders", "bindings": [{"exchange": "events", "routing_key": "o"}],
             "retry": {"delays": ["1s", "10s"], "max_retries": 3}},
            {"name": "invoices", "bindings": [{"exchange": "events", "routing_key": "i"}], "quorum_group_size": 3,
             "retry": {"strategy": "levels", "backoff": {"initial": "1s", "multiplier": 2, "max": "4s"},
                       "max_retries": 3}},
            {"name": "audit", "bindings": [{"exchange": "events", "routing_key": "#"}]}]}]}


def kinds(rules: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            found.setdefault(rule["labels"]["rabbitmq_retry_rule"], []).append(rule)
    return found


# --- derived from the plan ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_retryable_queue_of_the_plan_has_its_rules(name: str) -> None:
    config = evaluate(name, STACKS[name]).settings.config
    plans = [p for _, p in plan_stack(config, "shovel")]
    rules = rules_by_key(rule_file(stack_rules(name, config.alerts, plans)))
    for plan in plans:
        for retryable in plan.retryables:
            where = f"{plan.config.name}/{retryable.config.name}"
            for kind in ("parked", "error_growing", "no_consumer"):
                assert f"{kind} {where}" in rules
            for tier in (*retryable.tiers, *retryable.draining):
                assert f"not_draining {where}/{tier.queue}" in rules
            assert (f"no_leader {where}" in rules) == (retryable.config.queue_type == "quorum")
            assert (f"members_offline {where}" in rules) == (retryable.config.queue_type == "quorum")
            for watched in (retryable.config.name, *(t.queue for t in (*retryable.tiers, *retryable.draining))):
                assert (f"dead_letters_jammed {where}/{watched}" in rules) == (retryable.config.queue_type == "quorum")
        if plan.delay_levels is not None:
            for queue in plan.delay_levels.level_queues:
                assert f"not_draining {plan.config.name}//{queue.name}" in rules
    assert {r["labels"]["stack"] for r in rules.values()} == {name}


def test_each_rule_names_its_queue_strategy_and_what_to_run() -> None:
    found = kinds(rules_of(stack()))
    assert set(found) == set(RULE_KINDS)
    parked = next(r for r in found["parked"] if r["labels"]["queue"] == "orders")
    assert parked["labels"] == {"severity": "warning", "stack": "test", "vhost": "shop", "queue": "orders",
                                "strategy": "tiers", "rabbitmq_retry_rule": "parked"}
    assert parked["expr"] == 'rabbitmq_detailed_queue_messages{vhost="shop", queue="orders.error"} > 0'
    assert parked["annotations"]["command"].startswith("rabbitmq-retry parked list --stack test --vhost shop "
                                                       "--queue orders;")
    # Without the Pulumi CLI: the file `make contracts` writes, in the same commands.
    assert parked["annotations"]["command_contract"] == (
        "make contracts STACK=test; rabbitmq-retry parked list --contract contracts.test.json --vhost shop --queue "
        "orders; fix the cause, then rabbitmq-retry parked redrive --contract contracts.test.json --vhost shop "
        "--queue orders")
    draining = next(r for r in found["not_draining"] if r["labels"]["watched_queue"] == "orders.wait.1")
    assert draining["annotations"]["command"].endswith(
        "rabbitmq-retry stuck redrive --stack test --vhost shop --queue orders --tier orders.wait.1")
    assert "--contract contracts.test.json" in draining["annotations"]["command_contract"]
    consumer = next(r for r in found["no_consumer"] if r["labels"]["queue"] == "orders")
    assert "billing-app" in consumer["annotations"]["command"]
    assert {r["labels"]["strategy"] for r in found["parked"]} == {"tiers", "levels"}


def test_a_native_queue_leaves_out_the_delivery_limit_rule_it_would_trip() -> None:
    raw = stack()
    raw["vhosts"][0]["queues"].append({"name": "push", "bindings": [{"exchange": "events", "routing_key": "p"}],
                                       "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "5s",
                                                 "max_retries": 3}})
    found = kinds(rules_of(raw))
    assert "delivery_limit" not in found
    assert any(r["labels"]["queue"] == "push" for r in found["parked"])
    assert not any(r["labels"].get("queue") == "push" for r in found["not_draining"])


def test_names_are_escaped_in_promql() -> None:
    raw = stack()
    raw["vhosts"][0]["name"] = 'we"ird\\vhost'
    rule = kinds(rules_of(raw))["parked"][0]
    assert 'vhost="we\\"ird\\\\vhost"' in rule["expr"]


def test_settings_override_stack_then_vhost_then_queue_and_labels_add_up() -> None:
    raw = stack(labels={"team": "platform"}, selector={"cluster": "prod"},
                parked={"for": "10m", "severity": "critical"}, no_consumer={"enabled": False},
                dead_lettered_to_nowhere={"window": "1h", "threshold": 5})
    raw["vhosts"][0]["alerts"] = {"labels": {"team": "shop"}, "parked": {"threshold": 3},
                                  "no_leader": {"enabled": False}}
    raw["vhosts"][0]["queues"][0]["alerts"] = {"parked": {"for": "0s", "labels": {"page": "yes"}},
                                               "no_consumer": {"enabled": True}}
    found = kinds(rules_of(raw))
    orders = next(r for r in found["parked"] if r["labels"]["queue"] == "orders")
    invoices = next(r for r in found["parked"] if r["labels"]["queue"] == "invoices")
    assert "for" not in orders and invoices["for"] == "10m"
    assert orders["labels"]["team"] == "shop" and orders["labels"]["page"] == "yes"
    assert orders["labels"]["severity"] == "critical"
    assert orders["expr"].endswith("} > 3") and 'cluster="prod"' in orders["expr"]
    assert [r["labels"]["queue"] for r in found["no_consumer"]] == ["orders"]
    assert "no_leader" not in found
    dropped = found["dead_lettered_to_nowhere"][0]
    assert "[1h]" in dropped["expr"] and dropped["expr"].endswith("> 5") and dropped["labels"]["team"] == "platform"


def test_a_stack_without_alerts_keys_keeps_its_config_unchanged() -> None:
    assert load_stack_config(stack()).alerts is None


@pytest.mark.parametrize(("alerts", "vhost", "queue", "expected"), [
    ({"parkd": {}}, None, None, [("alerts.parkd", 'unknown key; did you mean "parked"?')]),
    ({"parked": {"for": "soon"}}, None, None, [("alerts.parked.for", '"soon" is not a duration')]),
    ({"parked": {"severity": "page"}}, None, None, [("alerts.parked.severity", "'page' is not one of critical")]),
    ({"no_leader": {"threshold": 1}}, None, None, [("alerts.no_leader.threshold", "unknown key")]),
    ({"labels": {"severity": "x"}}, None, None, [("alerts.labels.severity", "every rule sets the label")]),
    ({"labels": {"9team": "x"}}, None, None, [("alerts.labels.9team", "is not a Prometheus label name")]),
    ({"labels": {"team": 3}}, None, None, [("alerts.labels.team", "expected a string, got int")]),
    ({"metrics": "all"}, None, None, [("alerts.metrics", "'all' is not one of detailed, per_object")]),
    ({"selector": {"queue": "x"}}, None, None, [("alerts.selector.queue", "cannot select the broker")]),
    ({"error_growing": {"window": "0s"}}, None, None, [("alerts.error_growing.window", '"0s" is out of range')]),
    (None, {"delivery_limit": {}}, None, [("vhosts[shop].alerts.delivery_limit",
                                           "a stack rule: set it in the stack's")]),
    (None, None, {"undeliverable": {}}, [("vhosts[shop].queues[orders].alerts.undeliverable", "a vhost rule")]),
    (None, None, {"parked": {"enabled": "no"}}, [("vhosts[shop].queues[orders].alerts.parked.enabled",
                                                   "expected true or false")]),
    (None, None, "off", [("vhosts[shop].queues[orders].alerts", "expected a mapping, got str")]),
])
def test_each_mistake_is_a_key_path_problem(alerts: Any, vhost: Any, queue: Any,
                                            expected: list[tuple[str, str]]) -> None:
    raw = stack(**alerts) if alerts else stack()
    if vhost is not None:
        raw["vhosts"][0]["alerts"] = vhost
    if queue is not None:
        raw["vhosts"][0]["queues"][0]["alerts"] = queue
    problems = config_problems(raw)
    assert [path for path, _ in problems] == [path for path, _ in expected], problems
    for (_, message), (_, start) in zip(problems, expected, strict=True):
        assert start in message, message


def test_alerts_on_a_plain_queue_are_refused() -> None:
    raw = stack()
    raw["vhosts"][0]["queues"][2]["alerts"] = {"parked": {}}
    assert config_problems(raw) == [("vhosts[shop].queues[audit].alerts", "alerts are derived for retryable queues "
                                                                          "only: this "
                                 "queue has no `retry` block; remove the key")]


def test_the_tool_writes_what_the_program_exports(tmp_path: Path) -> None:
    """`make alerts` and the stack output `alert_rules` come from the same functions over the same plans."""
    from tools.alerts import main

    assert main(["--stack", "dev", "--output", str(tmp_path / "a.yml")]) == 0
    written = yaml.safe_load((tmp_path / "a.yml").read_text(encoding="utf-8"))
    assert written == evaluate("dev", ROOT).alert_rules
    assert main(["--stack", "dev", "--format", "prometheus-rule", "--output", str(tmp_path / "k.yml")]) == 0
    manifest = yaml.safe_load((tmp_path / "k.yml").read_text(encoding="utf-8"))
    assert manifest == prometheus_rule("dev", written)
    assert manifest["kind"] == "PrometheusRule" and manifest["metadata"]["name"] == "rabbitmq-retry-dev"


def test_the_program_exports_them_as_alert_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack output `alert_rules` is what `make alerts` writes (the mocks record no stack export: caught here)."""
    import pulumi

    from tools.lib.mockrun import close_event_loop, record_program

    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    try:
        record_program("prod", ROOT)
    finally:
        close_event_loop()
    assert exported["alert_rules"] == evaluate("prod", ROOT).alert_rules
    assert set(exported) == {"retry_contracts", "alert_rules"}


# --- promtool -----------------------------------------------------------------------------------------------------

def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing("promtool is not installed (scripts/prometheus.sh install)")
    return found


def run_promtool(*args: str) -> str:
    result = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("name", sorted(STACKS))
def test_promtool_accepts_every_generated_file(name: str, tmp_path: Path) -> None:
    rules = evaluate(name, STACKS[name]).alert_rules
    assert rules is not None
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    count = sum(len(g["rules"]) for g in rules["groups"])
    assert f"SUCCESS: {count} rules found" in run_promtool("check", "rules", str(path))
    spec = tmp_path / "spec.yml"  # what a PrometheusRule hands the operator's Prometheus
    spec.write_text(yaml.safe_dump(prometheus_rule(name, rules)["spec"], sort_keys=False), encoding="utf-8")
    run_promtool("check", "rules", str(spec))


def _annotations(rule: dict[str, Any], value: str, **labels: str) -> dict[str, str]:
    out = {}
    for key, text in rule["annotations"].items():
        text = text.replace("{{ $value }}", value)
        for name, label in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", label)
        out[key] = text
    return out


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def test_promtool_evaluates_every_rule_kind_firing_and_not_firing(tmp_path: Path) -> None:
    """Synthetic series for each rule kind at the defaults: one queue where the condition holds (the alert fires,
    with exactly these labels and annotations), one where it does not."""
    rules = rules_of(stack())
    found = kinds(rules)
    by = {(r["labels"]["rabbitmq_retry_rule"],
           r["labels"].get("watched_queue", r["labels"].get("queue", r["labels"].get("reason", "")))): r
          for r in (rule for group in rules["groups"] for rule in group["rules"])}
    inst = {"instance": "broker:15692", "job": "rabbitmq"}
    m = "rabbitmq_detailed_queue_"
    tests = []

    def case(series: list[dict[str, str]], at: str, kind: str, where: str, fired: list[tuple[dict[str, str], str]],
             **annotation_labels: str) -> None:
        rule = by[(kind, where)]
        tests.append({"interval": "1m", "input_series": series, "alert_rule_test": [{
            "eval_time": at, "alertname": rule["alert"],
            "exp_alerts": [{"exp_labels": {**labels, **rule["labels"]},
                            "exp_annotations": _annotations(rule, value, **annotation_labels)}
                           for labels, value in fired]}]})

    q = {"vhost": "shop"}
    # parked: orders.error holds 2 from minute 1 on (fires after its 1m `for`); invoices.error stays empty.
    case([_series(f"{m}messages", "0 2 2 2 2", queue="orders.error", **q, **inst),
          _series(f"{m}messages", "0 0 0 0 0", queue="invoices.error", **q, **inst)],
         "4m", "parked", "orders", [({**inst, **q, "queue": "orders"}, "2")])
    case([_series(f"{m}messages", "0 0 0 0 0", queue="invoices.error", **q, **inst)], "4m", "parked", "invoices", [])
    # error_growing: 20 more parked within 15m fires; 5 more does not.
    case([_series(f"{m}messages", "0+1x20", queue="orders.error", **q, **inst)], "20m", "error_growing", "orders",
         [({**inst, **q, "queue": "orders"}, "15")])
    case([_series(f"{m}messages", "0 1 2 3 4 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5", queue="invoices.error", **q, **inst)],
         "19m", "error_growing", "invoices", [])
    # no_consumer: 5 ready and no consumer for 10m fires; with a consumer it does not.
    case([_series(f"{m}messages_ready", "5x10", queue="orders", **q, **inst),
          _series(f"{m}consumers", "0x10", queue="orders", **q, **inst)], "10m", "no_consumer", "orders",
         [({**inst, **q, "queue": "orders"}, "5")])
    case([_series(f"{m}messages_ready", "5x10", queue="invoices", **q, **inst),
          _series(f"{m}consumers", "1x10", queue="invoices", **q, **inst)], "10m", "no_consumer", "invoices", [])
    # not_draining: a tier that holds 3 all along fires; one that goes down now and then does not.
    case([_series(f"{m}messages", "3x15", queue="orders.wait.1", **q, **inst)], "15m", "not_draining",
         "orders.wait.1", [({**inst, **q, "queue": "orders", "watched_queue": "orders.wait.1"}, "3")])
    case([_series(f"{m}messages", "3 2 3 2 3 2 3 2 3 2 3 2 3 2 3 2", queue="orders.wait.2", **q, **inst)], "15m",
         "not_draining", "orders.wait.2", [])
    level = found["not_draining"][-1]["labels"]["watched_queue"]
    case([_series(f"{m}messages", "1x15", queue=level, **q, **inst)], "15m", "not_draining", level,
         [({**inst, **q, "queue": level, "watched_queue": level}, "1")])
    # no_leader: no node reports orders (fires, labels from its matchers); invoices is reported.
    case([_series(f"{m}messages", "0x5", queue="invoices", **q, **inst)], "5m", "no_leader", "orders",
         [({**q, "queue": "orders"}, "1")])
    case([_series(f"{m}messages", "0x5", queue=name, **q, **inst) for name in ("orders", "invoices")], "5m",
         "no_leader", "invoices", [])
    # members_offline: orders (no group size) had 3 members reporting and has 2 now (fires); invoices
    # (quorum_group_size 3) keeps its 3. 3.10 names the series raft_term_total, 4.x raft_term.
    raft, raft4 = "rabbitmq_detailed_raft_term_total", "rabbitmq_detailed_raft_term"
    nodes = [{"instance": f"node{n}:15692", "job": "rabbitmq-detailed"} for n in (1, 2, 3)]
    case([_series(raft, "1x10", queue="orders", **q, **nodes[0]),
          _series(raft, "1x10", queue="orders", **q, **nodes[1]),
          _series(raft, "1 1 1 1 _ _ _ _ _ _ _", queue="orders", **q, **nodes[2])], "10m", "members_offline",
         "orders", [({**q, "queue": "orders"}, "2")])
    case([_series(raft4, "2x10", queue="invoices", **q, **node) for node in nodes], "10m", "members_offline",
         "invoices", [])
    case([_series(raft4, "2x10", queue="invoices", **q, **node) for node in nodes[:2]], "10m", "members_offline",
         "invoices", [({**q, "queue": "invoices"}, "2")])
    # dead_letters_jammed: a quorum queue holding more than it has ready or unacknowledged (dead-letters its
    # at-least-once worker cannot forward) fires; one whose messages are all ready does not.
    jammed = next(r["labels"] for r in found["dead_letters_jammed"])
    held = {"messages": "3x5", "messages_ready": "2x5", "messages_unacked": "0x5"}
    case([_series(f"{m}{metric}", values, queue=jammed["watched_queue"], **q, **inst)
          for metric, values in held.items()], "5m", "dead_letters_jammed", jammed["watched_queue"],
         [({**q, "queue": jammed["queue"], "watched_queue": jammed["watched_queue"]}, "1")])
    case([_series(f"{m}{metric}", "2x5", queue=jammed["watched_queue"], **q, **inst)
          for metric in ("messages", "messages_ready")]
         + [_series(f"{m}messages_unacked", "0x5", queue=jammed["watched_queue"], **q, **inst)], "5m",
         "dead_letters_jammed", jammed["watched_queue"], [])
    # undeliverable: a copy in the undeliverable queue fires; an empty one does not.
    undeliverable = found["undeliverable"][0]["labels"]["watched_queue"]
    case([_series(f"{m}messages", "0 1 1 1", queue=undeliverable, **q, **inst)], "3m", "undeliverable",
         undeliverable, [({**inst, **q, "queue": undeliverable, "watched_queue": undeliverable}, "1")])
    # dead_lettered_to_nowhere: dropped (strategy disabled) fires; at-least-once dead-lettering does not.
    qq = {"queue_type": "rabbit_quorum_queue"}
    case([_series("rabbitmq_global_messages_dead_lettered_expired_total", "0+2x10", dead_letter_strategy="disabled",
                  **qq, **inst),
          _series("rabbitmq_global_messages_dead_lettered_rejected_total", "0+5x10",
                  dead_letter_strategy="at_least_once", **qq, **inst)], "10m", "dead_lettered_to_nowhere", "expired",
         [({"instance": inst["instance"], **qq}, "10")], instance=inst["instance"], **qq)
    # delivery_limit: quorum messages over their limit fire; classic ones (no such limit) are not counted.
    case([_series("rabbitmq_global_messages_dead_lettered_delivery_limit_total", "0+1x10",
                  dead_letter_strategy="at_least_once", **qq, **inst)], "10m", "delivery_limit", "",
         [({"instance": inst["instance"], "dead_letter_strategy": "at_least_once"}, "5")],
         instance=inst["instance"], dead_letter_strategy="at_least_once")
    case([_series("rabbitmq_global_messages_dead_lettered_delivery_limit_total", "0x10",
                  dead_letter_strategy="at_least_once", **qq, **inst)], "10m", "delivery_limit", "", [])
    assert {t["alert_rule_test"][0]["alertname"] for t in tests} == {k.alert for k in RULE_KINDS.values()}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": copy.deepcopy(tests)}, sort_keys=False),
                                        encoding="utf-8")
    out = run_promtool("test", "rules", str(tmp_path / "tests.yml"))
    assert "SUCCESS" in out, out


def test_the_documented_scrape_config_is_the_one_the_tests_run_prometheus_with() -> None:
    """docs/alerts.md's block and `scripts/prometheus.sh print-config` agree on everything but the targets and the
    rule files: the intervals every timing of the page assumes, each job's path and its families (`ra_metrics`,
    which `members_offline` reads)."""
    page = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    section = page.split("## Pointing Prometheus at RabbitMQ", 1)[1]
    documented = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    script = subprocess.run([str(ROOT / "scripts" / "prometheus.sh"), "print-config"], capture_output=True,
                            text=True, check=True, timeout=30).stdout
    tested = yaml.safe_load(script)

    def jobs(config: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in job.items() if k != "static_configs"} for job in config["scrape_configs"]]

    assert documented["global"] == tested["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s",
                                                        "evaluation_interval": "2s"}
    assert jobs(documented) == jobs(tested)
    assert "ra_metrics" in tested["scrape_configs"][1]["params"]["family"]
