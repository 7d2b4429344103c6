"""`make review`: pairs of stack configs → the review a pull request would get (steps, risks, diagram,
exit status); the permission-widening rule on hand-made recordings; and the CLI end to end in a git repo."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.lib import engine, review, risk
from tools.lib.diagram import CHANGED_STYLE, REMOVED_STYLE
from tools.lib.evaluation import Evaluation, evaluate, finish, start
from tools.lib.inventory import VHOST_COMPONENT
from tools.lib.mockrun import ROOT, Registered, record_program
from tools.lib.planned import Allowed, Planned, planned_from
from tools.lib.review.grouping import grouped_rows
from tools.lib.review.rows import Model, Row

STACK = "review"
BASE: dict[str, Any] = {
    "defaults": {"queue_type": "classic"},
    "vhosts": [{
        "name": "shop",
        "exchanges": [{"name": "events", "type": "topic"}],
        "queues": [
            {"name": "orders", "bindings": [{"exchange": "events", "routing_key": "order.created"}],
             "retry": {"delays": ["1s", "10s", "1m"], "max_retries": 5}},
            {"name": "audit", "bindings": [{"exchange": "events", "routing_key": "#"}]},
        ],
    }],
}


def stack_file(config: dict[str, Any]) -> str:
    return yaml.safe_dump({"config": {f"rabbitmq-retry:{key}": value for key, value in config.items()}})


def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    edit(config)
    return config


def orders(config: dict[str, Any]) -> dict[str, Any]:
    return config["vhosts"][0]["queues"][0]


@pytest.fixture
def review_of(program_copy: Path) -> Callable[..., tuple[list[engine.Step], str, int]]:
    """old config, new config → (changed steps but the path guards', the review for a comment, exit status),
    evaluated in-process (`apart`: each in a process of its own, as `make review` does, with the copy's own
    components); `run.full` is then the full report. One stack name for both sides: the stack is part of every URN."""
    def run(old: dict[str, Any], new: dict[str, Any], allow_data_loss: bool = False, apart: bool = False):
        recordings, plans = [], []
        for config in (old, new):
            (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(config))
            evaluated = evaluated_apart(STACK, program_copy) if apart else evaluate(STACK, program_copy)
            recordings.append(evaluated.recording)
            plans.append(evaluated.plan)
        steps = engine.diff(*recordings)
        reviewed = review.render(steps, *recordings, (plans[0], plans[1]), allow_data_loss=allow_data_loss)
        run.full = reviewed.full
        shown = [s for s in steps if s.custom and s.op != "same" and s.type != engine.STASH]
        return shown, reviewed.compact, reviewed.status
    return run


def evaluated_apart(stack: str, root: Path) -> Evaluation:
    """`root` evaluated in a process of its own (`python -m tools.evaluate`), as `make review` evaluates each side."""
    with tempfile.TemporaryFile("w+") as output:
        return finish(start(stack, root, output), output)


def ops(steps: list[engine.Step]) -> set[tuple[str, str, str]]:
    return {(s.op, s.type.rsplit(":", 1)[-1], s.name) for s in steps}


def test_changing_a_delay_is_a_safe_policy_update(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: orders(c)["retry"].update(delays=["1s", "20s", "1m"])))
    assert ops(steps) == {("update", "Policy", "shop-orders-wait-2-policy")}
    assert steps[0].changed == ["policy.definition.message-ttl"] and risk.risk(steps[0]) == risk.SAFE
    assert status == 0
    assert markdown.startswith("**1 to update, 20 unchanged**")
    assert "| update | Policy | `shop-orders-wait-2-policy` | `orders.wait.2` | message-ttl 10000 → 20000 | safe |" \
        in markdown
    assert "- Retry contract: delays 1s, 10s, 1m → 1s, 20s, 1m — `shop` / `orders`" in markdown
    assert "```mermaid" not in markdown  # the path keeps its shape: its diagram is in the full report only
    assert "```mermaid" in review_of.full and f"style wait2 {CHANGED_STYLE}" in review_of.full


def test_adding_a_queue_only_creates(review_of):
    new = changed(lambda c: c["vhosts"][0]["queues"].append(
        {"name": "refunds", "bindings": [{"exchange": "events", "routing_key": "refund.*"}],
         "retry": {"delays": ["5s"]}}))
    steps, markdown, status = review_of(BASE, new)
    assert {s.op for s in steps} == {"create"} and status == 0
    assert {s.new["name"] for s in steps if s.type == engine.QUEUE} == {"refunds", "refunds.wait.1", "refunds.error"}
    assert "#### `shop` / `refunds`" in markdown and "new retryable queue" in markdown
    assert "data loss" not in markdown


def test_removing_a_tier_deletes_its_queue_binding_and_policy(review_of):
    new = changed(lambda c: orders(c)["retry"].update(delays=["1s", "10s"]))
    steps, markdown, status = review_of(BASE, new)
    assert ops(steps) == {("delete", "Queue", "shop-orders-wait-3"), ("delete", "Policy", "shop-orders-wait-3-policy"),
                          ("delete", "Binding", "shop-orders-wait-3-binding")}
    assert status == 2
    assert "**3 to delete, 18 unchanged** — ⚠️ data loss: 1" in markdown
    assert "| delete | Queue | `shop-orders-wait-3` | `orders.wait.3` |  | **data loss** |" in markdown
    assert f"style wait3 {REMOVED_STYLE}" in markdown  # the removed tier stays in the diagram, struck out
    assert "acknowledged" not in markdown

    _, markdown, status = review_of(BASE, new, allow_data_loss=True)
    assert status == 0 and "data loss: 1" in markdown and "Data loss acknowledged" in markdown


def test_renaming_a_retryable_queue_is_a_contract_risk(review_of):
    def renamed(config: dict[str, Any]) -> None:
        orders(config)["name"] = "orders.v2"

    _, markdown, _ = review_of(BASE, changed(renamed))
    assert ("| contract | RetryableQueue | `shop-orders` | `orders` | retryable queue orders removed (renamed to "
            "orders.v2? its contract is gone): consumers still running on it consume a queue that no longer exists "
            "(channel error 404 NOT\\_FOUND) and cannot park to orders.error; move them to the new contract before "
            "this is applied | **contract** |") in markdown, markdown


def test_removing_a_protected_tier_says_pulumi_will_refuse(review_of):
    old = changed(lambda c: c.update(protect=True))
    _, markdown, status = review_of(old, changed(lambda c: (c.update(protect=True),
                                                             orders(c)["retry"].update(delays=["1s"]))))
    assert status == 2 and review_of.full.count("🔒 protected: `pulumi up` will refuse until unprotected") == 2
    assert ("| delete | Queue | 2 queues | in vhost `shop`: `orders.wait.2`, `orders.wait.3` |  | "
            "**data loss** — 🔒 protected: `pulumi up` will refuse until unprotected |") in markdown


def test_a_retained_error_queue_is_not_lost(review_of):
    old = changed(lambda c: c.update(retain_error_queues=True))
    new = changed(lambda c: (c.update(retain_error_queues=True), c["vhosts"][0]["queues"].pop(0)))
    steps, markdown, status = review_of(old, new)
    error_queue = next(s for s in steps if s.name == "shop-orders-error")
    assert error_queue.op == "delete" and risk.risk(error_queue) == risk.SAFE
    assert "retained on the broker" in markdown and status == 2  # the other four queues are lost
    assert "data loss: 4" in markdown


def test_a_type_switch_with_retained_error_queues_is_refused_because_pulumi_up_would_stop_halfway(review_of):
    """A retained queue is not deleted on replace: the same-name quorum create fails with 400 "inequivalent arg"
    after the other queues were replaced (tests/broker/test_retained_error_queues.py)."""
    old = changed(lambda c: c.update(retain_error_queues=True))
    new = changed(lambda c: (c.update(retain_error_queues=True), c["defaults"].update(queue_type="quorum")))
    steps, markdown, status = review_of(old, new, allow_data_loss=True)
    error_queue = next(s for s in steps if s.name == "shop-orders-error")
    assert error_queue.op == "replace" and risk.risk(error_queue) == risk.FAILS
    assert status == 2, "ALLOW_DATA_LOSS must not waive a change that cannot complete"
    assert "⛔ fails: 1" in markdown and "`pulumi up` would stop halfway" in markdown
    assert ('| replace | Queue | `shop-orders-error` | `orders.error` | x-queue-type classic → quorum | **fails** — ⛔ '
            "retained (retain_error_queues): `pulumi up` leaves the old queue in place, then fails to create it again "
            '(400 "inequivalent arg") after replacing the queues before it; first move its parked messages elsewhere '
            "and delete it by hand (`pulumi up` then creates it), or give the queue another name |") in markdown
    _, _, without_retention = review_of(BASE, changed(lambda c: c["defaults"].update(queue_type="quorum")),
                                        allow_data_loss=True)
    assert without_retention == 0


def test_removing_a_vhost_deletes_its_retained_error_queues_with_it(review_of):
    old = changed(lambda c: c.update(retain_error_queues=True))
    new = changed(lambda c: (c.update(retain_error_queues=True), c.update(vhosts=[])))
    steps, markdown, _ = review_of(old, new)
    error_queue = next(s for s in steps if s.name == "shop-orders-error")
    assert error_queue.op == "delete" and risk.risk(error_queue, vhost_deleted=True) == risk.DATA_LOSS
    assert "retained on the broker" not in markdown
    assert ("**data loss** — retain_on_delete cannot keep it: deleting vhost `shop` deletes it with its messages"
            in review_of.full)


def test_switching_to_quorum_replaces_every_queue(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: c["defaults"].update(queue_type="quorum")))
    replaced = {s.new["name"] for s in steps if s.type == engine.QUEUE and s.op == "replace"}
    assert replaced == {"orders", "orders.wait.1", "orders.wait.2", "orders.wait.3", "orders.error", "audit"}
    assert status == 2 and "data loss: 6" in markdown
    assert "x-queue-type classic → quorum" in markdown
    assert "replaced by `shop-orders-input`" in markdown  # bindings are dragged along (replaced because it is)
    assert "Retry contract: delivery\\_limit (unset) → 25; queue\\_type classic → quorum" in markdown


def test_under_retry_paths_diagrams_alone_follow_the_heading_after_one_blank_line(review_of):
    _, markdown, _ = review_of(BASE, changed(lambda c: c["defaults"].update(queue_type="quorum")))
    assert "### Retry paths\n\nDiagrams of the retry paths whose shape or risk changed" in markdown
    assert "\n\n\n" not in markdown


def test_under_retry_paths_contract_lines_then_diagrams_are_one_blank_line_apart(review_of):
    def edit(c: dict[str, Any]) -> None:
        orders(c)["retry"]["delays"] = ["1s", "20s", "1m"]
        c["vhosts"][0]["queues"].append({"name": "payments", "retry": {"delays": ["5s"]}})
    _, markdown, _ = review_of(BASE, changed(edit))
    assert ("### Retry paths\n\n- Retry contract: delays 1s, 10s, 1m → 1s, 20s, 1m — `shop` / `orders`\n\n"
            "Diagrams of the retry paths") in markdown
    assert "\n\n\n" not in markdown


def test_the_grouping_note_explains_the_star_only_when_a_row_shows_one(review_of):
    """The rows at risk are grouped (`orders`' queues; `orders.error` with `audit`), by their own names only."""
    _, markdown, _ = review_of(BASE, changed(lambda c: c["defaults"].update(queue_type="quorum")))
    assert "| replace | Queue | 4 queues | in vhost `shop`: `orders`, `orders.wait.1`, " in markdown
    assert markdown.endswith("\n\n_Identical changes are grouped; the full report (`--output-full`, in CI the "
                             "artifact `review-<stack>-full`) lists every change and diagram._")


def test_a_group_whose_star_is_in_what_changed_alone_is_marked_for_the_note():
    """Two removed retryable queues: "the queue of 2 retryable queues" names no `*`, what changed does."""
    def removed(queue: str) -> Row:
        return Row(risk.CONTRACT, "contract", "RetryableQueue", f"shop-{queue}", queue,
                   f"retryable queue {queue} removed", "", "shop", ("shop", queue), "*",
                   "retryable queue \\* removed", alike_relative=True)
    (line,) = grouped_rows(Model([], Counter(), ({}, {}), {}, {}, {}, {}, []), [removed("orders"), removed("payments")])
    assert "`shop`: the queue of 2 retryable queues: `orders`, `payments` | retryable queue \\* removed |" in line.text
    assert line.stars


def test_renaming_a_queue_deletes_the_old_and_creates_the_new(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: orders(c).update(name="invoices")))
    queues = {(s.op, (s.new or s.old or {})["name"]) for s in steps if s.type == engine.QUEUE}
    assert {q for op, q in queues if op == "delete"} == {"orders", "orders.wait.1", "orders.wait.2", "orders.wait.3",
                                                        "orders.error"}
    assert {q for op, q in queues if op == "create"} == {"invoices", "invoices.wait.1", "invoices.wait.2",
                                                        "invoices.wait.3", "invoices.error"}
    assert status == 2 and "data loss: 5" in markdown
    assert "#### `shop` / `orders`" in markdown and "retryable queue removed" in markdown
    assert "#### `shop` / `invoices`" in markdown


def test_max_retries_changes_only_the_contract(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: orders(c)["retry"].update(max_retries=7)))
    assert steps == [] and status == 0
    assert "- Retry contract: max\\_retries 5 → 7 — `shop` / `orders`" in markdown
    assert "```mermaid" not in markdown and "after 7 retries" in review_of.full


def test_no_change(review_of):
    steps, markdown, status = review_of(BASE, BASE)
    assert steps == [] and status == 0 and markdown == "**No changes** — 21 unchanged."


def permissions(read: str, configure: str = "^$", user: str = "billing") -> Registered:
    return Registered(
        urn=f"urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/permissions:Permissions::{user}-shop",
        type=engine.PERMISSIONS, name=f"{user}-shop", custom=True, parent=None,
        inputs={"user": user, "vhost": "shop", "permissions": {"configure": configure, "write": "^a$", "read": read}})


def granted(record: Registered, read: tuple[str, ...] | None, read_regex: str | None = None) -> dict[str, Planned]:
    """The plan index of `permissions(…)`: the names its plan says its read allows (None: a pattern); configure and
    write as `permissions` registers them. `read_regex`: the regex the plan built, when not the one registered."""
    inputs = record.inputs["permissions"]
    return {record.urn: Planned("Permissions", "shop", None, None, None, "", (
        Allowed(None, "configure", inputs["configure"], () if inputs["configure"] == "^$" else None),
        Allowed(None, "write", "^a$", ("a",)),
        Allowed(None, "read", inputs["read"] if read_regex is None else read_regex, read)))}


@pytest.mark.parametrize(("before", "before_names", "after", "after_names", "expected"), [
    ("^(a)$", ("a",), "^(a|b)$", ("a", "b"), risk.ACCESS),
    ("^$", (), "^(a)$", ("a",), risk.ACCESS),
    ("^(a|b)$", ("a", "b"), "^(a)$", ("a",), risk.SAFE),
    ("^(a)$", ("a",), "^$", (), risk.SAFE),
    ("^(a|b)$", ("a", "b"), "^(b|c)$", ("b", "c"), risk.ACCESS),
    (".*", None, "^(orders)$", ("orders",), risk.ACCESS),  # a narrowing, but of a pattern: not one we can prove
    ("^a.*$", None, "^ab.*$", None, risk.ACCESS),
])
def test_widening_a_permission_is_access(before, before_names, after, after_names, expected):
    """Judged by the names each side's plan says its regex allows."""
    old, new = permissions(before), permissions(after)
    plans = (granted(old, before_names), granted(new, after_names))
    steps = engine.diff([old], [new])
    assert [s.op for s in steps] == ["update"]
    assert risk.risk(steps[0], sides=(plans[0][old.urn], plans[1][new.urn])) == expected
    reviewed = review.render(steps, [old], [new], plans)
    markdown, status = reviewed.compact, reviewed.status
    assert status == 0 and (f"**{risk.ACCESS}**" in markdown) == (expected == risk.ACCESS)


@pytest.mark.parametrize(("before", "after"), [
    ("^(a|b)$", "^(a)$"),  # a narrowing of two lists of names, but no plan says they are
    (".*", "^(orders)$"),
    ("^a$", ""),  # "" matches nothing in RabbitMQ
    ("", "^$"),  # ^$ matches the default exchange
])
def test_without_a_plan_entry_any_change_of_a_regex_widens_and_shows_both_regexes(before, after):
    """A grant the plan index does not know (the recording has it, the plan does not): no regex is read back into
    names, so every change is access, and the row shows both regexes."""
    old, new = permissions(before), permissions(after)
    steps = engine.diff([old], [new])
    assert risk.risk(steps[0]) == risk.ACCESS
    compact = review.render(steps, [old], [new], ({}, {})).compact
    (row,) = [line for line in compact.splitlines() if line.startswith("| update | Permissions |")]
    assert "| **access** |" in row and "read " in row and " → " in row and "+ " not in row, row


def test_the_names_of_a_grant_are_the_plan_s_not_read_from_its_regex():
    """The review says what the plan granted: names the plan gives for the very regex registered (here deliberately
    unlike the regex, which no reader of regexes would find), and none for a regex other than the one it built."""
    old, new = permissions("^(a|b)$"), permissions("^(a)$")
    steps = engine.diff([old], [new])
    compact = review.render(steps, [old], [new], (granted(old, ("x", "y")), granted(new, ("x",)))).compact
    assert "| read − `y` | safe |" in compact, compact
    mismatched = (granted(old, ("a", "b")), granted(new, ("a",), read_regex="^(c)$"))
    assert risk.risk(steps[0], sides=(mismatched[0][old.urn], mismatched[1][new.urn])) == risk.ACCESS
    compact = review.render(steps, [old], [new], mismatched).compact
    assert "read `^(a\\|b)$` → `^(a)$` | **access** |" in compact, compact


def test_new_grants_are_access_and_revocations_are_safe():
    created = engine.diff([], [permissions("^a$")])
    moved = engine.diff([permissions("^a$")], [permissions("^a$", user="shipping")])
    revoked = engine.diff([permissions("^a$")], [])
    assert [risk.risk(s) for s in created] == [risk.ACCESS]
    assert sorted(risk.risk(s) for s in moved) == [risk.ACCESS, risk.SAFE]  # new user's grant; old one revoked
    assert [risk.risk(s) for s in revoked] == [risk.SAFE]


def test_a_permission_update_shows_the_names_added_and_removed_not_both_regexes():
    old = Registered(urn="urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/permissions:Permissions::ops-shop",
                     type=engine.PERMISSIONS, name="ops-shop", custom=True, parent=None,
                     inputs={"user": "ops", "vhost": "shop", "permissions": {
                         "configure": "^$", "write": r"^(orders|orders\.billing\.requeue)$", "read": "^(a)$"}})
    new = copy.deepcopy(old)
    new.inputs["permissions"]["write"] = r"^(notify\.push\.requeue|orders|rabbitmq\-retry\.delay\.0)$"

    def plan(record: Registered, write: tuple[str, ...]) -> dict[str, Planned]:
        inputs = record.inputs["permissions"]
        return {record.urn: Planned("Permissions", "shop", None, None, None, "", (
            Allowed(None, "configure", "^$", ()), Allowed(None, "write", inputs["write"], write),
            Allowed(None, "read", "^(a)$", ("a",))))}
    plans = (plan(old, ("orders", "orders.billing.requeue")),
             plan(new, ("notify.push.requeue", "orders", "rabbitmq-retry.delay.0")))
    compact = review.render(engine.diff([old], [new]), [old], [new], plans).compact
    (row,) = [line for line in compact.splitlines() if line.startswith("| update | Permissions |")]
    assert ("| write + `notify.push.requeue`, + `rabbitmq-retry.delay.0`, − `orders.billing.requeue` | **access** |"
            in row), row
    assert "^(" not in row


def test_a_consumer_s_grant_is_judged_by_its_plans_names_through_each_side_s_json_evaluation(review_of):
    """As `make review` runs: each side evaluated in a process of its own, the names of each grant carried in its
    JSON (`Planned.grants`)."""
    def consuming(*queues: str) -> dict[str, Any]:
        return changed(lambda c: c["vhosts"][0].update(applications=[{"user": "billing-app",
                                                                        "consumes": list(queues)}]))
    _, narrowed, status = review_of(consuming("orders", "audit"), consuming("orders"), apart=True)
    assert status == 0 and "| read − `audit` | safe |" in narrowed, narrowed
    _, widened, _ = review_of(consuming("orders"), consuming("orders", "audit"), apart=True)
    assert "| read + `audit` | **access** |" in widened, widened


def test_an_evaluation_without_grants_knows_no_names():
    """BASE evaluated by tools from before `Planned.grants`: its grants have no names, so any change of their
    regexes is judged as widening (`permissions.widens`)."""
    entry = planned_from({"kind": "Permissions", "vhost": "shop", "family": None, "leads_to": None, "strategy": None,
                          "role": ""})
    assert entry.grants == ()
    old, new = permissions("^(a|b)$"), permissions("^(a)$")
    assert risk.risk(engine.diff([old], [new])[0], sides=(entry, entry)) == risk.ACCESS


def test_a_topic_permission_update_is_shown_per_exchange_without_json_escapes():
    def topic(write: str, exchanges: tuple[str, ...] = ("orders",)) -> Registered:
        return Registered(
            urn="urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/topicPermissions:TopicPermissions::app-shop",
            type=engine.TOPIC_PERMISSIONS, name="app-shop", custom=True, parent=None,
            inputs={"user": "app", "vhost": "shop",
                    "permissions": [{"exchange": x, "write": write, "read": "^$"} for x in exchanges]})

    old, new = [topic(r"^order\.")], [topic(r"^order\.(created|paid)$", ("orders", "rabbitmq-retry.delay.0"))]
    compact = review.render(engine.diff(old, new), old, new, ({}, {})).compact
    (row,) = [line for line in compact.splitlines() if line.startswith("| update | TopicPermissions |")]
    assert (r"topic `orders` write `^order\.` → `^order\.(created\|paid)$`; + topic `rabbitmq-retry.delay.0`: "
            r"write `^order\.(created\|paid)$` read `^$`") in row, row
    assert "\\\\" not in row and '{"exchange"' not in row


def user(password: str, tags: list[str] | None = None) -> Registered:
    return Registered(
        urn="urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/user:User::billing-app-user", type=engine.USER,
        name="billing-app-user", custom=True, parent=None,
        inputs={"name": "billing-app", "password": password, "tags": tags or []})


def test_a_password_change_is_an_access_risk_that_says_who_is_locked_out():
    old, new = [user("[secret] aaaa")], [user("[secret] bbbb")]
    (step,) = engine.diff(old, new)
    assert (step.op, step.changed, risk.risk(step)) == ("update", ["password"], risk.ACCESS)
    compact = review.render([step], old, new, ({}, {})).compact
    (row,) = [line for line in compact.splitlines() if line.startswith("| update | User |")]
    assert row.endswith("| password changed (secret) | **access** — every client using the old password of "
                        "`billing-app` is locked out at its next reconnect (open connections stay until then): give "
                        "them the new one as this is applied |"), row
    (same,) = engine.diff(old, old)
    assert risk.risk(same) == risk.SAFE


def test_an_imported_queue_reviews_as_import_not_create():
    audit = Registered(urn="urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/queue:Queue::jobs-jobs.audit",
                       type=engine.QUEUE, name="jobs-jobs.audit", custom=True, parent=None,
                       inputs={"name": "jobs.audit", "vhost": "jobs", "settings": {"durable": True}},
                       import_id="jobs.audit@jobs")
    (step,) = engine.diff([], [audit])
    assert (step.op, risk.risk(step)) == ("import", risk.SAFE)
    compact = review.render([step], [], [audit], ({}, {})).compact
    assert compact.startswith("**1 to import, 0 unchanged**")
    assert ("| import | Queue | `jobs-jobs.audit` | `jobs.audit` | adopted as the broker holds it, with its messages "
            "(nothing is created) | safe |") in compact
    (same,) = engine.diff([audit], [audit])
    assert same.op == "same", "once imported, the next review has nothing to do"


# End to end: the CLI in a git repository of its own, BASE evaluated from a commit.

def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=review", "-c", "user.email=review@example.invalid",
                    "-c", "commit.gpgsign=false", *args], cwd=repo, check=True, capture_output=True)


def cli(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.review", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "ALLOW_DATA_LOSS": "", **env}, timeout=120)


@pytest.fixture
def repo(program_copy: Path) -> Path:
    """The project (program, tools, Makefile, dev stack) as a git repository with one commit."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Makefile"):
        shutil.copy(ROOT / name, program_copy)
    shutil.copytree(ROOT / "tools", program_copy / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (program_copy / ".venv").symlink_to(ROOT / ".venv")
    (program_copy / ".gitignore").write_text(".venv\n")
    git(program_copy, "init", "-q")
    git(program_copy, "add", ".")
    git(program_copy, "commit", "-qm", "base")
    return program_copy


def dev_resources(repo: Path) -> int:
    """RabbitMQ objects of the dev stack (the summary counts those, not components)."""
    return sum(r.custom and r.type != engine.STASH for r in record_program("dev", repo))


def a_removed_tier_committed(repo: Path) -> None:
    """`repo`: the dev stack's program files and tools in a git repository of their own, then a commit that removes
    a tier (its wait queue deleted: what a review with an endpoint reads on the broker)."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Makefile"):
        shutil.copy(ROOT / name, repo)
    shutil.copytree(ROOT / "tools", repo / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    commit_edit(repo, "delays: [1s, 5s, 15s]", "delays: [1s, 5s]")


def commit_edit(repo: Path, old: str, new: str) -> None:
    path = repo / "Pulumi.dev.yaml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    git(repo, "commit", "-qam", f"{old} → {new}")


def test_cli_between_commits(repo: Path):
    commit_edit(repo, "delays: [1s, 5s, 15s]", "delays: [1s, 5s, 30s]")
    result = cli(repo, "--base", "HEAD~1", "--stack", "dev", "--output", "review.md", "--output-full", "full.md")
    assert result.returncode == 0, result.stderr
    assert "| update | Policy |" in result.stdout and "message-ttl 15000 → 30000" in result.stdout
    assert (repo / "review.md").read_text() == result.stdout
    full = (repo / "full.md").read_text()
    assert full.startswith("## RabbitMQ review: stack `dev`") and "```mermaid" in full

    commit_edit(repo, "delays: [1s, 5s, 30s]", "delays: [1s, 5s]")
    result = cli(repo, "--base", "HEAD~1", "--stack", "dev")
    assert result.returncode == 2 and "| delete | Queue | `shop-orders.billing-wait-3` |" in result.stdout
    assert cli(repo, "--base", "HEAD~1", "--stack", "dev", ALLOW_DATA_LOSS="1").returncode == 0
    assert cli(repo, "--base", "HEAD~1", "--stack", "dev", "--allow-data-loss").returncode == 0


def test_cli_lists_the_alerting_rules_a_change_adds_removes_and_changes(repo: Path):
    commit_edit(repo, "delays: [1s, 5s, 15s]", "delays: [1s, 5s, 20s, 1m]")
    result = cli(repo, "--base", "HEAD~1", "--stack", "dev")
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("### Alerting rules", 1)[1]
    assert "**1 added, 0 removed, 1 changed**" in section
    assert "- `RabbitmqRetryWaitNotDraining` `shop/orders.billing/orders.billing.wait.4`" in section
    assert "- `RabbitmqRetryWaitNotDraining` `shop/orders.billing/orders.billing.wait.3`: expr" in section
    commit_edit(repo, "  rabbitmq-retry:vhosts:", "  rabbitmq-retry:alerts: {parked: {for: 10m}}\n"
                "  rabbitmq-retry:vhosts:")
    section = cli(repo, "--base", "HEAD~1", "--stack", "dev").stdout.split("### Alerting rules", 1)[1]
    assert "0 added, 0 removed, 4 changed" in section and "for 1m → 10m" in section
    assert "No rule added, removed or changed" in cli(repo, "--base", "HEAD", "--stack", "dev").stdout


def test_cli_a_stack_new_at_base_is_all_creates(repo: Path):
    shutil.copy(repo / "Pulumi.dev.yaml", repo / "Pulumi.staging.yaml")
    result = cli(repo, "--base", "HEAD", "--stack", "staging")
    assert result.returncode == 0, result.stderr
    assert "does not exist at `HEAD`: every resource is created" in result.stdout
    assert f"{dev_resources(repo)} to create, 0 unchanged" in result.stdout


def test_cli_config_errors_are_printed_like_pulumi_preview(repo: Path):
    (repo / "Pulumi.dev.yaml").write_text((repo / "Pulumi.dev.yaml").read_text().replace("delays: [2s, 10s]",
                                                                                      "delays: [2s, 10x]"))
    result = cli(repo, "--base", "HEAD", "--stack", "dev")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: invalid rabbitmq-retry config (1 problem):")
    assert '"10x" is not a duration' in result.stderr


def test_cli_errors(repo: Path):
    assert "not a commit" in cli(repo, "--base", "no-such-rev", "--stack", "dev").stderr
    result = cli(repo, "--base", "HEAD", "--stack", "nope")
    assert result.returncode == 1 and "Pulumi.nope.yaml not found" in result.stderr


def test_cli_a_project_in_a_subdirectory_that_base_lacks(repo: Path, tmp_path_factory: pytest.TempPathFactory):
    outer = tmp_path_factory.mktemp("outer")
    git(outer, "init", "-q")
    git(outer, "commit", "-q", "--allow-empty", "-m", "before the project")
    shutil.copytree(repo, outer / "infra", ignore=shutil.ignore_patterns(".git"))
    git(outer, "add", ".")
    git(outer, "commit", "-qm", "the project")
    result = cli(outer / "infra", "--base", "HEAD~1", "--stack", "dev")
    assert result.returncode == 0, result.stderr
    assert f"{dev_resources(repo)} to create, 0 unchanged" in result.stdout
    unchanged = cli(outer / "infra", "--base", "HEAD", "--stack", "dev")
    assert unchanged.returncode == 0 and f"**No changes** — {dev_resources(repo)} unchanged." in unchanged.stdout


# Secrets: a password change is visible as a change, and no ciphertext is ever printed.

CIPHERTEXTS = ("v1:YmFzZS1jaXBoZXJ0ZXh0LWZvci10aGUtdGVzdHM=", "v1:aGVhZC1jaXBoZXJ0ZXh0LWZvci10aGUtdGVzdHM=")
APPLICATION = """\
      applications:
        - user: billing-app
          publishes: [orders]
          consumes: [orders.billing]
  rabbitmq-retry:passwords:
    billing-app:
      secure: {ciphertext}
"""


def run(repo: Path, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=repo, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "ALLOW_DATA_LOSS": "", **env})


def test_cli_a_password_change_reviews_as_secret_and_no_ciphertext_is_printed(repo: Path):
    stack = repo / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + APPLICATION.format(ciphertext=CIPHERTEXTS[0]))
    git(repo, "commit", "-qam", "billing-app")
    stack.write_text(stack.read_text().replace(*CIPHERTEXTS))

    outputs = []
    review_run = cli(repo, "--base", "HEAD", "--stack", "dev")
    assert review_run.returncode == 0, review_run.stderr
    (row,) = [line for line in review_run.stdout.splitlines() if line.startswith("| update | User |")]
    assert "| `billing-app` | password changed (secret) | **access** — every client using the old password" in row
    assert "**1 to update," in review_run.stdout
    outputs.append(review_run)
    for tool in ("tools.plan_report", "tools.mockrun"):
        outputs.append(run(repo, sys.executable, "-m", tool, "--stack", "dev", "--root", str(repo)))
        assert outputs[-1].returncode == 0, outputs[-1].stderr
    assert "password=[secret]" in outputs[1].stdout  # the plan says there is one, and no more

    stack.write_text(stack.read_text().replace("delays: [2s, 10s]", "delays: [2s, 10x]"))  # a config error
    outputs.append(cli(repo, "--base", "HEAD", "--stack", "dev"))
    stack.write_text(stack.read_text() + f"  broken: [{CIPHERTEXTS[1]}\n")  # a YAML error next to a secret
    outputs.append(cli(repo, "--base", "HEAD", "--stack", "dev"))
    assert [r.returncode for r in outputs[-2:]] == [1, 1]
    assert outputs[-1].stderr.startswith("error: Pulumi.dev.yaml:")
    for result in outputs:
        assert not any(c in result.stdout + result.stderr for c in CIPHERTEXTS)
        assert not any(c[3:20] in result.stdout + result.stderr for c in CIPHERTEXTS)


# Through make: make itself exits 2 on any failure, so its last line names the tool's own status.

def test_make_review_and_make_plan_name_the_tools_exit_status(repo: Path):
    assert run(repo, "make", "-s", "review", "BASE=HEAD", "STACK=dev").returncode == 0
    commit_edit(repo, "delays: [1s, 5s, 15s]", "delays: [1s, 5s]")
    lost = run(repo, "make", "-s", "review", "BASE=HEAD~1", "STACK=dev")
    assert lost.returncode == 2 and "| delete | Queue |" in lost.stdout
    assert "make review: tools.review exit status 2 (data loss not acknowledged)" in lost.stderr
    assert run(repo, "make", "-s", "review", "BASE=HEAD~1", "STACK=dev", ALLOW_DATA_LOSS="1").returncode == 0

    broken = run(repo, "make", "-s", "review", "BASE=no-such-rev", "STACK=dev")
    assert broken.returncode == 2 and "not a commit" in broken.stderr
    assert "make review: tools.review exit status 1 (error)" in broken.stderr
    plan = run(repo, "make", "-s", "plan", "STACK=nope")
    assert plan.returncode == 2 and plan.stderr.startswith("error: Pulumi.nope.yaml not found")
    assert "make plan: tools.plan_report exit status 1 (error)" in plan.stderr
    assert run(repo, "make", "-s", "plan", "STACK=dev").returncode == 0


COUNTED = """

import functools as _functools
import os as _os


def _counted(function):
    @_functools.wraps(function)
    def counted(*args, **kwargs):
        with open(_os.environ["EVALUATION_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{function.__name__} {_os.path.abspath(__file__)}\\n")
        return function(*args, **kwargs)
    return counted


NAME = _counted(NAME)
"""


def test_make_review_plans_and_parses_each_side_once(repo: Path, tmp_path: Path):
    """Counted: the copy's planner entry point (`components.pulumi.stack_resources.plan_stack`) and topology parser
    (`components.config.load.load_stack_config`) log each call with the project they belong to; `make review`
    between two commits calls each once per side, BASE's in BASE's checkout."""
    for module, name in (("components/pulumi/stack_resources.py", "plan_stack"),
                         ("components/config/load.py", "load_stack_config")):
        path = repo / module
        path.write_text(path.read_text(encoding="utf-8") + COUNTED.replace("NAME", name), encoding="utf-8")
    git(repo, "commit", "-qam", "count the planner's and the parser's calls")
    commit_edit(repo, "delays: [1s, 5s, 15s]", "delays: [1s, 5s, 30s]")
    log = tmp_path / "evaluations.log"
    done = run(repo, "make", "-s", "review", "BASE=HEAD~1", "STACK=dev", EVALUATION_LOG=str(log))
    assert done.returncode == 0, done.stderr
    calls = Counter((function, module.split("/components/")[0]) for function, module in
                    (line.split(" ", 1) for line in log.read_text(encoding="utf-8").splitlines()))
    sides = {project for _, project in calls}
    assert len(sides) == 2 and str(repo) in sides  # the working tree, and BASE's checkout
    assert calls == {(function, project): 1 for function in ("plan_stack", "load_stack_config") for project in sides}


# What a reviewer must see: new grants, protect/retain toggles, broken retry contracts, stale policies.

PASSWORD = {"billing-app": {"secure": "v1:YmlsbGluZy1wYXNzd29yZA=="}}


def test_a_new_user_shows_what_it_is_granted(review_of):
    new = changed(lambda c: (c["vhosts"][0].update(applications=[
        {"user": "billing-app", "publishes": ["events"], "consumes": ["orders"]}]), c.update(passwords=PASSWORD)))
    steps, markdown, status = review_of(BASE, new)
    assert {s.type for s in steps} == {engine.USER, engine.PERMISSIONS} and status == 0
    assert "| create | User | `shop-user-billing-app` | `billing-app` | tags (none) | **access** |" in markdown
    assert ("| create | Permissions | `shop-permissions-billing-app` | `billing-app@shop` | configure ^$; write "
            "^(events\\|orders\\\\.error\\|orders\\\\.retry)$; read ^(orders)$ | **access** |") in markdown


def test_a_user_limit_change_reads_as_the_limits_and_says_what_a_lower_one_refuses(review_of):
    def limited(**limits: int):
        return changed(lambda c: (c["vhosts"][0].update(applications=[
            {"user": "billing-app", "consumes": ["orders"], **({"limits": limits} if limits else {})}]),
            c.update(passwords=PASSWORD)))
    refused = ": what exists stays, and past the limit RabbitMQ refuses new ones (check that the clients fit) |"
    steps, markdown, status = review_of(limited(), limited(max_connections=10))
    assert [(s.op, s.type) for s in steps] == [("create", engine.USER_LIMITS)] and status == 0
    assert ("| create | UserLimits | `shop-limits-billing-app` | `billing-app` | max-connections 10 | safe — sets "
            f"max-connections{refused}") in markdown
    steps, markdown, _ = review_of(limited(max_connections=10), limited(max_connections=20, max_channels=50))
    assert [(s.op, s.changed) for s in steps] == [("update", ["limits.max-channels", "limits.max-connections"])]
    assert ("| update | UserLimits | `shop-limits-billing-app` | `billing-app` | max-channels (unset) → 50; "
            f"max-connections 10 → 20 | safe — sets max-channels{refused}") in markdown
    _, markdown, _ = review_of(limited(max_connections=10), limited())
    assert "| delete | UserLimits | `shop-limits-billing-app` | `billing-app` |  | safe |" in markdown


def test_a_vhost_limit_change_shows_both_values_and_notes_a_lower_one(review_of):
    def limits(**values: int):
        return changed(lambda c: c["vhosts"][0].update(limits=values))
    _, markdown, status = review_of(limits(max_connections=10), limits(max_connections=20, max_queues=50))
    assert status == 0
    assert ("| update | VHost | `shop-vhost` | `shop` | maxConnections 10 → 20; maxQueues (unset) → 50 | safe — sets "
            "max-queues: what exists stays") in markdown
    _, markdown, _ = review_of(limits(max_queues=50), limits(max_queues=40))
    assert "maxQueues 50 → 40 | safe — lowers max-queues: what exists stays" in markdown
    _, markdown, _ = review_of(limits(max_queues=50), limits(max_queues=60))
    assert "maxQueues 50 → 60 | safe |" in markdown


def test_turning_protect_off_is_flagged_and_turning_it_on_is_safe(review_of):
    protected = changed(lambda c: c.update(protect=True))
    steps, markdown, status = review_of(protected, BASE)
    assert steps == [] and status == 0  # pulumi up changes no object for it
    assert markdown.startswith("**7 protect/retain changes, 21 unchanged** — 🔓 protection: 7")
    assert ("| options | Queue | `shop-orders-input` | `orders` | protect on → off | **protection** — `pulumi up` no "
            "longer refuses to delete or replace it |") in review_of.full
    assert ("| options | Queue | 6 queues | in vhost `shop`: `orders`, `orders.error`, `orders.wait.1`, "
            "`orders.wait.2`, `orders.wait.3`; `audit` | protect on → off | **protection** — `pulumi up` no longer "
            "refuses to delete or replace it |") in markdown
    assert ("| options | VHost | `shop-vhost` | `shop` | protect on → off | **protection** — `pulumi up` no longer "
            "refuses to delete or replace it |") in markdown

    _, markdown, _ = review_of(BASE, protected)
    assert "| options | Queue | `shop-orders-input` | `orders` | protect off → on | safe |" in review_of.full
    assert "protection" not in markdown


def test_turning_retain_on_delete_off_an_error_queue_is_flagged(review_of):
    _, markdown, status = review_of(changed(lambda c: c.update(retain_error_queues=True)), BASE)
    assert status == 0
    assert ("| options | Queue | `shop-orders-error` | `orders.error` | retain\\_on\\_delete on → off | "
            "**protection** — deleting it now deletes its messages on the broker |") in markdown


def test_lowering_max_retries_breaks_the_contract_of_running_consumers(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: orders(c)["retry"].update(max_retries=3)))
    assert steps == [] and status == 0  # contract risk does not change the exit status
    assert markdown.startswith("**21 unchanged** — 💥 contract: 1")
    assert ("| contract | RetryableQueue | `shop-orders` | `orders` | max\\_retries 5 → 3: consumers on the old "
            "contract retry up to 5 times; once they take the new one, messages already retried 3 or more times "
            "are parked at their next failure | **contract** |") in markdown
    assert "```mermaid" in markdown  # its risk changed: the path is drawn


def test_removing_a_tier_breaks_republishing_consumers(review_of):
    _, markdown, _ = review_of(BASE, changed(lambda c: orders(c)["retry"].update(delays=["1s", "10s"])))
    assert ("| contract | RetryableQueue | `shop-orders` | `orders` | tier wait.3 removed: consumers in republish mode "
            "that still publish retries with routing key wait.3 to orders.retry lose those messages (no queue is "
            "bound to that key; the exchange drops them) | **contract** |") in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and "---" not in line][1:]
    risks = [line.rsplit("|", 2)[1].strip().split(" — ")[0] for line in rows]
    assert risks == sorted(risks, key=lambda r: ["**data loss**", "**contract**", "safe"].index(r))


def test_raising_max_retries_or_adding_a_tier_breaks_nothing(review_of):
    _, markdown, _ = review_of(BASE, changed(lambda c: orders(c)["retry"].update(max_retries=9,
                                                                                 delays=["1s", "10s", "1m", "5m"])))
    assert "contract" not in markdown.replace("Retry contract", "")


def test_a_policy_that_matches_nothing_after_the_change_is_named(review_of):
    def with_policy(c: dict[str, Any]) -> None:
        c["vhosts"][0]["policies"] = [{"name": "audit-limit", "pattern": "^audit$", "definition": {"max-length": 10}}]
    old = changed(with_policy)
    new = changed(lambda c: (with_policy(c), c["vhosts"][0]["queues"][1].update(name="audit-v2")))
    _, markdown, _ = review_of(old, new)
    assert ("- policy `audit-limit` in vhost `shop` (pattern `^audit$`, apply-to queues) matches no queue or exchange "
            "after this change (it matched 1 before): if a queue was renamed, update the pattern") in markdown
    _, unchanged, _ = review_of(old, changed(lambda c: (with_policy(c), orders(c)["retry"].update(max_retries=7))))
    assert "matches no queue" not in unchanged


def test_the_review_reads_roles_from_the_plan_not_from_logical_names(review_of, program_copy: Path):
    """The program's own naming mints config policies' logical keys in a new format: the review plans the stack
    with the same components, so it still knows which policies the config declares (it once compared names with
    the tools' copy of the format, and this policy was silently left out)."""
    naming = program_copy / "components" / "model" / "naming.py"
    written = naming.read_text(encoding="utf-8")
    assert 'return f"policy-{policy}"' in written
    naming.write_text(written.replace('return f"policy-{policy}"', 'return f"declared-{policy}-by-config"'),
                      encoding="utf-8")

    def with_policy(c: dict[str, Any]) -> None:
        c["vhosts"][0]["policies"] = [{"name": "audit-limit", "pattern": "^audit$", "definition": {"max-length": 10}}]
    old = changed(with_policy)
    new = changed(lambda c: (with_policy(c), c["vhosts"][0]["queues"][1].update(name="audit-v2"),
                             orders(c)["retry"].update(delays=["1s", "10s", "2m"])))
    _, markdown, _ = review_of(old, new, apart=True)
    assert ("- policy `audit-limit` in vhost `shop` (pattern `^audit$`, apply-to queues) matches no queue or exchange "
            "after this change (it matched 1 before): if a queue was renamed, update the pattern") in markdown
    assert "| update | Policy | `shop-orders-wait-3-policy` | `orders.wait.3` | message-ttl 60000 → 120000 |" in \
        review_of.full


# Big stacks: one retryable queue recorded for real, then copied under other names, so that the grouping
# and the 60,000-character cap are tested on 1,000 queues in a second, not a minute and a half.

def one_queue_stack(**retry: Any) -> dict[str, Any]:
    return {"defaults": {"queue_type": retry.pop("queue_type", "classic")}, "vhosts": [{
        "name": "shop", "exchanges": [{"name": "events", "type": "topic"}],
        "queues": [{"name": "q0000", "bindings": [{"exchange": "events", "routing_key": "k.q0000"}],
                    "retry": {"delays": ["1s", "10s", "1m"], "max_retries": 5, **retry}}]}]}


Recorded = tuple[list[Registered], dict[str, Planned]]
"""A recording and the plan of the same stack."""


def multiplied(recorded: Recorded, queues: int) -> Recorded:
    """`recorded` with its retryable queue q0000 copied as q0000…q<queues - 1>, in the recording and the plan."""
    recording, plan = recorded

    def renamed(record: Registered, index: int) -> Registered:
        return Registered(**json.loads(json.dumps(asdict(record)).replace("q0000", f"q{index:04d}")))

    def renamed_planned(planned: Planned, index: int) -> Planned:
        return planned_from(json.loads(json.dumps(asdict(planned)).replace("q0000", f"q{index:04d}")))
    shared = [r for r in recording if "q0000" not in json.dumps(asdict(r)) or r.type == engine.STASH]
    own = [r for r in recording if "q0000" in json.dumps(asdict(r)) and r.type not in (VHOST_COMPONENT, engine.STASH)]
    vhost = next(r for r in recording if r.type == VHOST_COMPONENT)
    contract = vhost.outputs["retry_contracts"]["q0000"]
    contracts_out = {f"q{i:04d}": json.loads(json.dumps(contract).replace("q0000", f"q{i:04d}")) for i in range(queues)}
    outputs = {**vhost.outputs, "retry_contracts": contracts_out}
    return ([*shared, Registered(**{**asdict(vhost), "outputs": outputs}),
             *(renamed(r, i) for i in range(queues) for r in own)],
            {**{k: v for k, v in plan.items() if "q0000" not in k},
             **{k.replace("q0000", f"q{i:04d}"): renamed_planned(v, i) for i in range(queues)
                for k, v in plan.items() if "q0000" in k}})


@pytest.fixture
def record_stack(program_copy: Path) -> Callable[[dict[str, Any]], Recorded]:
    def run(config: dict[str, Any]) -> Recorded:
        (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(config))
        evaluated = evaluate(STACK, program_copy)
        return evaluated.recording, evaluated.plan
    return run


def reviewed(old: Recorded, new: Recorded) -> review.Review:
    return review.render(engine.diff(old[0], new[0]), old[0], new[0], (old[1], new[1]))


def test_a_delay_change_of_1000_queues_is_one_row(record_stack):
    old = multiplied(record_stack(one_queue_stack()), 1000)
    new = multiplied(record_stack(one_queue_stack(delays=["1s", "10s", "2m"])), 1000)
    result = reviewed(old, new)
    assert result.compact.startswith("**1,000 to update, 16,002 unchanged**")
    assert ("| update | Policy | 1,000 policies | `*.wait.3` of every retryable queue in vhost `shop` | message-ttl "
            "60000 → 120000 | safe |") in result.compact
    assert ("- Retry contract: delays 1s, 10s, 1m → 1s, 10s, 2m — every retryable queue in vhost `shop` (1,000)"
            in result.compact)
    assert "```mermaid" not in result.compact and len(result.compact) < 3_000
    assert result.full.count("```mermaid") == 1000 and result.full.count("| update | Policy |") == 1000
    assert "_Identical changes are grouped (`*` stands for each retryable queue's name); " in result.compact


def test_deleting_1000_queues_fits_a_comment_and_names_every_queue(record_stack):
    old = multiplied(record_stack(one_queue_stack()), 1000)
    new = ([r for r in old[0] if "q0" not in json.dumps(asdict(r))], {k: v for k, v in old[1].items() if "q0" not in k})
    result = reviewed(old, new)
    assert result.status == 2 and len(result.compact) <= review.LIMIT
    assert ("| delete | Queue | 5,000 queues | in vhost `shop`: the queue, `*.error`, `*.wait.1`, `*.wait.2`, "
            "`*.wait.3` of 1,000 retryable queues: `q0000`, `q0001`, ") in result.compact
    assert all(f"`q{i:04d}`" in result.compact for i in range(1000))
    for i in range(1000):
        assert all(f"| `q{i:04d}{suffix}` |" in result.full for suffix in ("", ".wait.1", ".wait.3", ".error"))


def test_switching_1000_queues_to_quorum_fits_a_comment_with_capped_diagrams(record_stack):
    old = multiplied(record_stack(one_queue_stack()), 1000)
    new = multiplied(record_stack(one_queue_stack(queue_type="quorum")), 1000)
    result = reviewed(old, new)
    assert result.status == 2 and len(result.compact) <= review.LIMIT
    assert all(f"`q{i:04d}`" in result.compact for i in range(1000))
    assert result.compact.count("```mermaid") == review.MAX_DIAGRAMS
    assert f"_{1000 - review.MAX_DIAGRAMS:,} more retry paths changed shape or risk" in result.compact
    assert "#### `shop` / `q0000`" in result.compact  # in name order


def test_rows_are_in_the_same_order_whatever_the_order_of_registration(record_stack):
    old = multiplied(record_stack(one_queue_stack()), 50)
    new = multiplied(record_stack(one_queue_stack(queue_type="quorum", delays=["1s", "10s"])), 50)
    first = reviewed(old, new)
    again = reviewed((list(reversed(old[0])), old[1]), (list(reversed(new[0])), new[1]))
    assert (first.compact, first.full) == (again.compact, again.full)


def test_a_real_200_queue_review(record_stack):
    """The whole path on a stack recorded for real (no copies): 200 retryable queues in two vhosts."""
    def stack(third: str) -> dict[str, Any]:
        return {"defaults": {"queue_type": "classic"}, "vhosts": [{
            "name": f"shop{v}", "exchanges": [{"name": "events", "type": "topic"}],
            "queues": [{"name": f"q{i:03d}", "bindings": [{"exchange": "events", "routing_key": f"k.{i}"}],
                        "retry": {"delays": ["1s", "10s", third]}} for i in range(100 * v, 100 * v + 100)]}
            for v in range(2)]}
    result = reviewed(record_stack(stack("1m")), record_stack(stack("3m")))
    assert result.compact.count("| update | Policy | 100 policies | `*.wait.3` of every retryable queue in vhost") == 2
    assert "| update | Policy | 100 policies | `*.wait.3` of every retryable queue in vhost `shop1` | message-ttl " \
        "60000 → 180000 | safe |" in result.compact
    assert result.full.count("| update | Policy |") == 200


# Strategy levels: a queue's retries go through the vhost's shared delay levels (`rabbitmq-retry.delay.<k>`).

LEVELS_RETRY = {"strategy": "levels", "max_retries": 5, "backoff": {"initial": "2s", "max": "5s"}}


def levels(delay_levels: dict[str, str] | None = None) -> dict[str, Any]:
    """BASE with `orders` retrying through 4 levels (1s … 8s) and an application consuming it."""
    def edit(c: dict[str, Any]) -> None:
        orders(c)["retry"] = copy.deepcopy(LEVELS_RETRY)
        c["vhosts"][0]["delay_levels"] = {"unit": "1s", "max_delay": "15s", **(delay_levels or {})}
        c["vhosts"][0]["applications"] = [{"user": "billing-app", "consumes": ["orders"]}]
        c.update(passwords=PASSWORD)
    return changed(edit)


def level_steps(steps: list[engine.Step], *levels: int) -> set[tuple[str, str, str]]:
    """(op, kind, logical name) of every resource of the delay levels `levels`."""
    return {(op, kind, f"shop-delay-levels-level-{k}{suffix}") for k in levels for kind, suffix in (
        ("Queue", ""), ("Exchange", "-exchange"), ("Policy", "-policy"), ("Binding", "-wait"), ("Binding", "-pass"))
        for op in {s.op for s in steps}}


def test_switching_a_queue_from_tiers_to_levels_replaces_its_input_and_deletes_its_tiers(review_of):
    steps, markdown, status = review_of(BASE, changed(lambda c: orders(c).update(retry=copy.deepcopy(LEVELS_RETRY))))
    queues = {(s.op, (s.new or s.old or {})["name"]) for s in steps if s.type == engine.QUEUE}
    assert {q for q in queues if q[0] != "create"} == {("replace", "orders"), ("delete", "orders.wait.1"),
                                                        ("delete", "orders.wait.2"), ("delete", "orders.wait.3")}
    # The error queue keeps its parked messages; the shared levels (1s up to 1d: 17) are new.
    assert {q for op, q in queues if op == "create"} == {*(f"rabbitmq-retry.delay.{k}" for k in range(17)),
                                                         "rabbitmq-retry.delay.undeliverable"}
    assert {s.old["name"] for s in steps if s.type == engine.EXCHANGE and s.op == "delete"} == {"orders.retry",
                                                                                                 "orders.requeue"}
    assert status == 2 and "data loss: 4" in markdown
    assert ("| replace | Queue | `shop-orders-input` | `orders` | x-dead-letter-exchange orders.retry → orders.error; "
            "x-dead-letter-routing-key wait.1 → (unset) | **data loss** |") in markdown
    assert ("| contract | RetryableQueue | `shop-orders` | `orders` | strategy tiers → levels: consumers on the old "
            "contract keep retrying the tiers way, which this queue no longer supports (their retries fail, skip the "
            "wait or are parked at once) | **contract** |") in markdown
    assert markdown.count("| contract |") == 1  # one sentence for the switch, not one per field
    assert "strategy tiers → levels" in markdown and "delays 1s, 10s, 1m → (none)" in markdown
    # The 17 levels read as one row per kind, in level order.
    assert ("| create | Queue | 17 queues | in vhost `shop`: `rabbitmq-retry.delay.0`, `rabbitmq-retry.delay.1`, "
            "`rabbitmq-retry.delay.2`, ") in markdown
    assert "| create | Binding | `shop-orders-delivery-binding` | `rabbitmq-retry.delay.deliver → orders` |" in markdown
    assert 'levels[("rabbitmq-retry.delay.0 … rabbitmq-retry.delay.16<br/>17 levels' in markdown  # the new path


def test_raising_max_delay_only_adds_levels_on_top_and_widens_the_consumers_grant(review_of):
    steps, markdown, status = review_of(levels(), levels({"max_delay": "1m"}))
    assert {(s.op, s.type.rsplit(":", 1)[-1], s.name) for s in steps if s.op == "create"} == level_steps(
        [s for s in steps if s.op == "create"], 4, 5)
    assert {(s.op, s.name) for s in steps if s.op != "create"} == {
        ("update", "shop-permissions-billing-app"), ("update", "shop-topic-permissions-billing-app")}
    assert status == 0 and "data loss" not in markdown
    # The application may write the new levels too (shown as access); it keeps the old top, a lower level now,
    # so consumers on the old contract keep working: no contract row.
    assert "write + `rabbitmq-retry.delay.4`, + `rabbitmq-retry.delay.5` | **access** |" in markdown
    assert "| contract |" not in markdown


def test_lowering_max_delay_deletes_the_top_levels_with_their_messages(review_of):
    steps, markdown, status = review_of(levels(), levels({"max_delay": "7s"}))
    deleted = [s for s in steps if s.op == "delete"]
    assert {(s.op, s.type.rsplit(":", 1)[-1], s.name) for s in deleted} == level_steps(deleted, 3)
    assert {s.op for s in steps} == {"delete", "update"} and status == 2 and "data loss: 1" in markdown
    assert "| delete | Queue | `shop-delay-levels-level-3` | `rabbitmq-retry.delay.3` |  | **data loss** |" in markdown
    assert ("delay exchange rabbitmq-retry.delay.3 → rabbitmq-retry.delay.2: consumers still publishing delayed "
            "copies to rabbitmq-retry.delay.3 fail once it is deleted (channel error 404 NOT\\_FOUND)") in markdown


def test_a_new_delay_unit_updates_the_level_policies_in_place(review_of):
    steps, markdown, status = review_of(levels(), levels({"unit": "1200ms", "max_delay": "18s"}))  # still 4 levels
    assert ops(steps) == {("update", "Policy", f"shop-delay-levels-level-{k}-policy") for k in range(4)}
    assert all(s.changed == ["policy.definition.message-ttl"] and risk.risk(s) == risk.SAFE for s in steps)
    assert status == 0 and "data loss" not in markdown
    assert "| update | Policy | `shop-delay-levels-level-3-policy` | `rabbitmq-retry.delay.3` | message-ttl 8000 → " \
        "9600 | safe |" in markdown
    assert ("delay unit 1s → 1200ms: consumers on the old contract count delays in units of 1s, which the "
            "levels now hold 1200ms each: their retries wait 1.2 times as long until they are redeployed") in markdown


def test_a_new_backoff_changes_only_the_contract_and_breaks_nothing(review_of):
    new = levels()
    orders(new)["retry"]["backoff"]["max"] = "10s"
    steps, markdown, status = review_of(levels(), new)
    assert steps == [] and status == 0 and "**contract**" not in markdown
    assert "- Retry contract: backoff" in markdown and '"max\\_ms": 10000' in markdown


def test_a_new_native_delay_is_a_safe_policy_update_with_its_diagram_in_the_full_report(review_of):
    def native(min_delay: str) -> dict[str, Any]:
        return changed(lambda c: (c["defaults"].update(queue_type="quorum"), orders(c).update(
            retry={"strategy": "native", "min_delay": min_delay, "max_delay": "30s", "max_retries": 5})))
    steps, markdown, status = review_of(native("1s"), native("2s"))
    assert ops(steps) == {("update", "Policy", "shop-orders-policy")} and status == 0
    assert "**contract**" not in markdown and "- Retry contract: min\\_delay\\_ms 1000 → 2000" in markdown
    assert "waits min(n × 2s, 30s) in place" in review_of.full


def test_adding_a_quorum_group_size_replaces_the_queue_and_every_queue_it_owns(review_of):
    """An argument, fixed at declaration: the review calls it data loss, like a type switch."""
    quorum = changed(lambda c: c["defaults"].update(queue_type="quorum"))
    grouped = copy.deepcopy(quorum)
    orders(grouped)["quorum_group_size"] = 3
    steps, markdown, status = review_of(quorum, grouped)
    replaced = {s.new["name"] for s in steps if s.type == engine.QUEUE and s.op == "replace"}
    assert replaced == {"orders", "orders.wait.1", "orders.wait.2", "orders.wait.3", "orders.error"}
    assert status == 2 and "data loss: 5" in markdown
    assert "| x-quorum-initial-group-size (unset) → 3 | **data loss** |" in markdown
