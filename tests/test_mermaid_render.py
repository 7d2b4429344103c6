"""The plan's and the review's Mermaid diagrams render with a real Mermaid renderer, so a syntax error fails
here instead of showing up as "Unable to render rich display" in a pull request.

The renderer is npm's @mermaid-js/mermaid-cli (`mmdc`) driving Chromium, which `make setup` installs into
.tools/mermaid/ together with the browser settings it found (puppeteer.json). Without it these tests skip
and say why; under CI=true, where `make setup` ran, a missing renderer fails."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.environment import missing

ROOT = Path(__file__).resolve().parent.parent
MERMAID_DIR = ROOT / ".tools" / "mermaid"
MMDC = MERMAID_DIR / "node_modules" / ".bin" / "mmdc"
BROWSER_SETTINGS = MERMAID_DIR / "puppeteer.json"
MERMAID_BLOCK = re.compile(r"^```mermaid\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def renderer_missing() -> str | None:
    """Why the renderer cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not MMDC.exists() or not BROWSER_SETTINGS.exists():
        return f"{MMDC.relative_to(ROOT)} or {BROWSER_SETTINGS.relative_to(ROOT)} is missing"
    browser = json.loads(BROWSER_SETTINGS.read_text()).get("executablePath", "")
    if not Path(browser).exists():
        return f"the browser {browser!r} named in {BROWSER_SETTINGS.relative_to(ROOT)} is missing"
    return None


@pytest.fixture(scope="module")
def mmdc() -> Path:
    reason = renderer_missing()
    if reason is not None:
        missing(f"Mermaid renderer unavailable: {reason}; `make setup` installs it")
    return MMDC


def render(mmdc: Path, diagrams: dict[str, str], into: Path) -> subprocess.CompletedProcess[str]:
    """Render every diagram in one mmdc call (one browser start): a Markdown file with one block each.
    mmdc writes one SVG per block and exits non-zero on the first that does not parse."""
    source = into / "diagrams.md"
    source.write_text("".join(f"## {title}\n\n```mermaid\n{body}\n```\n\n" for title, body in diagrams.items()))
    return subprocess.run([str(mmdc), "--quiet", "-p", str(BROWSER_SETTINGS), "-i", source.name, "-o", "rendered.md"],
                          cwd=into, text=True, capture_output=True, timeout=600)


def mermaid_blocks(markdown: str, source: str) -> dict[str, str]:
    return {f"{source} #{number}": body for number, body in enumerate(MERMAID_BLOCK.findall(markdown), start=1)}


def run_tool(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, text=True, capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def review_of_changed_delays(project: Path) -> str:
    """`tools.review` on a copy of the project whose dev stack drops one wait tier (drawn as removed) and
    changes another's delay (drawn as changed), compared with the copy's own first commit."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(project, filter="data")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], cwd=project, check=True)
    stack_file = project / "Pulumi.dev.yaml"
    config = stack_file.read_text()
    for before, after in [("delays: [1s, 5s, 15s]", "delays: [1s, 5s]"), ("delays: [2s, 10s]", "delays: [3s, 10s]")]:
        assert before in config, f"Pulumi.dev.yaml no longer has {before!r}: pick another change for this test"
        config = config.replace(before, after)
    stack_file.write_text(config)
    output = project / "review.md"
    run_tool("tools.review", "--base", "HEAD", "--stack", "dev", "--root", str(project), "--output", str(output),
             "--allow-data-loss")
    return output.read_text()


def test_the_diagrams_of_plans_and_reviews_render(mmdc: Path, tmp_path: Path):
    project, rendered = tmp_path / "project", tmp_path / "rendered"
    project.mkdir()
    rendered.mkdir()
    sources = {f"plan {stack}": run_tool("tools.plan_report", "--stack", stack) for stack in ("dev", "prod")}
    sources["review of changed delays"] = review_of_changed_delays(project)
    diagrams: dict[str, str] = {}
    for source, markdown in sources.items():
        blocks = mermaid_blocks(markdown, source)
        assert blocks, f"{source}: no Mermaid diagram in its output"
        diagrams.update(blocks)
    assert any("style " in body for body in mermaid_blocks(sources["review of changed delays"], "review").values())

    result = render(mmdc, diagrams, rendered)

    assert result.returncode == 0, f"mmdc failed:\n{result.stdout}{result.stderr}"
    svgs = sorted(rendered.glob("rendered-*.svg"))
    assert len(svgs) == len(diagrams)
    assert all("<svg" in svg.read_text() for svg in svgs)


def test_the_diagrams_of_the_docs_render(mmdc: Path, tmp_path: Path):
    """The hand-written diagrams of the README, docs/ and bench/README.md."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
    diagrams: dict[str, str] = {}
    for document in documents:
        diagrams.update(mermaid_blocks(document.read_text(encoding="utf-8"), str(document.relative_to(ROOT))))
    assert diagrams, "no Mermaid diagram in the docs"

    result = render(mmdc, diagrams, tmp_path)

    assert result.returncode == 0, f"mmdc failed:\n{result.stdout}{result.stderr}"
    assert len(sorted(tmp_path.glob("rendered-*.svg"))) == len(diagrams)


def test_a_diagram_with_a_syntax_error_fails_to_render(mmdc: Path, tmp_path: Path):
    broken = 'flowchart LR\n  input[["orders"]] -- "reject --> retry'

    result = render(mmdc, {"valid": "flowchart LR\n  a --> b", "broken": broken}, tmp_path)

    assert result.returncode != 0
    assert "Parse error" in result.stdout + result.stderr
