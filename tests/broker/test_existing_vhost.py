"""A vhost marked `existing: true` is referenced, never created. When the broker lacks it, `pulumi up` fails
with 404 vhost_not_found at its first object: `make doctor` blocks it by its key path, and `make drift` does
not claim that `pulumi up` creates it. On real 3.10 and 4.3 brokers."""

from __future__ import annotations

from typing import Any

import pytest

from components.config.load import load_stack_config
from tests.conftest import record_vhost
from tests.support.doctor import planned_objects
from tests.support.mirror import Broker, MirrorError, apply, get
from tools.lib import doctor, engine
from tools.lib.drift import findings, render
from tools.lib.snapshot import read_live


def _config(vhost: str, existing: bool) -> dict[str, Any]:
    return {"name": vhost, "existing": existing, "exchanges": [{"name": "orders", "type": "topic"}],
            "queues": [{"name": "audit", "type": "classic", "bindings": [{"exchange": "orders"}]}]}


def _doctor(broker: Broker, vhost: str, existing: bool) -> doctor.Diagnosis:
    config = load_stack_config({"vhosts": [_config(vhost, existing)]})
    endpoint = broker.client()
    return doctor.diagnose(config, planned_objects(config), doctor.read_facts(endpoint, [vhost]))


def test_applying_into_an_existing_vhost_the_broker_lacks_fails_with_404(broker: Broker, vhost: str) -> None:
    """The failure doctor and drift must foresee: nothing of the stack is created, the vhost neither."""
    resources = record_vhost(_config(vhost, existing=True), name="t", reveal_secrets=True)
    assert not [r for r in resources if r.type == engine.VHOST]
    with pytest.raises(MirrorError) as error:
        apply(broker, resources)
    assert error.value.status == 404 and "vhost" in str(error.value).lower()
    assert get(broker, f"vhosts/{vhost}") is None


def test_doctor_blocks_an_existing_vhost_the_broker_lacks_by_its_key_path(broker: Broker, vhost: str) -> None:
    found = _doctor(broker, vhost, existing=True)
    assert found.status == 2
    assert found.blocking == [
        f"vhosts[{vhost}].existing: vhost {vhost!r} is not on the broker, and an existing vhost is referenced, never "
        f"created: `pulumi up` fails with 404 vhost_not_found; create it first (`rabbitmqctl add_vhost {vhost}`), "
        f"or set vhosts[{vhost}].existing: false so that the stack creates it (and deletes it with the stack)"]
    assert not [b for b in _doctor(broker, vhost, existing=False).blocking if "existing" in b]


def test_drift_says_pulumi_up_cannot_create_what_an_absent_existing_vhost_would_hold(broker: Broker,
                                                                                       vhost: str) -> None:
    endpoint = broker.client()
    snapshots = {vhost: read_live(endpoint, vhost)}
    referenced = findings(record_vhost(_config(vhost, existing=True), name="t"), snapshots)
    assert {f.kind for f in referenced} == {"uncreatable"}
    assert {(f.type, f.name) for f in referenced} >= {("VHost", vhost), ("Queue", "audit"), ("Exchange", "orders")}
    report = render("s", referenced, snapshots)
    assert "`pulumi up` fails with 404 vhost_not_found" in report and "`pulumi up` creates it" not in report
    created = findings(record_vhost(_config(vhost, existing=False), name="t"), snapshots)
    assert {f.kind for f in created} == {"missing"}
