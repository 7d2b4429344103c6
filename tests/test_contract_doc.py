"""docs/contract.md is the specification a consumer in another language follows: it documents every key of the
contract's JSON Schema and every header the schema defines, and none of its links or anchors dangles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rabbitmq_retry_client.contract import SCHEMA, SUPPORTED_STRATEGIES
from tests.conftest import ROOT

DOC = ROOT / "docs" / "contract.md"
TEXT = DOC.read_text(encoding="utf-8")
LINK = re.compile(r"\]\(([^)\s]+)\)")
ROW = re.compile(r"^\| `([^`]+)`", re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def section(title: str) -> str:
    """The text of the section whose heading starts with `title`, up to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}.*$", TEXT, re.MULTILINE)
    assert match, f"no section {title!r}"
    rest = TEXT[match.end():]
    end = re.search(rf"^#{{1,{len(match[1])}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


@pytest.mark.parametrize("target", sorted(set(LINK.findall(TEXT))))
def test_every_link_and_anchor_resolves(target: str) -> None:
    path, _, anchor = target.partition("#")
    if path.startswith(("http://", "https://")):
        return
    document = (DOC.parent / path).resolve() if path else DOC
    assert document.exists(), f"{target}: no such file"
    assert ROOT in document.parents or document == ROOT, f"{target} leaves the repository"
    if anchor:
        assert anchor in anchors(document.read_text(encoding="utf-8")), f"{target}: no such heading"


def test_no_private_notes_are_referenced() -> None:
    assert "shared/" not in TEXT


@pytest.mark.parametrize("part", ["common", *SUPPORTED_STRATEGIES])
def test_every_key_of_the_schema_is_in_its_table(part: str) -> None:
    title = "Keys of every contract" if part == "common" else f"Keys of a `{part}` contract"
    documented = set(ROW.findall(section(title)))
    described = set(SCHEMA["$defs"][part]["properties"])
    if part != "common":  # a strategy's own rows; the common keys it narrows are in the common table
        described -= {"strategy", "attempt_header"}
        common = set(ROW.findall(section("Keys of every contract")))
        assert described - documented <= common, f"{part}: undocumented {sorted(described - documented - common)}"
    else:
        assert described | {"strategy"} <= documented, sorted(described - documented)


@pytest.mark.parametrize("headers", ["retry_headers", "parking_headers"])
def test_every_header_the_schema_defines_is_in_the_headers_table(headers: str) -> None:
    documented = set(ROW.findall(section("Written by a consumer")))
    defined = set(SCHEMA["$defs"][headers]["properties"])
    assert defined <= documented, sorted(defined - documented)


def test_the_node_example_it_names_exists() -> None:
    example = Path(ROOT / "examples" / "node-consumer")
    assert {"consumer.js", "main.js", "package.json", "package-lock.json"} <= {p.name for p in example.iterdir()}
