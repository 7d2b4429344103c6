"""`make review BASE=<any commit or tag of this repository>`: BASE's own program, from a checkout of that commit, run
by today's tools, even from before those tools existed; and the JSON documents of `make evaluate`, `make plan` and
`make review`, each valid against its schema in docs/schemas/.

The commits come from this repository's own history (CI clones it whole); a shallow clone skips them, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tools.lib.checkout import checkout
from tools.lib.engine import STASH
from tools.lib.evaluation import NO_PLAN, OWN_PLAN, SCHEMA_VERSION, TOOLS_PLAN, Evaluation
from tools.lib.mockrun import ROOT
from tools.lib.risk import DATA_LOSS


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def history() -> None:
    """Skip unless this project is a git repository with its whole history."""
    try:
        shallow = git("rev-parse", "--is-shallow-repository")
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip(f"{ROOT} is not a git repository: the review of older commits needs this project's history")
    if shallow == "true":
        pytest.skip("a shallow clone: the review of older commits needs this project's history (git fetch --unshallow)")


def first_commit_adding(path: str) -> str:
    return git("log", "--diff-filter=A", "--format=%h", "--", path).splitlines()[-1]


def schema(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "docs" / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))


def run(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ALLOW_DATA_LOSS": ""})


def review(base: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """The review of the dev stack against `base`, as JSON (validated against its schema)."""
    done = run(sys.executable, "-m", "tools.review", "--base", base, "--stack", "dev", "--format", "json")
    assert done.returncode in (0, 2), done.stderr
    found = json.loads(done.stdout)
    jsonschema.validate(found, schema("review"))
    return found, done


def counted(recording: list[Any]) -> int:
    """RabbitMQ objects of a recording (what the summary counts)."""
    return sum(bool(r.custom) and r.type != STASH for r in recording)


def evaluated_at(commit: str, tmp: Path) -> Evaluation:
    """`commit`'s dev stack as `make review` evaluates BASE: its checkout's own program, run by today's tools."""
    checkout(commit, ROOT, tmp)
    done = run(sys.executable, "-m", "tools.evaluate", "--stack", "dev", "--root", str(tmp))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    jsonschema.validate(found, schema("evaluation"))
    return Evaluation.from_json(done.stdout)


def reviewed_as_deployed(base: str, tmp: Path) -> tuple[dict[str, Any], Evaluation]:
    """The review against `base`, checked against what `base`'s own code says it deploys: its own mock run (its
    tools/mockrun.py) registers the same objects with the same inputs as today's tools found running its program,
    and the review's counts add up on both sides; data loss exactly where a queue or vhost goes."""
    commit = git("rev-parse", "--short", base)
    evaluated = evaluated_at(commit, tmp)
    own = run(sys.executable, "-m", "tools.mockrun", "--stack", "dev", cwd=tmp)
    assert own.returncode == 0, own.stderr
    assert {(r.type, r.name): r.inputs for r in evaluated.recording} == {
        (r["type"], r["name"]): r["inputs"] for r in json.loads(own.stdout)}
    assert evaluated.program == "checkout" and evaluated.plan_source != NO_PLAN

    found, done = review(base)
    head = Evaluation.from_json(run(sys.executable, "-m", "tools.evaluate", "--stack", "dev").stdout)
    summary = found["summary"]
    assert summary["delete"] + summary["replace"] + summary["update"] + summary["same"] == counted(
        evaluated.recording)
    assert (summary["create"] + summary["import"] + summary["replace"] + summary["update"] + summary["same"]
            == counted(head.recording))
    lost = [c for c in found["changes"] if c["risk"] == DATA_LOSS]
    assert all(c["type"] in ("Queue", "VHost") and c["op"] in ("delete", "replace") for c in lost)
    assert found["status"] == (2 if lost else 0) == done.returncode
    assert found["base"] == {"revision": base, "commit": commit, "evaluation_file": None, "stack_file": True,
                             "plan_source": evaluated.plan_source}
    return found, evaluated


def test_the_oldest_stack_file_is_reviewed_as_its_own_program_deployed_it(tmp_path: Path):
    history()
    oldest = first_commit_adding("Pulumi.dev.yaml")
    found, evaluated = reviewed_as_deployed(oldest, tmp_path)
    assert evaluated.plan_source == TOOLS_PLAN  # it keeps no plans these tools read

    markdown = run("make", "-s", "review", f"BASE={oldest}", "STACK=dev")
    assert markdown.returncode == found["status"], markdown.stderr
    assert markdown.stdout.startswith(f"## RabbitMQ review: stack `dev`, `{oldest}` ({oldest}) → working tree\n\n"
                                      "BASE's own program ran under the working tree's tools; BASE's code keeps no "
                                      "plan these tools read")


@pytest.mark.parametrize("which", ["before tools/evaluate.py", "components/layout.py added", "tools/evaluate.py added",
                                   "HEAD~50"])
def test_a_commit_in_between_reviews_as_its_own_program_deployed_it(which: str, tmp_path: Path):
    history()
    base = {"before tools/evaluate.py": f"{first_commit_adding('tools/evaluate.py')}~1",
            "components/layout.py added": first_commit_adding("components/layout.py"),
            "tools/evaluate.py added": first_commit_adding("tools/evaluate.py"), "HEAD~50": "HEAD~50"}[which]
    _, evaluated = reviewed_as_deployed(base, tmp_path)
    # From the commit that keeps one evaluation per side on, BASE's own plans give the roles of its resources.
    keeps_plans = subprocess.run(["git", "merge-base", "--is-ancestor", first_commit_adding("tools/evaluate.py"), base],
                                 cwd=ROOT).returncode == 0
    assert evaluated.plan_source == (OWN_PLAN if keeps_plans else TOOLS_PLAN)


def test_make_evaluate_writes_a_versioned_document_that_make_review_reads_as_base(tmp_path: Path):
    saved = tmp_path / "deployed.json"
    made = run("make", "-s", "evaluate", "STACK=dev", f"OUTPUT={saved}")
    assert made.returncode == 0, made.stderr
    assert f"wrote {saved}: stack dev" in made.stderr
    document = json.loads(saved.read_text(encoding="utf-8"))
    jsonschema.validate(document, schema("evaluation"))
    assert document["schema_version"] == SCHEMA_VERSION and document["plan_source"] == OWN_PLAN

    reviewed = run("make", "-s", "review", f"BASE_EVALUATION={saved}", "STACK=dev")
    assert reviewed.returncode == 0, reviewed.stderr
    assert reviewed.stdout.startswith("## RabbitMQ review: stack `dev`, `deployed.json` → working tree")
    assert "**No changes**" in reviewed.stdout

    document["schema_version"] = SCHEMA_VERSION + 1
    saved.write_text(json.dumps(document), encoding="utf-8")
    refused = run(sys.executable, "-m", "tools.review", "--base-evaluation", str(saved), "--stack", "dev")
    assert refused.returncode == 1
    assert (f"error: BASE_EVALUATION {saved} has schema_version {SCHEMA_VERSION + 1}, and these tools read "
            f"{SCHEMA_VERSION}") in refused.stderr
    document["schema_version"] = SCHEMA_VERSION
    saved.write_text(json.dumps(document), encoding="utf-8")
    other = run(sys.executable, "-m", "tools.review", "--base-evaluation", str(saved), "--stack", "prod")
    assert other.returncode == 1 and f"error: BASE_EVALUATION {saved} is of stack 'dev', not 'prod'" in other.stderr


def test_make_plan_as_json_follows_its_schema():
    done = run("make", "-s", "plan", "STACK=dev", "FORMAT=json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    jsonschema.validate(plan, schema("plan"))
    queues = {r["physical_name"] for r in plan["resources"] if r["type"] == "Queue"}
    assert {"orders.billing", "orders.billing.wait.1", "orders.billing.error"} <= queues
    assert {(c["vhost"], c["queue"]) for c in plan["retry_contracts"]} >= {("shop", "orders.billing")}
