"""Problems are data: the preview-time checks return `Problem(path, code, message)`, and no tool acts on a message's
text (tests/test_adopt.py rewords every message and finds the same decisions)."""

from __future__ import annotations

import ast
from pathlib import Path

from components import checks
from components.config import load_vhost
from components.plan import plan_vhost
from components.problems import Problem
from tests.conftest import vhost_config

ROOT = Path(__file__).resolve().parent.parent
TEXT_TESTS = frozenset({"search", "match", "fullmatch", "findall", "finditer", "sub", "split", "startswith",
                        "endswith", "find", "index", "count", "partition", "rpartition"})
"""What reads a text's content: regex calls and str methods."""
NOT_PROBLEMS = {"markdown.py": "escapes any text for display",
                "stack_file.py": "explains PyYAML's own messages, which have no codes"}
"""Tools that read texts other than problems."""


def _message(node: ast.AST) -> bool:
    """A problem's message: `….message`, or a name `message`, `problem` or `text`."""
    return (isinstance(node, ast.Attribute) and node.attr == "message") or (
        isinstance(node, ast.Name) and node.id in ("message", "problem", "text"))


def _reads_a_message(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(_message(n) for n in (node.left, *node.comparators)):
            found.append(f"{path.name}:{node.lineno}: compares a message")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                _message(node.func.value) or (node.func.attr in TEXT_TESTS and any(
                    _message(a) for a in node.args))):
            found.append(f"{path.name}:{node.lineno}: reads a message's text")
    return found


def test_no_tool_acts_on_a_message_s_text():
    paths = sorted(p for p in (ROOT / "tools").rglob("*.py") if p.name not in NOT_PROBLEMS)
    assert len(paths) > 30
    assert [line for path in paths for line in _reads_a_message(path)] == []


def test_the_scan_finds_a_tool_that_reads_a_message(tmp_path: Path):
    tool = tmp_path / "tool.py"
    tool.write_text('if "phrase" in problem.message:\n    pass\nre.search("x", message)\n'
                    'ENTRY.search(p.message)\np.message.startswith("a")\nprint(f"{p.message}")\n')
    assert _reads_a_message(tool) == ["tool.py:1: compares a message", "tool.py:3: reads a message's text",
                                      "tool.py:4: reads a message's text", "tool.py:5: reads a message's text"]


def test_a_problem_names_the_entry_it_is_about_and_what_it_is():
    raw = vhost_config(policies=[{"name": "a", "pattern": "^orders", "priority": 5, "definition": {"max-length": 1}},
                                 {"name": "b", "pattern": "^orders$", "priority": 6, "definition": {"max-length": 2}}])
    problems = checks.check_vhost(plan_vhost(load_vhost(raw, "vhosts[0]"), "vhosts[0]"))
    assert {(p.path, p.code) for p in problems} >= {("vhosts[0].policies[0]", checks.POLICY_OVER_OURS)}
    assert all(isinstance(p, Problem) and p.code and str(p) == p.message for p in problems)
