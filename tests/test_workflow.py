"""The GitHub Actions workflow cannot run here. actionlint (with shellcheck on its `run:` scripts) checks it
the way GitHub would read it; its stack discovery and its comment script run here on stand-ins; the rest
asserts the steps docs/operations.md (GitHub Actions) promises."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.environment import missing

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "topology.yml"
VENV_BIN = Path(sys.executable).parent


def load() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(job: str) -> list[dict]:
    return load()["jobs"][job]["steps"]


def step(job: str, name_starts: str) -> dict:
    [found] = [s for s in steps(job) if s.get("name", "").startswith(name_starts)]
    return found


def uses(job: str, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


def required_tool(path: Path | None, what: str) -> Path:
    """`path`, or skip saying why (fail under CI=true, where `make setup` installs it)."""
    if path is not None and path.exists():
        return path
    missing(f"{what} is not installed; `make setup` installs it")


def actionlint(workflow: Path) -> subprocess.CompletedProcess[str]:
    binary = required_tool(VENV_BIN / "actionlint", f"actionlint ({VENV_BIN}/actionlint, requirements.txt)")
    shellcheck = VENV_BIN / "shellcheck"
    options = ["-shellcheck", str(shellcheck)] if shellcheck.exists() else []
    return subprocess.run([str(binary), "-no-color", *options, str(workflow)],
                          cwd=ROOT, text=True, capture_output=True, timeout=300)


def test_actionlint_finds_nothing():
    result = actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_job_that_does_not_exist(tmp_path: Path):
    broken = tmp_path / "topology.yml"
    broken.write_text(WORKFLOW.read_text().replace("needs.stacks.outputs.stacks", "needs.stack.outputs.stacks"))

    result = actionlint(broken)

    assert result.returncode != 0 and 'property "stack" is not defined' in result.stdout


def test_it_runs_on_pull_requests_and_on_main():
    # YAML 1.1 reads the key `on` as True.
    triggers = load()[True]
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]


def discover_stacks(project: Path, output: Path) -> list[str]:
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    subprocess.run(["bash", "-e", "-c", step("stacks", "List the stacks")["run"]], cwd=project, env=env, check=True)
    [line] = output.read_text().splitlines()
    key, _, value = line.partition("=")
    assert key == "stacks"
    return json.loads(value)


def test_every_stack_file_is_reviewed(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    for name in ["Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.eu.prod.yaml", "Pulumi.staging-eu.yaml", "README.md"]:
        (project / name).write_text("")
    assert discover_stacks(project, tmp_path / "output-1") == ["dev", "eu.prod", "staging-eu"]
    in_this_repository = sorted(f.name.removeprefix("Pulumi.").removesuffix(".yaml")
                                for f in ROOT.glob("Pulumi.*.yaml"))
    assert discover_stacks(ROOT, tmp_path / "output-2") == in_this_repository

    review = load()["jobs"]["review"]
    assert review["needs"] == "stacks"
    assert review["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    assert "needs.stacks.outputs.stacks != '[]'" in review["if"]  # an empty matrix is an error


def test_pull_requests_run_the_tests_and_review_against_the_base():
    assert any(s.get("run", "").endswith("make test") for s in steps("test"))
    review = step("review", "Review")
    assert review["env"]["BASE"] == "${{ github.event.pull_request.base.sha }}"
    # the lean install's command, not make: make turns every failure into 2, and the step must tell an error from
    # data loss
    assert step("review", "Install")["run"].endswith('.venv/bin/pip install ".[tools]"')
    assert review["run"].startswith('.venv/bin/rabbitmq-retry review --base "$BASE" --stack "$STACK"')
    assert '--output "review-$STACK.md"' in review["run"] and "make " not in review["run"]
    assert "exit 1 = error" in review["name"] and "exit 2 = unacknowledged data loss" in review["name"]
    assert load()["jobs"]["review"]["permissions"]["pull-requests"] == "write"


def test_the_full_review_is_uploaded_as_an_artifact():
    assert '--output-full "review-$STACK-full.md"' in step("review", "Review")["run"]
    [upload] = uses("review", "actions/upload-artifact")
    assert upload["with"]["path"] == "review-${{ matrix.stack }}-full.md" and upload["if"] == "always()"


def test_the_test_job_installs_the_pulumi_cli_and_requires_its_test():
    test_steps = steps("test")
    [install] = uses("test", "pulumi/actions")
    assert "command" not in install.get("with", {})  # install only
    pinned = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.txt").read_text(), re.MULTILINE)
    assert pinned and install["with"]["pulumi-version"] == pinned.group(1)
    run_tests = next(s for s in test_steps if s.get("run", "").endswith("make test"))
    assert test_steps.index(install) < test_steps.index(run_tests)
    assert "REQUIRE_PULUMI_CLI=1" in run_tests["run"] and "CI=true" in run_tests["run"]
    assert 'PATH=$PATH' in run_tests["run"]  # sudo would drop the CLI from PATH


def test_preview_runs_only_with_credentials_and_up_only_on_main():
    [preview] = uses("review", "pulumi/actions")
    assert preview["with"]["command"] == "preview" and preview["if"] == "env.PULUMI_BACKEND_URL != ''"
    assert preview["with"]["edit-pr-comment"] is True
    up = load()["jobs"]["up"]
    assert up["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert [s["with"]["command"] for s in uses("up", "pulumi/actions")] == ["up"]


# The comment step's script, run by node the way actions/github-script runs it (an async function of
# require, github, context and core), against a stand-in for the GitHub API that records each call.
GITHUB_SCRIPT_HARNESS = """
const calls = [];
const github = {
  rest: { issues: {
    listComments: 'listComments',
    createComment: async (args) => { calls.push({ call: 'create', ...args }); },
    updateComment: async (args) => { calls.push({ call: 'update', ...args }); },
  } },
  paginate: async (method, args) => { calls.push({ call: 'paginate', method, ...args });
                                      return JSON.parse(process.env.EXISTING_COMMENTS); },
};
const context = { repo: { owner: 'platform', repo: 'topology' }, issue: { number: 42 } };
const core = { warning: (message) => calls.push({ call: 'warning', message }) };
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
new AsyncFunction('require', 'github', 'context', 'core', process.env.SCRIPT)(require, github, context, core)
  .then(() => console.log(JSON.stringify(calls)));
"""


def post_review(workdir: Path, stack: str, existing: list[dict]) -> list[dict]:
    node = required_tool(Path(found) if (found := shutil.which("node")) else None, "node")
    [post] = uses("review", "actions/github-script")
    env = {**os.environ, "SCRIPT": post["with"]["script"], "STACK": stack, "EXISTING_COMMENTS": json.dumps(existing)}
    result = subprocess.run([str(node), "-e", GITHUB_SCRIPT_HARNESS], cwd=workdir, env=env, text=True,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def marker(stack: str) -> str:
    return f"<!-- rabbitmq-retry review: {stack} -->"


def test_the_first_review_of_a_stack_creates_its_comment_with_the_hidden_marker(tmp_path: Path):
    (tmp_path / "review-dev.md").write_text("## RabbitMQ review: stack `dev`\n")

    calls = post_review(tmp_path, "dev", existing=[])

    assert [c["call"] for c in calls] == ["paginate", "create"]
    assert calls[0]["method"] == "listComments" and calls[0]["issue_number"] == 42
    assert calls[1]["body"] == marker("dev") + "\n## RabbitMQ review: stack `dev`\n"


def test_a_later_push_updates_that_stacks_comment_and_no_other(tmp_path: Path):
    (tmp_path / "review-dev.md").write_text("second push\n")
    existing = [
        {"id": 1, "user": {"type": "User"}, "body": f"quoting {marker('dev')}"},
        {"id": 2, "user": {"type": "Bot"}, "body": marker("prod") + "\nprod review"},
        {"id": 3, "user": {"type": "Bot"}, "body": marker("dev") + "\nfirst push"},
    ]

    calls = post_review(tmp_path, "dev", existing)

    assert [(c["call"], c.get("comment_id")) for c in calls] == [("paginate", None), ("update", 3)]
    assert calls[1]["body"] == marker("dev") + "\nsecond push\n"


def test_a_review_too_long_for_a_comment_is_cut_and_points_to_the_artifact(tmp_path: Path):
    (tmp_path / "review-prod.md").write_text("| row |\n" * 20_000)

    calls = post_review(tmp_path, "prod", existing=[])

    body = calls[-1]["body"]
    assert len(body) <= 65536 and body.startswith(marker("prod")) and "review-prod-full" in body


def test_no_review_file_posts_nothing(tmp_path: Path):
    calls = post_review(tmp_path, "dev", existing=[])

    assert [c["call"] for c in calls] == ["warning"]
