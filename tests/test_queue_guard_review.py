"""What `make review` says about the queue guard (tools/lib/queue_guard.py): the stack's waivers as data loss, and,
with a live broker, what each queue the change deletes or replaces holds now; here with a depth reader told what
to answer (tests/broker/test_guard.py reads a real one). Without an endpoint and waivers the review is unchanged."""

from __future__ import annotations

from pathlib import Path

from rabbitmq_retry_client.depth import DepthError, QueueDepth
from tests.test_review import BASE, STACK, changed, cli, commit_edit, orders, repo, stack_file  # noqa: F401 (fixture)
from tools.lib import engine
from tools.lib.mockrun import record_program
from tools.lib.queue_guard import guard_section, lost_queues


def steps_of(program_copy: Path, old: dict, new: dict) -> list[engine.Step]:
    recordings = []
    for config in (old, new):
        (program_copy / f"Pulumi.{STACK}.yaml").write_text(stack_file(config))
        recordings.append(record_program(STACK, program_copy))
    return engine.diff(*recordings)


def quorum_orders_without_audit(config: dict) -> None:
    orders(config)["type"] = "quorum"
    config["vhosts"][0]["queues"] = [orders(config)]


def test_live_depths_of_every_deleted_or_replaced_queue_fullest_first(program_copy: Path):
    steps = steps_of(program_copy, BASE, changed(quorum_orders_without_audit))
    lost = lost_queues(steps)
    assert {(q.queue, q.op) for q in lost} == {("orders", "replace"), ("orders.wait.1", "replace"),
                                               ("orders.wait.2", "replace"), ("orders.wait.3", "replace"),
                                               ("orders.error", "replace"), ("audit", "delete")}
    held = {"orders": QueueDepth("shop", "orders", 1200, 34, 0, 2, "classic"),
            "orders.wait.2": QueueDepth("shop", "orders.wait.2", 5, 0, 0, 0, "classic")}
    read_queues: list[str] = []

    def read(vhost: str, queue: str) -> QueueDepth | None:
        read_queues.append(queue)
        assert vhost == "shop"
        if queue == "orders.error":
            raise DepthError("management API at http://rabbit:15672 unreachable: timed out")
        if queue == "audit":
            return None
        return held.get(queue, QueueDepth("shop", queue, 0, 0, 0, 0, "classic"))

    section = guard_section(steps, (), read, "http://rabbit:15672")
    assert sorted(read_queues) == sorted(q.queue for q in lost)
    lines = section.markdown.splitlines()
    depths = lines[lines.index("### What the deleted or replaced queues hold now (http://rabbit:15672)"):]
    depth_lines = [line for line in depths if line.startswith("- ")]
    assert depth_lines == [
        "- `shop` / `orders` (replace): holds **1,234** messages now (1,200 ready, 34 unacknowledged (2 consumers))",
        "- `shop` / `orders.wait.2` (replace): holds **5** messages now (5 ready, 0 unacknowledged)",
        "- 2 other queues hold no message now",
        "- 1 queue is not on the broker",
        "- could not read `shop` / `orders.error`: management API at http://rabbit:15672 unreachable: timed out",
    ]
    assert "### What the deleted or replaced queues hold now (http://rabbit:15672)" in lines
    assert not section.data_loss
    # Said before apply: the path `pulumi up` would refuse to change now, each queue that stops it named with its count.
    heading = "### What the deleted or replaced queues hold now (http://rabbit:15672)"
    refused = lines[lines.index("### Refused if applied now") + 2:lines.index(heading) - 1]
    assert refused == [
        "- ⛔ `shop` / `orders`: `pulumi up` refuses this change now, because `orders` holds **1,234**, "
        "`orders.wait.2` holds **5**, `orders.error` cannot be read; it deletes nothing of the path until every queue "
        "of it is empty (a migration: `make migrate-status` says when)."]
    waived = guard_section(steps, ["shop/orders", "shop/orders.wait.2", "shop/orders.error"], read)
    assert "### Refused if applied now" not in waived.markdown


def test_offline_and_without_waivers_the_review_gets_nothing(program_copy: Path):
    steps = steps_of(program_copy, BASE, changed(quorum_orders_without_audit))
    assert guard_section(steps, (), None) == guard_section(steps, (), None, "x")
    offline = guard_section(steps, (), None)
    assert not offline.data_loss and "### What the deleted or replaced queues hold now" not in offline.markdown
    # Offline, the paths the change deletes a part of are still listed, with what the guard reads first.
    assert offline.markdown.startswith("\n\n### Retry paths this change deletes a part of")
    assert "- `shop` / `audit`: deletes or replaces `Queue audit`. `pulumi up` first reads `audit`, whose messages " \
           "need what changes, and refuses, touching nothing, while any of them holds one." \
        in offline.markdown.splitlines()
    unchanged = steps_of(program_copy, BASE, BASE)
    assert guard_section(unchanged, (), lambda v, q: None).markdown == ""  # nothing deleted: nothing read


def test_each_waiver_is_a_data_loss_line_and_a_stale_one_says_to_remove_it(program_copy: Path):
    steps = steps_of(program_copy, BASE, changed(quorum_orders_without_audit))
    section = guard_section(steps, ["shop/orders", "shop/payments"], None)
    assert section.data_loss
    lines = section.markdown.splitlines()
    assert "- ⚠️ **data loss**: `shop/orders` — this change replaces it, and `delete_with_messages` lets " \
           "`pulumi up` do so with every message it holds." in lines
    assert "- ⚠️ **data loss**: `shop/payments` — this change neither deletes nor replaces it: remove the entry, or " \
           "a later change deletes it with its messages unguarded." in lines
    assert "ALLOW_DATA_LOSS=1" in section.markdown


def test_the_review_exits_2_on_a_waiver_until_acknowledged(repo: Path):  # noqa: F811 (fixture)
    commit_edit(repo, "config:\n", 'config:\n  rabbitmq-retry:delete_with_messages: ["shop/orders.billing"]\n')
    waived = cli(repo, "--base", "HEAD", "--stack", "dev")
    assert waived.returncode == 2, waived.stderr
    assert "**No changes**" in waived.stdout and "`shop/orders.billing` — this change neither deletes" in waived.stdout
    assert cli(repo, "--base", "HEAD", "--stack", "dev", ALLOW_DATA_LOSS="1").returncode == 0
