"""docs/config.md's "Stack-file keys" documents exactly the keys the parser takes: each table's key column
equals the exported key table of its mapping, in order, and every exported table is documented."""

from __future__ import annotations

import re

from components.model.keys import KEY_TABLES
from tests.conftest import ROOT

INTRO = re.compile(r"^Keys of `([^`]+)`")
ROW = re.compile(r"^\| `([^`]+)` \|")
SECTION = "## Stack-file keys"
REFERENCE = ROOT / "docs" / "config.md"


def reference_tables(markdown: str) -> dict[str, list[str]]:
    """{config path: keys in its table's first column} from the section under "## Stack-file keys"."""
    section = markdown.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[str]] = {}
    current: str | None = None
    for line in section.splitlines():
        if intro := INTRO.match(line):
            current = intro[1]
            assert current not in tables, f"two tables for `{current}`"
            tables[current] = []
        elif current is not None and (row := ROW.match(line)):
            tables[current].append(row[1])
        elif current is not None and tables[current] and not line.startswith("|"):
            current = None
    return tables


def test_the_reference_documents_every_key_table_and_no_other():
    tables = reference_tables(REFERENCE.read_text(encoding="utf-8"))
    assert sorted(tables) == sorted(KEY_TABLES)


def test_each_reference_table_lists_exactly_the_keys_its_mapping_takes():
    tables = reference_tables(REFERENCE.read_text(encoding="utf-8"))
    for path, keys in KEY_TABLES.items():
        assert tables.get(path) == list(keys), path


def test_the_table_reader_sees_a_missing_or_extra_key():
    markdown = ("intro\n## Stack-file keys\n\nKeys of `defaults`:\n\n| key | type |\n|---|---|\n"
                "| `queue_type` | x |\n| `policy_priority` | x |\n| `typo` | x |\n\nAfter the table: `ignored` |\n"
                "\n## Next\n\nKeys of `vhosts[]`:\n\n| `name` | x |\n")
    assert reference_tables(markdown) == {"defaults": ["queue_type", "policy_priority", "typo"]}
