"""The real `pulumi up` path. The CLI and the rabbitmq provider plugin cannot be installed on our
build machines, so these tests skip there and say so; on a machine with both they run against the
local 3.10 broker: `pulumi up --stack dev`, then a second preview must plan nothing (no perpetual
diff), then destroy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.mockrun import ROOT

pytestmark = [
    pytest.mark.cli,
    pytest.mark.skipif(shutil.which("pulumi") is None,
                       reason="Pulumi CLI not installed (https://www.pulumi.com/docs/install/); "
                              "the up/preview path is unverified here"),
]


def pulumi(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{state}", "PULUMI_CONFIG_PASSPHRASE": "",
           "RABBITMQ_USERNAME": "guest", "RABBITMQ_PASSWORD": "guest", "PULUMI_SKIP_UPDATE_CHECK": "true"}
    return subprocess.run(["pulumi", *args], cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)


def test_up_then_preview_plans_nothing(tmp_path: Path):
    stack = "dev"
    assert pulumi("stack", "select", "--create", stack, state=tmp_path).returncode == 0
    try:
        up = pulumi("up", "--stack", stack, "--yes", "--skip-preview", state=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        preview = pulumi("preview", "--stack", stack, "--expect-no-changes", "--diff", state=tmp_path)
        assert preview.returncode == 0, preview.stdout + preview.stderr
    finally:
        pulumi("destroy", "--stack", stack, "--yes", state=tmp_path)
