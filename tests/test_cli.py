"""The real `pulumi up` path against the local 3.10 broker: `pulumi up --stack dev`, then a second
preview must plan nothing (no perpetual diff), then destroy.

The engine is your own CLI when it is on PATH, else the one `make setup` built from Go modules
(.tools/engine/bin, docs/engine.md), with the program's venv first on PATH as the Makefile runs it. The built
engine never downloads a plugin, and the rabbitmq provider plugin's Go module is not served by the Go module
proxy: with the built engine, the plugin must be on PATH or installed (a CLI of your own fetches it). Without
them these tests skip and say what is missing; with REQUIRE_PULUMI_CLI=1 (the GitHub Actions test job, which
installs the CLI) they fail instead."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.environment import missing
from tools.lib.mockrun import ROOT

pytestmark = pytest.mark.cli

ENGINE_PATH = os.pathsep.join([str(ROOT / ".venv" / "bin"), os.environ.get("PATH", ""),
                               str(ROOT / ".tools" / "engine" / "bin")])
"""As the Makefile's ENGINE_ENV: the program's venv, then your own tools, then the engine `make setup` built."""
BUILT = ROOT / ".tools" / "engine" / "bin" / "pulumi"


def built_engine() -> bool:
    """Is the CLI found the one `make setup` built (which never downloads a plugin), not one of your own?"""
    return shutil.which("pulumi", path=ENGINE_PATH) == str(BUILT)


@pytest.fixture(autouse=True)
def pulumi_cli(tmp_path: Path) -> None:
    required = os.environ.get("REQUIRE_PULUMI_CLI") == "1"
    if shutil.which("pulumi", path=ENGINE_PATH) is None:
        missing("no Pulumi CLI on PATH and none built in .tools/engine/bin (make setup builds it)",
                required=required, because="REQUIRE_PULUMI_CLI=1")
    if built_engine() and shutil.which("pulumi-resource-rabbitmq", path=ENGINE_PATH) is None:
        plugins = pulumi("plugin", "ls", state=tmp_path)
        if not any(line.split()[:3] == ["rabbitmq", "resource", "3.5.3"] for line in plugins.stdout.splitlines()):
            missing("the rabbitmq provider plugin 3.5.3 is neither on PATH nor installed; its Go module "
                    "(github.com/pulumi/pulumi-rabbitmq/provider/v3) is not served by the Go module proxy, so "
                    "make setup cannot build it (docs/engine.md)", required=required, because="REQUIRE_PULUMI_CLI=1")


def pulumi(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": ENGINE_PATH, "PULUMI_BACKEND_URL": f"file://{state}", "PULUMI_CONFIG_PASSPHRASE": "",
           "RABBITMQ_USERNAME": "guest", "RABBITMQ_PASSWORD": "guest", "PULUMI_SKIP_UPDATE_CHECK": "true",
           **({"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"} if built_engine() else {})}
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
