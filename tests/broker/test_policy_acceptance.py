"""Which policy keys and `apply-to` values each broker takes: every definition key the config accepts and every
`apply-to` value, PUT through the management API as a user policy and as an operator policy, must be refused
(400) exactly where the wire table (components/model/wire.py, read by components/config/capabilities.py) says preview
refuses it. Re-run it to re-measure a broker
version (`-s` prints what each broker refused)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from components.config.capabilities import APPLY_TO_VERSIONS, Version
from components.model import wire
from components.model.stack_config import APPLY_TO
from components.strategies import native
from tests.support.admin import version
from tests.support.deploy import throwaway_vhost
from tests.support.mirror import Broker, MirrorError, call, esc

VALUES: Mapping[str, object] = {
    "alternate-exchange": "unrouted", "dead-letter-exchange": "dlx", "dead-letter-routing-key": "parked",
    "dead-letter-strategy": "at-least-once", "message-ttl": 1000, "expires": 60000, "max-length": 10,
    "max-length-bytes": 1000, "max-in-memory-length": 10, "max-in-memory-bytes": 1000, "overflow": "reject-publish",
    "delivery-limit": 5, "queue-mode": "lazy", "queue-version": 2, "queue-leader-locator": "client-local",
    "initial-cluster-size": 1, "max-age": "1D", "stream-max-segment-size-bytes": 1000000,
    "consumer-timeout": 60000, "target-group-size": 1, "stream-filter-size-bytes": 32, "delayed-retry-min": 100,
    "delayed-retry-max": 1000, "ha-mode": "all", "ha-params": 1, "ha-sync-mode": "automatic",
    "ha-sync-batch-size": 1, "ha-promote-on-shutdown": "always", "ha-promote-on-failure": "always",
    "queue-master-locator": "min-masters"}
"""A value each key takes; `delayed-retry-type` is sent with the minimum it needs (4.3.6 refuses it alone)."""
COMPANIONS: Mapping[str, Mapping[str, object]] = {"delayed-retry-type": {"delayed-retry-type": "failed",
                                                                        "delayed-retry-min": 100}}
KINDS = {"policies": "user", "operator-policies": "operator"}


def _refusal(broker: Broker, vhost: str, kind: str, apply_to: str, definition: Mapping[str, object]) -> str | None:
    """The broker's 400 reason for the policy, or None when it takes it."""
    try:
        call(broker, "PUT", f"{kind}/{esc(vhost)}/probe", {"pattern": "^probe$", "apply-to": apply_to,
                                                           "definition": dict(definition)})
    except MirrorError as error:
        assert error.status == 400, error
        return str(error)
    return None


def _refused_by_table(since: wire.Since | None, version: Version) -> bool | None:
    """What the wire table says of a key on `version`: refused, taken, or None between the measured versions."""
    if since is None:
        return False
    if since.refused_by is None:
        return version < since.minimum
    return True if version <= since.refused_by else False if version >= since.minimum else None


def _apply_to_refused(value: str, version: Version) -> bool | None:
    if value not in APPLY_TO_VERSIONS:
        return False
    refused_by, accepted_by = APPLY_TO_VERSIONS[value]
    return _refused_by_table(wire.Since(accepted_by, refused_by), version)


def _probe(broker: Broker, kind: str, keys: tuple[str, ...]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    with throwaway_vhost(broker) as vhost:
        call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
        by_key = {key: _refusal(broker, vhost, kind, "queues", COMPANIONS.get(key) or {key: VALUES[key]})
                  for key in keys}
        by_apply_to = {value: _refusal(broker, vhost, kind, value, {"max-length": 10}) for value in APPLY_TO}
    return by_key, by_apply_to


@pytest.mark.parametrize("kind", KINDS, ids=KINDS.values())
def test_the_broker_refuses_exactly_the_keys_and_apply_to_values_preview_refuses_for_its_version(
        broker: Broker, kind: str) -> None:
    running = version(broker)
    operator = kind == "operator-policies"
    keys = wire.OPERATOR_POLICY_KEYS if operator else wire.POLICY_KEYS
    by_key, by_apply_to = _probe(broker, kind, keys)
    print(f"\nRabbitMQ {'.'.join(map(str, running))} {KINDS[kind]} policies refuse: "
          f"{[k for k, r in by_key.items() if r]}; apply-to {[v for v, r in by_apply_to.items() if r]}")
    expected = {key: _refused_by_table(wire.BY_KEY[key].operator_since if operator else wire.BY_KEY[key].since,
                                       running) for key in keys}
    assert {k: r is not None for k, r in by_key.items() if expected[k] is not None} == \
        {k: e for k, e in expected.items() if e is not None}, by_key
    expected_apply_to = {v: _apply_to_refused(v, running) for v in APPLY_TO}
    assert {v: r is not None for v, r in by_apply_to.items() if expected_apply_to[v] is not None} == \
        {v: e for v, e in expected_apply_to.items() if e is not None}, by_apply_to


def test_retired_keys_are_refused_by_4_3_6_and_taken_by_3_10_8(broker: Broker) -> None:
    """The config refuses the mirroring keys and queue-master-locator on every version (4.3.6 answers 400)."""
    by_key, _ = _probe(broker, "policies", ("ha-mode", "queue-master-locator"))
    assert all(by_key.values()) if version(broker) >= wire.NEWEST_MEASURED else not any(by_key.values()), by_key
    assert set(by_key) <= set(wire.RETIRED_POLICY_KEYS)


REFUSED_TOGETHER = ({"delayed-retry-type": "all"}, {"delayed-retry-type": "failed"},
                    {"delayed-retry-type": "returned"}, {"delayed-retry-min": 200, "delayed-retry-max": 100})
"""Combinations the config refuses (parsers.check_delayed_retry) although each key alone is taken."""


@pytest.mark.parametrize("kind", KINDS, ids=KINDS.values())
def test_delayed_retry_keys_are_refused_in_the_combinations_the_config_refuses(broker: Broker, kind: str) -> None:
    if version(broker) < native.MIN_BROKER_VERSION[0]:
        return  # every delayed-retry-* key is refused there (the test above)
    with throwaway_vhost(broker) as vhost:
        call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
        refused = [_refusal(broker, vhost, kind, "queues", d) for d in REFUSED_TOGETHER]
        taken = [_refusal(broker, vhost, kind, "queues", d) for d in (
            {"delayed-retry-type": "disabled"}, {"delayed-retry-type": "failed", "delayed-retry-min": 100},
            {"delayed-retry-min": 100, "delayed-retry-max": 100})]
    assert all(refused) and not any(taken), (refused, taken)
