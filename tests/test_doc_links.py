"""The documentation's relative links lead somewhere: every link in README.md, docs/*.md and bench/README.md
that is not a URL names a file or folder of this repository, and an anchor names a heading of its target (as
GitHub makes them). Paths written as code (`components/model/naming.py`) name files that exist too, so a module
that moves cannot leave the docs pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
REPO_PATH = re.compile(r"`((?:components|tools|tests|rabbitmq_retry_client|bench|scripts|docs|examples)/[\w./-]*)`")
EXTERNAL = ("http://", "https://", "mailto:")


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench" / "README.md"]


def prose(markdown: str) -> str:
    """The text outside fenced blocks and code spans, where a link is a link."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code marks and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets GitHub's -1, -2, … after the first."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        base = candidate = anchor(heading)
        number = 0
        while candidate in found:
            number += 1
            candidate = f"{base}-{number}"
        found.add(candidate)
    return found


def broken_links(document: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `document` whose file, or whose anchor in that file, does not exist."""
    text = document.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(prose(text)):
        if target.startswith(EXTERNAL):
            continue
        path, _, fragment = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists() or not linked.resolve().is_relative_to(root.resolve()):
            broken.append(f"{target}: no such file")
        elif fragment and (linked.is_dir() or fragment not in anchors(linked.read_text(encoding="utf-8"))):
            broken.append(f"{target}: no heading with that anchor")
    return broken


def missing_paths(document: Path, root: Path = ROOT) -> list[str]:
    """Repository paths written as code in `document` that do not exist."""
    return [path for path in REPO_PATH.findall(FENCE.sub("", document.read_text(encoding="utf-8")))
            if not (root / path).exists()]


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path):
    assert broken_links(document) == []


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_repository_path_written_as_code_exists(document: Path):
    assert missing_paths(document) == []


def test_the_readme_links_the_reference_and_the_contract_schema():
    """The front door is not the only door: the README links every reference page and the schema that other
    languages' consumers build on."""
    readme = prose((ROOT / "README.md").read_text(encoding="utf-8"))
    for target in ("docs/config.md", "docs/strategies.md", "docs/contract.md", "docs/operations.md",
                   "docs/development.md", "bench/README.md", "rabbitmq_retry_client/contract.schema.json"):
        assert f"]({target}" in readme, target


def test_a_missing_file_a_missing_anchor_and_a_missing_path_are_found(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "naming.py").write_text("")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Reviewing a change: `make review`\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\n## Twice\n\n## Twice\n\n"
                    "[ok](other.md#reviewing-a-change-make-review) [ok](#twice-1) [ok](../components/)\n"
                    "[gone](gone.md) [bad anchor](other.md#reviewing) [bad here](#twice-2) [out](../../x.md)\n"
                    "`[not a link](gone.md)`\n\n```\n[not a link](gone.md)\n```\n"
                    "`components/naming.py` `components/gone.py` `https://example.com/tools/x.py`\n")
    (tmp_path / "x.md").write_text("")
    assert broken_links(page, tmp_path) == ["gone.md: no such file", "other.md#reviewing: no heading with that anchor",
                                            "#twice-2: no heading with that anchor", "../../x.md: no such file"]
    assert missing_paths(page, tmp_path) == ["components/gone.py"]


def test_the_readme_opens_with_the_two_set_up_commands_ci_runs() -> None:
    """A newcomer on a fresh Debian machine types the README's first two lines: `make setup`, then `make test`;
    .ci/run runs the same two, and each is a target of the Makefile (a rewrap once left `make test` twice)."""
    readme = (ROOT / "README.md").read_text()
    first_block = FENCE.search(readme)
    assert first_block is not None and readme.index(first_block.group(0)) < readme.index("\n## ")
    commands = [line.split("#", 1)[0].strip() for line in first_block.group(0).splitlines()[1:-1]]
    assert commands == ["make setup", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().endswith(("make setup", "make test"))]
    assert [line.split()[-2:] for line in ci] == [["make", "setup"], ["make", "test"]]
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert {"setup", "test"} <= targets
