"""Our own exports come back as they were: for every stack we ship and the recordings' stack, `make definitions`,
then `make adopt DEFINITIONS=… CONTRACTS=…` of each vhost, gives a stack file whose `make definitions` holds the same
queues (with their arguments), exchanges, bindings, policies, users and their permissions, with no migration.
Without the contracts, what the broker does not keep (`max_retries`) is a decision the stack file holds and `make
plan` refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config.load import load_vhost
from components.model.problems import ConfigError
from tools.lib.adopt import REQUIRED, adopt, report, stack_file
from tools.lib.contracts import stack_contracts
from tools.lib.definitions import export, text
from tools.lib.evaluation import evaluate
from tools.lib.mockrun import close_event_loop
from tools.lib.snapshot import read_file

ROOT = Path(__file__).resolve().parents[1]
STACKS = [(ROOT, "dev"), (ROOT, "prod"), (ROOT / "tests" / "recordings", "every")]
COMPARED = ("queues", "exchanges", "bindings", "policies", "users", "permissions", "topic_permissions")


def _definitions(root: Path, stack: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """`make definitions` and `make contracts` of the stack (evaluated as `pulumi up` runs it)."""
    monkeypatch.setenv("RABBITMQ_PASSWORD", "not-a-secret-here")
    try:
        evaluated = evaluate(stack, root, preview=False)
    finally:
        close_event_loop()
    return json.loads(text(export(evaluated.recording))), stack_contracts(evaluated.recording)


def _same(found: dict[str, Any], vhost: str) -> dict[str, list[str]]:
    return {key: sorted(json.dumps(item, sort_keys=True) for item in found.get(key, [])
                        if key == "users" or item.get("vhost") == vhost) for key in COMPARED}


@pytest.mark.parametrize(("root", "stack"), STACKS, ids=[s for _, s in STACKS])
def test_our_own_export_adopted_with_its_contracts_exports_the_same(root: Path, stack: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    first, contracts = _definitions(root, stack, monkeypatch)
    exported = tmp_path / "definitions.json"
    exported.write_text(json.dumps(first))
    adopted_root = tmp_path / "adopted"
    adopted_root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", adopted_root)
    vhosts = []
    for vhost in sorted(v["name"] for v in first["vhosts"]):
        adoption = adopt(read_file(exported, vhost), contracts=contracts.get(vhost, {}))
        assert "migrations" not in adoption.vhost and adoption.beside == {}, vhost
        assert adoption.required == {}, vhost
        vhosts += yaml.safe_load(stack_file(adoption, None))["config"]["rabbitmq-retry:vhosts"]
    # The users' passwords, which no export carries, set as the operator sets them (`pulumi config set --secret`).
    passwords = yaml.safe_load((root / f"Pulumi.{stack}.yaml").read_text())["config"].get("rabbitmq-retry:passwords")
    config = {"rabbitmq-retry:vhosts": vhosts, **({"rabbitmq-retry:passwords": passwords} if passwords else {})}
    (adopted_root / "Pulumi.back.yaml").write_text(yaml.safe_dump({"config": config}))
    second, _ = _definitions(adopted_root, "back", monkeypatch)
    for vhost in (v["name"] for v in first["vhosts"]):
        before, after = _same(first, vhost), _same(second, vhost)
        assert {k: (sorted(set(before[k]) - set(after[k])), sorted(set(after[k]) - set(before[k]))) for k in COMPARED
                if before[k] != after[k]} == {}, vhost


def test_without_the_contracts_what_the_broker_does_not_keep_is_a_decision_the_plan_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, contracts = _definitions(ROOT, "dev", monkeypatch)
    exported = tmp_path / "definitions.json"
    exported.write_text(json.dumps(first))
    adoption = adopt(read_file(exported, "shop"))
    assert adoption.required == {"": ("max_delay",), "notifications.email": ("max_retries",),
                                 "orders.billing": ("max_retries",), "orders.refunds": ("backoff", "max_retries"),
                                 "orders.shipping": ("max_retries",)}
    [vhost] = yaml.safe_load(stack_file(adoption, None))["config"]["rabbitmq-retry:vhosts"]
    assert vhost["delay_levels"]["max_delay"] == REQUIRED
    with pytest.raises(ConfigError) as refused:
        load_vhost(vhost, "vhosts[0]")
    assert f"vhosts[0].queues[orders.billing].retry.max_retries: expected an integer, got {REQUIRED!r}" \
           in str(refused.value)
    assert "vhosts[0].delay_levels.max_delay" in str(refused.value)
    assert "## Decisions required" in report(adoption, "back")
    # With them, each is read from its queue's contract.
    told = adopt(read_file(exported, "shop"), contracts=contracts["shop"])
    assert {t.queue: t.max_retries for t in told.topologies} == {q: c["max_retries"] for q, c in
                                                                contracts["shop"].items()}
