"""`make definitions` without a broker: the export of the `every` stack's recording (tests/recordings), what it
carries and what it says it leaves out. tests/broker/test_definitions_export.py imports one into real brokers."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT
from tests.support import recordings
from tools.lib.definitions import export, policy_definition
from tools.lib.mockrun import Registered


def every() -> list[Registered]:
    rows = json.loads((recordings.RECORDINGS / "every.up.json").read_text())
    return [Registered(**row) for row in rows]


def test_policy_values_go_as_the_provider_sends_them():
    assert policy_definition({"message-ttl": "1000", "overflow": "reject-publish", "max-length": 10.0}) == {
        "message-ttl": 1000, "overflow": "reject-publish", "max-length": 10}


def test_what_definitions_cannot_carry_is_said_with_what_to_run():
    found = export(every())
    assert "operator_policies" not in found.definitions
    assert ("operator policy cap in vhost shop: definitions carry no operator policy; set it with `rabbitmqctl "
            "set_operator_policy -p shop --priority 0 --apply-to queues cap '.*' '{\"delivery-limit\": 50}'`"
            ) in found.left_out
    assert all(u["password_hash"] == "" for u in found.definitions["users"])
    assert {q["name"] for q in found.definitions["queues"]} >= {"orders.billing", "orders.billing.error"}


def test_the_command_writes_the_file_and_says_what_it_left_out(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tools.definitions", "--stack", "dev", "--output",
                           str(tmp_path / "d.json")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"wrote {tmp_path / 'd.json'}: 1 vhost, ")
    assert json.loads((tmp_path / "d.json").read_text())["vhosts"][0]["name"] == "shop"
