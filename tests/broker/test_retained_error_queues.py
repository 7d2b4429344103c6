"""What `retain_error_queues: true` really does to a change, on real 3.10 and 4.3 brokers, applied the
provider's way (tests/support/mirror.py). `make review` must say the same (tests/test_review.py):
- a type switch replaces the error queue, but a retained resource is not deleted on replace: creating the
  same-name queue of the new type then fails with 400 "inequivalent arg 'x-queue-type'", after the input and
  wait queues were already replaced: `pulumi up` stops halfway;
- removing the vhost deletes its retained error queues with it: retain_on_delete cannot keep them.
"""

from __future__ import annotations

import pytest

from tests.support.amqp import channel, message_counts
from tests.support.deploy import Deployer
from tests.support.mirror import Broker, MirrorError, apply_update, call, esc, get

CLASSIC = {"queues": [{"name": "orders", "type": "classic", "retry": {"delays": ["1s"]}}]}
QUORUM = {"queues": [{"name": "orders", "type": "quorum", "retry": {"delays": ["1s"]}}]}


def _park(broker: Broker, vhost: str) -> None:
    with channel(broker, vhost) as opened:
        opened.basic_publish("", "orders.error", b"parked")
    assert message_counts(broker, vhost, ["orders.error"]) == {"orders.error": 1}


def test_a_type_switch_with_retained_error_queues_fails_halfway(broker: Broker, deploy: Deployer) -> None:
    before = deploy(CLASSIC, retain_error_queues=True)
    _park(broker, before.vhost)
    with channel(broker, before.vhost) as opened:
        opened.basic_publish("", "orders", b"waiting")
    with pytest.raises(MirrorError) as error:
        deploy.update(before, QUORUM, retain_error_queues=True)
    assert error.value.status == 400 and "inequivalent arg 'x-queue-type'" in str(error.value)
    assert "orders.error" in str(error.value)
    # Halfway: the input and wait queues were deleted first (and some created again, empty); the retained error
    # queue is still the classic one, with its message.
    queues = {q["name"]: q for q in get(broker, f"queues/{esc(before.vhost)}")}
    assert queues["orders.error"]["type"] == "classic"
    assert message_counts(broker, before.vhost, ["orders.error"]) == {"orders.error": 1}
    assert "orders" not in queues or message_counts(broker, before.vhost, ["orders"]) == {"orders": 0}


def test_the_way_out_drain_and_delete_the_retained_error_queue_first(broker: Broker, deploy: Deployer) -> None:
    """What the review offers: its parked messages moved elsewhere, the old error queue deleted by hand, then
    the same change completes."""
    before = deploy(CLASSIC, retain_error_queues=True)
    call(broker, "DELETE", f"queues/{esc(before.vhost)}/orders.error?")
    after = deploy.update(before, QUORUM, retain_error_queues=True)
    assert get(broker, f"queues/{esc(after.vhost)}/orders.error")["type"] == "quorum"


def test_removing_the_vhost_deletes_its_retained_error_queues(broker: Broker, deploy: Deployer) -> None:
    before = deploy(CLASSIC, retain_error_queues=True)
    _park(broker, before.vhost)
    apply_update(broker, before.resources, [])
    assert get(broker, f"vhosts/{esc(before.vhost)}") is None
    assert get(broker, f"queues/{esc(before.vhost)}/orders.error") is None
