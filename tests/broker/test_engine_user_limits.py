"""The real engine drives the per-user limits dynamic provider (components/user_limits.py) on 3.10.8 and 4.3.6:
`pulumi up`, `preview`, `refresh` and `destroy` of a program that registers only a `UserLimits`, run by the CLI
and Python language host `make setup` built (docs/engine.md). It needs no rabbitmq provider plugin: the engine
runs the dynamic provider through `pulumi-resource-pulumi-python` with the `python3` first on PATH, the program's
venv here (pulumi/pulumi#5455). A CLI of your own on PATH is used instead when there is one. What is on the broker
after each step is read back over the management API."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.environment import IN_CI, missing
from tests.support.mirror import Broker, call, esc
from tools.lib.mockrun import ROOT

BUILT = ROOT / ".tools" / "engine" / "bin"
PROGRAM = '''import os
from rabbitmq_retry.user_limits import UserLimits

UserLimits("limits", os.environ["LIMITS_USER"], {"max-connections": int(os.environ["LIMITS_MAX_CONNECTIONS"])})
'''


@pytest.fixture
def user(broker: Broker) -> Iterator[str]:
    """A throw-away user (`eng-…`), deleted afterwards (its limits go with it)."""
    name = f"eng-{uuid.uuid4().hex[:10]}"
    call(broker, "PUT", f"users/{esc(name)}", {"password": "engine-test-password", "tags": ""})
    try:
        yield name
    finally:
        call(broker, "DELETE", f"users/{esc(name)}")


@pytest.fixture
def engine(tmp_path: Path, broker: Broker, user: str) -> Iterator[Callable]:
    """`pulumi <args>` in a throw-away project and file backend, on the built engine, against `broker`."""
    path = os.pathsep.join([str(ROOT / ".venv" / "bin"), os.environ["PATH"], str(BUILT)])
    cli = shutil.which("pulumi", path=path)
    if cli is None:
        missing("no Pulumi CLI on PATH and none built in .tools/engine/bin (make setup builds it)", required=IN_CI)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: engine-limits\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)
    (tmp_path / "state").mkdir()
    env = {**os.environ, "PATH": path,
           "PULUMI_HOME": str(tmp_path / "home"), "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
           "PULUMI_CONFIG_PASSPHRASE": "", "PULUMI_SKIP_UPDATE_CHECK": "true",
           "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true", "RABBITMQ_ENDPOINT": broker.management_url,
           "RABBITMQ_USERNAME": broker.username, "RABBITMQ_PASSWORD": broker.password, "LIMITS_USER": user,
           "LIMITS_MAX_CONNECTIONS": "2"}

    def pulumi(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([cli, *args, "--stack", "t", "--non-interactive"], cwd=project,
                              env={**env, **extra}, text=True, capture_output=True, timeout=300)
        assert done.returncode == 0, f"pulumi {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        assert "download" not in (done.stdout + done.stderr).lower()
        return done

    subprocess.run([cli, "stack", "init", "t"], cwd=project, env=env, check=True,
                   capture_output=True, timeout=120)
    yield pulumi


def limits(broker: Broker, user: str) -> dict[str, int]:
    status, body, _ = call(broker, "GET", f"user-limits/{esc(user)}")
    assert status == 200, body
    return dict(body[0]["value"]) if body else {}


def test_up_preview_refresh_destroy_of_user_limits_through_the_engine(broker: Broker, user: str,
                                                                      engine: Callable) -> None:
    engine("up", "--yes", "--skip-preview")
    assert limits(broker, user) == {"max-connections": 2}
    engine("preview", "--expect-no-changes")
    engine("refresh", "--yes", "--expect-no-changes")

    call(broker, "PUT", f"user-limits/{esc(user)}/max-connections", {"value": 7})  # a change by hand
    drift = engine("refresh", "--preview-only")
    assert "1 to update" in drift.stdout, drift.stdout
    engine("up", "--yes", "--skip-preview", "--refresh")
    assert limits(broker, user) == {"max-connections": 2}

    engine("up", "--yes", "--skip-preview", LIMITS_MAX_CONNECTIONS="3")
    assert limits(broker, user) == {"max-connections": 3}
    engine("destroy", "--yes")
    assert limits(broker, user) == {}
