"""Migration kinds are modules: the registry maps each kind's name to the module that owns everything about it
(its keys, steps, parser, checks, plan, review and status), and nothing outside it compares a migration's kind
with a name (docs/development.md, "Adding a migration kind", says where a new one goes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from components.migrations import KINDS
from components.model.keys import KEY_TABLES, MIGRATION_KEYS
from components.model.stack_config import RETIRE
from tests.support.sources import ROOT, python_files

REGISTRY = ROOT / "components" / "migrations"
KEY_TABLES_FILE = ROOT / "components" / "model" / "keys.py"
"""The key tables name each kind as a key of a `migrations[]` entry (checked against the registry below)."""
MODULES = {module.__name__.rsplit(".", 1)[-1] for module in KINDS.values()}


def test_the_key_tables_name_every_kind_and_its_keys():
    assert ("name", *KINDS, "step") == MIGRATION_KEYS
    for name, kind in KINDS.items():
        assert KEY_TABLES[f"vhosts[].migrations[].{name}"] == kind.KEYS


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_ends_with_step_retire(name):
    steps = KINDS[name].STEPS
    assert steps[-1] == RETIRE and len(set(steps)) == len(steps) >= 2


def _kind_name_or_module(node: ast.expr) -> bool:
    """A kind's name written out, a kind's module, or its `NAME`."""
    if isinstance(node, ast.Constant):
        return node.value in KINDS
    if isinstance(node, ast.Attribute) and node.attr == "NAME":
        node = node.value
    return isinstance(node, ast.Name) and node.id in MODULES


def _choices_by_kind(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and node.value in KINDS:
            found.append(f"{path.relative_to(root)}:{node.lineno}: the kind {node.value!r} written out")
        elif isinstance(node, ast.Compare) and any(_kind_name_or_module(n) for n in (node.left, *node.comparators)):
            found.append(f"{path.relative_to(root)}:{node.lineno}: compared with a kind")
    return sorted(found)


def test_nothing_outside_the_registry_compares_a_kind_with_a_name():
    """Outside `components/migrations/`, no kind's name is written as a string (the key tables aside) and
    nothing is compared with a kind's name or module: code asks the kind's module (`kind_of(m)`)."""
    paths = python_files("components", "tools", "rabbitmq_retry_client", "bench",
                         leaving_out=lambda p: REGISTRY in p.parents or p == KEY_TABLES_FILE)
    assert len(paths) > 50
    assert [line for path in paths for line in _choices_by_kind(path)] == []


def test_the_scan_finds_a_kind_written_out_and_a_comparison_with_a_kind(tmp_path: Path):
    written = tmp_path / "x.py"
    written.write_text('entry = {"drain_levels": {}}\nif kind is drain_tiers or m.kind != move.NAME:\n    pass\n'
                       'if m.kind == "move":\n    pass\n')
    assert _choices_by_kind(written, tmp_path) == ["x.py:1: the kind 'drain_levels' written out",
                                                   "x.py:2: compared with a kind", "x.py:2: compared with a kind",
                                                   "x.py:4: compared with a kind",
                                                   "x.py:4: the kind 'move' written out"]
