"""Problems are data: the preview-time checks return `Problem(path, code, message)`, and no tool acts on a message's
text (tests/test_adopt.py rewords every message and finds the same decisions). Nor does a tool read a permission
regex back into names: the plan says the names it granted (`components.model.plan_types.Grant`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from components.config.load import load_vhost
from components.model.plan_types import SHOVEL_WRITE, Grant
from components.model.problems import Problem
from components.plan import checks
from components.plan.planner import plan_vhost
from components.strategies.levels import levels_write_pattern
from tests.conftest import vhost_config
from tests.support.sources import python_files

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
    paths = python_files("tools", leaving_out=lambda p: p.name in NOT_PROBLEMS)
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
    assert {(p.path, p.code) for p in problems} >= {("vhosts[0].policies[a]", checks.POLICY_OVER_OURS)}
    assert all(isinstance(p, Problem) and p.code and str(p) == p.message for p in problems)


GRANTED = (Grant.exactly(["orders", "orders.retry"]).regex, Grant.exactly(["a", "b", "c"]).regex, SHOVEL_WRITE.regex,
           levels_write_pattern(["orders"]))
"""Permission regexes the plan writes, each with its names beside it (`components.model.plan_types.Grant`)."""
RE_CALLS = frozenset({"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"})


def _reads_a_regex_back(path: Path) -> list[str]:
    """Regex patterns of `path` that parse a permission regex: the pattern (the first argument of a `re` call, as a
    literal) matches one the plan writes whole. What a grant allows is the plan's names (`Planned.grants`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RE_CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            pattern = re.compile(node.args[0].value)
            if any(pattern.fullmatch(granted) for granted in GRANTED):
                found.append(f"{path.name}:{node.lineno}: parses a permission regex")
    return found


def test_no_tool_parses_a_permission_regex_back():
    paths = python_files("tools")
    assert len(paths) > 30
    assert [line for path in paths for line in _reads_a_regex_back(path)] == []


def test_the_scan_finds_a_tool_that_parses_a_permission_regex(tmp_path: Path):
    tool = tmp_path / "tool.py"
    tool.write_text('import re\nre.fullmatch(r"\\^(?:\\((?:\\?:)?(.*)\\)|(.*))\\$", regex)\n'
                    'LIST = re.compile(r"\\^\\((.*)\\)\\$")\nre.search(r"orders", name)\n')
    assert _reads_a_regex_back(tool) == ["tool.py:2: parses a permission regex", "tool.py:3: parses a permission regex"]
