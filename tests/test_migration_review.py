"""`make review` of each migration step: its own "Migrations" section says what moves where and what is left to do,
step retire lists what must be empty first (with a live broker, what each holds now), and every step exits 0, while
deleting the same queues without a migration is still data loss."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rabbitmq_retry_client.depth import QueueDepth
from tests.test_review import BASE, STACK, orders, stack_file
from tools.lib import engine, review
from tools.lib.evaluation import evaluate
from tools.lib.review.migrations import Reader

Run = Callable[..., tuple[str, int]]
EVENTS = [{"exchange": "events", "routing_key": "order.created"}]


@pytest.fixture
def review_of(program_copy: Path) -> Run:
    """old config, new config → (the review for a comment, exit status), as `make review` computes them."""
    def run(old: dict[str, Any], new: dict[str, Any], read: Reader | None = None) -> tuple[str, int]:
        evaluations = []
        for config in (old, new):
            (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(config))
            evaluations.append(evaluate(STACK, program_copy))
        recordings = [e.recording for e in evaluations]
        plans = (evaluations[0].plan, evaluations[1].plan)
        reviewed = review.render(engine.diff(*recordings), *recordings, plans, migrations=evaluations[1].migrations,
                                 stack=STACK, read=read, endpoint="http://broker:15672" if read else None)
        return reviewed.compact, reviewed.status
    return run


def step(name: str) -> dict[str, Any]:
    """BASE with `orders` moving to the quorum queue `orders.q`: `before`, step `move` or step `retire`."""
    config = copy.deepcopy(BASE)
    if name == "before":
        return config
    queues = config["vhosts"][0]["queues"]
    orders(config).pop("bindings")
    queues.append({"name": "orders.q", "type": "quorum", "bindings": EVENTS,
                   "retry": {"delays": ["1s", "10s", "1m"], "max_retries": 5}})
    if name == "retire":
        queues.pop(0)
    config["vhosts"][0]["migrations"] = [{"name": "orders-to-quorum", "move": {"from": "orders", "to": "orders.q"},
                                          "step": name}]
    return config


def drain(name: str) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    if name == "before":
        return config
    orders(config)["retry"]["delays"] = ["1s"]
    config["vhosts"][0]["migrations"] = [{"name": "orders-one-tier", "step": name,
                                          "drain_tiers": {"queue": "orders", "delays": ["1s", "10s", "1m"]}}]
    return config


def test_step_move_says_what_moves_where_and_what_is_next_and_exits_0(review_of: Run):
    text, status = review_of(step("before"), step("move"))
    assert status == 0
    section = text.split("### Migrations", 1)[1]
    assert "#### `shop` / `orders-to-quorum`: move `orders` → `orders.q`, step `move`" in section
    assert ("shovel `rabbitmq-retry.migrate.orders-to-quorum` `orders` → `orders.q`; shovel "
            "`rabbitmq-retry.migrate.orders-to-quorum.error` `orders.error` → `orders.q.error`") in section
    assert "new publishes reach `orders.q` only" in section
    assert "as this stack's user `rabbitmq-retry-shovel.rabbitmq-retry.review`" in section
    assert ("Next: once `make migrate-status STACK=review` says drained, remove `orders` from vhosts[shop].queues and "
            "set `step: retire` in one commit.") in section
    assert "data loss" not in text.split("### Migrations", 1)[0].lower()


def test_the_contract_change_names_the_successor_in_full(review_of: Run):
    """A contract's own objects read relative to its queue (`*.retry`); the queues a migration names are others."""
    text, _ = review_of(step("before"), step("move"))
    assert '"successor": "orders.q"' in text
    assert '"\\*.q"' not in text and '"*.q"' not in text


def test_step_retire_lists_what_must_be_empty_and_exits_0(review_of: Run):
    text, status = review_of(step("move"), step("retire"))
    assert status == 0
    assert "retired by migration `orders-to-quorum` once empty" in text
    section = text.split("### Migrations", 1)[1]
    assert ("Deletes, each only once empty (the queue guard fails `pulumi up` on one that holds messages): `orders`, "
            "`orders.error`, `orders.wait.1`, `orders.wait.2`, `orders.wait.3`") in section
    assert "After this is applied, removing the entry changes no resource" in section
    assert "Check first: `make migrate-status STACK=review`." in section


def test_with_a_live_broker_step_retire_says_what_each_old_queue_holds_now(review_of: Run):
    def read(vhost: str, queue: str) -> QueueDepth | None:
        return QueueDepth(vhost, queue, 12 if queue == "orders.wait.2" else 0, 0, 0, 0, "classic")

    text, status = review_of(step("move"), step("retire"), read)
    assert status == 0
    assert "  - `orders.wait.2`: holds **12** now (12 ready, 0 unacknowledged)" in text
    assert "  - `orders`: empty now" in text
    assert "ENDPOINT=http://broker:15672" in text


def test_removing_the_entry_after_retire_changes_no_resource(review_of: Run):
    done = step("retire")
    del done["vhosts"][0]["migrations"]
    text, status = review_of(step("retire"), done)
    assert status == 0 and text.startswith("**23 unchanged**") and "### Changes" not in text
    assert "- Retry contract: migration" in text and "```mermaid" not in text


def test_deleting_the_old_queue_without_a_migration_is_still_data_loss(review_of: Run):
    done = step("retire")
    del done["vhosts"][0]["migrations"]
    text, status = review_of(step("before"), done)
    assert status == 2 and "data loss" in text and "### Migrations" not in text


def drain_levels(name: str) -> dict[str, Any]:
    """BASE with `orders` on delay levels, whose max_delay is lowered from 1d to 1h."""
    config = copy.deepcopy(BASE)
    orders(config)["retry"] = {"strategy": "levels", "max_retries": 3}
    config["vhosts"][0]["delay_levels"] = {"max_delay": "1d"}
    if name == "before":
        return config
    config["vhosts"][0]["delay_levels"] = {"max_delay": "1h"}
    config["vhosts"][0]["migrations"] = [{"name": "levels-to-1h", "step": name, "drain_levels": {"max_delay": "1d"}}]
    return config


def contract_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| contract |")]


def test_each_step_of_a_tier_drain_exits_0(review_of: Run):
    text, status = review_of(drain("before"), drain("drain"))
    assert status == 0
    assert "Kept out of the contract, declared exactly as before until retire: `orders.wait.2`, `orders.wait.3`" \
        in text
    text, status = review_of(drain("drain"), drain("retire"))
    assert status == 0
    assert "retired by migration `orders-one-tier` once empty" in text


def test_in_step_drain_the_contract_rows_say_a_removed_tier_stays_bound_until_step_retire(review_of: Run):
    """The kept tier's binding stays until retire: a consumer still on the old contract that republishes a retry with
    its key loses nothing in step drain, only from step retire on."""
    text, _ = review_of(drain("before"), drain("drain"))
    rows = contract_rows(text)
    assert [row.split(" | ")[4].split(":")[0] for row in rows] == ["tier wait.2 removed", "tier wait.3 removed"]
    for row in rows:
        assert "migration orders-one-tier keeps it bound until its step retire" in row
        assert "reach it and wait as before until then; from that step on they lose those messages" in row
        assert "redeploy them with the new contract before it" in row
    # Without the drain the same change loses them when applied.
    undrained = drain("drain")
    del undrained["vhosts"][0]["migrations"]
    text, _ = review_of(drain("before"), undrained)
    assert all("keeps it bound" not in row and "lose those messages (no queue is bound" in row
               for row in contract_rows(text))
    # Step retire: no contract change any more, and the Migrations section says what breaks for late consumers.
    text, _ = review_of(drain("drain"), drain("retire"))
    assert contract_rows(text) == []
    assert ("- Consumers must run the contract of step drain by now: one still on the contract from before the drain "
            "loses the retries it publishes in republish mode with a removed tier's routing key") in text


def test_in_step_drain_the_contract_row_says_the_old_top_delay_level_stays_until_step_retire(review_of: Run):
    text, status = review_of(drain_levels("before"), drain_levels("drain"))
    assert status == 0
    [row] = contract_rows(text)
    assert ("delay exchange rabbitmq-retry.delay.16 → rabbitmq-retry.delay.11: migration levels-to-1h keeps "
            "rabbitmq-retry.delay.16 until its step retire") in row
    assert "from that step on they fail (channel error 404 NOT\\_FOUND)" in row
    text, status = review_of(drain_levels("drain"), drain_levels("retire"))
    assert status == 0 and contract_rows(text) == []
    assert "fails to publish a delayed copy to a removed level (channel error 404 NOT_FOUND)" in text


def test_migrate_status_exits_1_with_one_line_naming_an_endpoint_it_cannot_read(program_copy: Path, capsys,
                                                                                   monkeypatch):
    from tools import migrate_status

    monkeypatch.setenv("RABBITMQ_USERNAME", "deployer")
    monkeypatch.setenv("RABBITMQ_PASSWORD", "secret")

    (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(step("move")))
    assert migrate_status.main(["--stack", STACK, "--root", str(program_copy), "--endpoint",
                                "http://127.0.0.1:9"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1
    assert error.count("http://127.0.0.1:9") == 1, "the endpoint named once, not before its own error again"
    # A stack file that is not there is no broker's error: the line names the file alone.
    assert migrate_status.main(["--stack", "nosuch", "--root", str(program_copy), "--endpoint",
                                "http://127.0.0.1:9"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: Pulumi.nosuch.yaml not found") and error.count("\n") == 1


def test_migrate_status_says_what_each_step_needs_next():
    from tools.lib.evaluation import MigrationInfo
    from tools.lib.migrate_status import next_step

    move = MigrationInfo("shop", "m", "move", "move", "vhosts[0].migrations[0]", "orders", "orders.q", (),
                         ("orders", "orders.wait.2"), False, None)
    held = QueueDepth("shop", "orders.wait.2", 12, 0, 0, 0, "classic")
    empty = QueueDepth("shop", "orders", 0, 0, 0, 0, "classic")
    assert next_step(move, [("orders", empty), ("orders.wait.2", held)], "dev") == "not yet: orders.wait.2 holds 12"
    assert next_step(move, [("orders", empty), ("orders.error", held), ("orders.wait.2", held)], "dev") == \
        "not yet: orders.error holds 12 (and 1 more queue)"
    assert next_step(move, [("orders", empty)], "dev", [("rabbitmq-retry.migrate.m", "missing")]) == \
        "step move not applied yet: shovel rabbitmq-retry.migrate.m is not on the broker; apply it with " \
        "`pulumi up --stack dev`"
    assert next_step(move, [("orders", empty)], "dev") == \
        "drained: remove orders from vhosts[0].queues and set step: retire in a commit"
    drain = MigrationInfo("shop", "d", "drain_tiers", "drain", "p", "orders", "", (), ("orders.wait.2",), False, None)
    assert next_step(drain, [("orders.wait.2", None)], "dev") == "drained: set step: retire in a commit"
    retire = MigrationInfo("shop", "m", "move", "retire", "p", "orders", "orders.q", (), ("orders",), True, 3_600_000)
    assert next_step(retire, [("orders", None)], "dev") == \
        "retired: the entry may be removed once delay_levels.max_delay (1h) has passed since the retire was applied"
    assert next_step(retire, [("orders", held)], "dev") == \
        "retire not applied yet: `orders` still on the broker (`pulumi up` refuses it while `orders` holds 12: " \
        "nothing of the retry path of orders is deleted until every queue of it is empty)"


def test_migrate_status_warns_of_uncounted_copies_only_for_a_queue_that_retries_through_the_delay_levels():
    """Copies waiting in the shared delay levels cannot be counted per queue; a `tiers` queue has none there."""
    from tools.lib.evaluation import MigrationInfo
    from tools.lib.migrate_status import Status, render

    def rendered(source_in_levels: bool) -> str:
        move = MigrationInfo("shop", "m", "move", "move", "vhosts[0].migrations[0]", "orders", "orders.q", (),
                             ("orders",), False, 3_600_000, source_in_levels=source_in_levels)
        return render([Status(move, (("orders", None),), (), "next")], "dev", "http://broker:15672")

    assert "still waiting in the shared delay levels are not counted here" in rendered(True)
    assert "delay levels" not in rendered(False)


def test_only_a_levels_queue_is_said_to_wait_in_the_delay_levels(program_copy: Path):
    """The dev-like stack has delay levels (for another queue); moving its `tiers` queue says nothing of them."""
    config = step("move")
    config["vhosts"][0]["delay_levels"] = {"unit": "1s", "max_delay": "1h"}
    config["vhosts"][0]["queues"].append({"name": "refunds", "retry": {"strategy": "levels",
                                                                      "max_retries": 3,
                                                                      "backoff": {"initial": "1s", "max": "5m"}}})
    (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(config))
    [move] = evaluate(STACK, program_copy).migrations
    assert move.max_delay_ms == 3_600_000 and not move.source_in_levels


def test_migrate_status_says_drained_only_when_a_read_one_sample_later_agrees():
    """A message rejected just before the first read may not show in the management API's sample yet (a native
    delayed retry shows nowhere else): "drained" needs a second read, one sample later, that agrees."""
    from tools.lib.evaluation import MigrationInfo
    from tools.lib.migrate_status import status

    move = MigrationInfo("shop", "m", "move", "move", "vhosts[0].migrations[0]", "orders", "orders.q", (),
                         ("orders",), False, None)
    reads = iter([QueueDepth("shop", "orders", 0, 0, 0, 0, "quorum"),
                  QueueDepth("shop", "orders", 0, 0, 0, 0, "quorum", delayed=1)])
    settled = []
    found = status(move, lambda vhost, queue: next(reads), lambda vhost: [], "dev", settle=lambda: settled.append(1))
    assert settled == [1]
    assert found.next_step == "not yet: orders holds 1"
