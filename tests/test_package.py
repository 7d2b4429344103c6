"""The installed package: `pip install` of this repository gives `rabbitmq_retry`, typed and whole, and the
reuse example of docs/components.md runs as written in a project that has a `components/` folder of its own;
it also gives the client package `rabbitmq_retry_client`, typed, and its `rabbitmq-retry` command. An application
that only consumes needs pika alone: Pulumi comes with the `components` extra, and the client imports
nothing of Pulumi's, the components' or the tools'.

Built offline from the working tree (`--no-index --no-build-isolation`: the setuptools of requirements.txt).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

REUSE_DOC = ROOT / "docs" / "components.md"

# Runs in a fresh interpreter whose path is the user's project, then the installed package and the
# venv's site-packages: never this repository, whose own `components` must not be what gets imported.
RUN_EXAMPLE = """
import json, runpy, sys

sys.path.append(sys.argv[1])  # a copy of this repository's tools/ alone, without its components/
from tools.lib import mockrun

import components  # the user's own folder, imported by their program before ours

registered = mockrun.record(lambda: runpy.run_path("__main__.py", run_name="__main__"))
modules = {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
           if name.split(".")[0] in ("components", "rabbitmq_retry")}
json.dump({"registered": [vars(r) for r in registered], "modules": modules}, sys.stdout)
"""


def reuse_example() -> str:
    """The first Python block of docs/components.md, verbatim."""
    match = re.search(r"```python\n(.*?)```", REUSE_DOC.read_text(), re.DOTALL)
    assert match, f"no python block in {REUSE_DOC}"
    return match.group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip install --target` of a copy of the packaging sources (pip builds in the source tree)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "LICENSE"):
        shutil.copy(ROOT / name, source)
    for package in ("components", "rabbitmq_retry_client"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-index", "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True)
    return target


def test_every_module_is_installed_under_its_own_name_with_py_typed(installed: Path):
    package = installed / "rabbitmq_retry"
    shipped = sorted(p.relative_to(ROOT / "components").as_posix() for p in (ROOT / "components").rglob("*")
                     if p.suffix == ".py" or p.name == "py.typed")
    assert "py.typed" in shipped and "__init__.py" in shipped
    assert sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                  if p.suffix == ".py" or p.name == "py.typed") == shipped
    assert not (installed / "components").exists()


@pytest.fixture(scope="module")
def example_run(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    project = tmp_path_factory.mktemp("user-project")
    (project / "components").mkdir()
    (project / "components" / "__init__.py").write_text('"""The user\'s own components."""\nOWNER = "user"\n')
    (project / "__main__.py").write_text(reuse_example())
    (project / "run_example.py").write_text(RUN_EXAMPLE)
    tooling = tmp_path_factory.mktemp("tooling")
    shutil.copytree(ROOT / "tools", tooling / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(installed)}
    run = subprocess.run([sys.executable, "run_example.py", str(tooling)], cwd=project,
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return {**json.loads(run.stdout), "project": project, "installed": installed}


def test_the_reuse_example_runs_as_written_from_the_installed_package(example_run: dict[str, Any]):
    registered = [r for r in example_run["registered"] if r["type"] != "pulumi:pulumi:Stack"]
    by_type: dict[str, list[str]] = {}
    for r in registered:
        by_type.setdefault(r["type"].rsplit(":", 1)[-1], []).append(r["name"])
    assert by_type["RetryableQueue"] == ["billing"]
    assert sorted(by_type["Queue"]) == ["billing-error", "billing-input", "billing-wait-1", "billing-wait-2",
                                        "billing-wait-3"]
    assert sorted(by_type["Exchange"]) == ["billing-error-exchange", "billing-requeue-exchange",
                                           "billing-retry-exchange"]
    queues = [r for r in registered if r["type"] == "rabbitmq:index/queue:Queue"]
    # The example's options took effect: nothing was silently ignored.
    assert all(r["protect"] for r in queues)
    assert [r["inputs"]["name"] for r in registered if r["retain_on_delete"]] == ["billing.error"]
    assert all(r["inputs"]["vhost"] == "payments" for r in queues)


def test_the_users_components_folder_stays_theirs(example_run: dict[str, Any]):
    modules = example_run["modules"]
    assert modules["components"] == str(example_run["project"] / "components" / "__init__.py")
    assert [name for name in modules if name.startswith("components.")] == []
    ours = {name: path for name, path in modules.items() if name.split(".")[0] == "rabbitmq_retry"}
    assert "rabbitmq_retry.pulumi.retryable_queue" in ours
    assert all(Path(path).is_relative_to(example_run["installed"]) for path in ours.values()), ours


def test_the_client_package_is_installed_whole_with_py_typed_and_the_contract_schema(installed: Path):
    source = ROOT / "rabbitmq_retry_client"
    shipped = sorted(p.relative_to(source).as_posix() for p in source.rglob("*")
                     if p.suffix in (".py", ".json") or p.name == "py.typed")
    assert "py.typed" in shipped and "cli.py" in shipped and "contract.schema.json" in shipped
    package = installed / "rabbitmq_retry_client"
    assert sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                  if p.suffix in (".py", ".json") or p.name == "py.typed") == shipped


def test_the_console_script_runs_from_the_installed_package(installed: Path, tmp_path: Path):
    """`rabbitmq-retry` as pip wrote it, run outside this repository: it imports the installed client and
    refuses an unfiltered purge before connecting to anything."""
    script = installed / "bin" / "rabbitmq-retry"
    assert script.is_file()
    contract = {"vhost": "shop", "queue": "orders", "queue_type": "quorum", "retry_exchange": "orders.retry",
                "reject_routes_to": "wait.1", "tiers": [{"routing_key": "wait.1", "delay_ms": 1000}],
                "max_retries": 3, "attempt_header": "retry-count", "error_exchange": "orders.error",
                "error_queue": "orders.error"}
    (tmp_path / "contracts.json").write_text(json.dumps({"shop": {"orders": contract}}))
    env = {**os.environ, "PYTHONPATH": str(installed)}
    run = subprocess.run([sys.executable, str(script), "parked", "purge", "--contract", "contracts.json", "--yes"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (2, ""), run.stderr
    assert run.stderr == ("rabbitmq-retry: error: refusing to purge every parked message: give a filter "
                          "(--reason, --older-than, --newer-than, --limit) or --all\n")
    probe = subprocess.run([sys.executable, "-c", "import rabbitmq_retry_client as c; print(c.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert Path(probe.stdout.strip()).is_relative_to(installed)


def requirements(installed: Path) -> dict[str | None, list[str]]:
    """The installed distribution's Requires-Dist, by extra (None: what `pip install rabbitmq-retry` pulls in)."""
    (metadata,) = installed.glob("rabbitmq_retry-*.dist-info/METADATA")
    found: dict[str | None, list[str]] = {}
    for line in metadata.read_text().splitlines():
        if line.startswith("Requires-Dist: "):
            requirement, _, marker = line.removeprefix("Requires-Dist: ").partition(";")
            extra = re.fullmatch(r'\s*extra == "([^"]+)"\s*', marker) if marker else None
            assert not marker or extra, f"unexpected marker in {line!r}"
            found.setdefault(extra.group(1) if extra else None, []).append(re.split(r"[<>=~!; ]", requirement)[0])
    return found


def test_the_client_installs_with_pika_and_jsonschema_alone_and_the_components_ask_for_pulumi(installed: Path):
    """jsonschema: the client validates each contract against the schema it ships, as consumers in other languages
    can (rabbitmq_retry_client/contract.py); the asyncio consumer's aio-pika is an extra of its own."""
    assert requirements(installed) == {None: ["pika", "jsonschema"], "aio": ["aio-pika"],
                                       "components": ["pulumi", "pulumi-rabbitmq", "PyYAML"],
                                       "tools": ["rabbitmq-retry[components]"]}


# Every module of the installed client imported, and its command run, in an interpreter that refuses to
# import Pulumi, the provider, the components (under either name), the tools and PyYAML; an attempt is
# recorded even when the client would catch the ImportError.
IMPORT_CLIENT_WITHOUT_PULUMI = """
import importlib, json, pkgutil, sys

BLOCKED = {"pulumi", "pulumi_rabbitmq", "components", "rabbitmq_retry", "tools", "yaml"}
attempts = []

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            attempts.append(name)
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Refuse())
import rabbitmq_retry_client
modules = {"rabbitmq_retry_client": rabbitmq_retry_client.__file__}
for info in pkgutil.walk_packages(rabbitmq_retry_client.__path__, "rabbitmq_retry_client."):
    if info.name != "rabbitmq_retry_client.__main__":  # it runs the command: below
        modules[info.name] = importlib.import_module(info.name).__file__
from rabbitmq_retry_client.cli import main
try:
    main(["--help"])
except SystemExit as done:
    status = done.code
json.dump({"modules": modules, "attempts": attempts, "status": status}, sys.stderr)
"""


def test_the_client_and_its_command_import_nothing_of_pulumi(installed: Path, tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    run = subprocess.run([sys.executable, "-c", IMPORT_CLIENT_WITHOUT_PULUMI], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stderr)
    assert result["attempts"] == []
    assert result["status"] == 0 and "usage: rabbitmq-retry" in run.stdout
    shipped = {p.stem for p in (ROOT / "rabbitmq_retry_client").glob("*.py")} - {"__init__", "__main__"}
    assert {name.removeprefix("rabbitmq_retry_client.") for name in result["modules"]} - {"rabbitmq_retry_client"} \
        == shipped
    assert all(Path(path).is_relative_to(installed) for path in result["modules"].values())
