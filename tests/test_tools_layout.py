"""tools/ shows its commands: each `tools/<command>.py` is a thin entry point over `tools/lib/`, and no
command imports another one (issue 21, point 6)."""

from __future__ import annotations

import ast
from pathlib import Path

from tools.lib.mockrun import ROOT

TOOLS = ROOT / "tools"
COMMANDS = sorted(path.stem for path in TOOLS.glob("*.py") if path.stem != "__init__")


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, `from tools import drift` counted as `tools.drift`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_commands_are_the_documented_ones() -> None:
    assert COMMANDS == ["adopt", "alerts", "contracts", "definitions", "doctor", "drift", "evaluate", "migrate_retire",
                        "migrate_status", "mockrun", "mutate", "plan_report", "review"]


def test_every_command_has_a_main_and_runs_as_a_module() -> None:
    for command in COMMANDS:
        source = (TOOLS / f"{command}.py").read_text()
        assert "\ndef main(" in source and 'if __name__ == "__main__":\n    sys.exit(main())' in source, command


def test_no_command_imports_another_command() -> None:
    for command in COMMANDS:
        others = {f"tools.{other}" for other in COMMANDS}
        assert not imported_modules(TOOLS / f"{command}.py") & others, command


def test_no_library_imports_a_command() -> None:
    commands = {f"tools.{command}" for command in COMMANDS}
    for path in (TOOLS / "lib").rglob("*.py"):
        assert not imported_modules(path) & commands, path
        assert 'if __name__ == "__main__"' not in path.read_text(), path
