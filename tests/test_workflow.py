"""The GitHub Actions workflow cannot run here; this keeps it valid and doing what the README says."""

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "topology.yml"


def load() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(job: str) -> list[dict]:
    return load()["jobs"][job]["steps"]


def test_it_runs_on_pull_requests_and_on_main():
    # YAML 1.1 reads the key `on` as True.
    triggers = load()[True]
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]


def test_pull_requests_run_the_tests_and_post_the_review():
    assert any(s.get("run", "").endswith("make test") for s in steps("test"))
    review = steps("review")
    assert any("make review BASE=${{ github.event.pull_request.base.sha }}" in s.get("run", "") for s in review)
    assert any(s.get("uses", "").startswith("actions/github-script") for s in review)
    assert load()["jobs"]["review"]["permissions"]["pull-requests"] == "write"


def test_preview_runs_only_with_credentials_and_up_only_on_main():
    preview = [s for s in steps("review") if s.get("uses", "").startswith("pulumi/actions")]
    assert preview and preview[0]["with"]["command"] == "preview" and preview[0]["if"]
    up = load()["jobs"]["up"]
    assert up["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert [s["with"]["command"] for s in up["steps"] if s.get("uses", "").startswith("pulumi/actions")] == ["up"]
