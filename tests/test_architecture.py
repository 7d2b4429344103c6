"""The layout is the architecture: components/ is one folder per layer, and imports flow one way.

Read from the source (ast), every module of components/: a module imports only its own layer and the layers below
it, never inside a function from another layer, never under `TYPE_CHECKING`; no import circle between files; and
nothing below the Pulumi layer imports Pulumi. docs/development.md (Layout) says what each layer holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ROOT / "components"
LAYERS = ("model", "strategies", "migrations", "config", "plan", "pulumi")
"""Bottom to top: each folder imports only itself and the folders before it."""
ROOT_MODULES = {"components": len(LAYERS), "components.user_limits": LAYERS.index("pulumi")}
"""The package's public API (above every layer), and the user-limits dynamic provider, a Pulumi-layer module kept
at its first path: the stack's state names the provider's module (dill pickles its class by reference), and a
`pulumi refresh` or `destroy` of a stack deployed before the layers imports it from there."""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    """The absolute module name, a components module or another package's."""
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(COMPONENTS.rglob("*.py"))}


def layer(module: str) -> int:
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    folder = module.split(".")[1]
    assert folder in LAYERS, f"{module} is in no layer: a module of components/ belongs in one of {LAYERS}"
    return LAYERS.index(folder)


def _functions_lines(tree: ast.AST) -> set[int]:
    return {line for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for child in ast.walk(node) if isinstance(child, ast.Import | ast.ImportFrom)
            for line in [child.lineno]}


def imports(module: str, path: Path, known: set[str]) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nested = _functions_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno, node.lineno in nested)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:  # `from . import naming` imports the module components.<...>.naming
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                yield Import(module, target, node.lineno, node.lineno in nested)


def every_import() -> list[Import]:
    found = modules()
    return [i for module, path in found.items() for i in imports(module, path, set(found))]


def ours(target: str) -> bool:
    return target == "components" or target.startswith("components.")


def test_every_module_is_in_a_layer_folder():
    assert [module for module in modules() if module not in ROOT_MODULES and module.count(".") < 2
            and module.split(".")[1] not in LAYERS] == []


def test_imports_flow_down_the_layers():
    upward = [f"{i.importer}:{i.line} imports {i.target}" for i in every_import()
              if ours(i.target) and layer(i.target) > layer(i.importer)]
    assert upward == []


def test_no_import_inside_a_function_crosses_a_layer():
    crossing = [f"{i.importer}:{i.line} imports {i.target} inside a function" for i in every_import()
                if i.in_function and ours(i.target) and layer(i.target) != layer(i.importer)]
    assert crossing == []


def test_no_type_checking_import():
    guarded = [f"{module_name(path)}:{node.lineno}" for path in modules().values()
               for node in ast.walk(ast.parse(path.read_text()))
               if "TYPE_CHECKING" in {getattr(node, "id", None), getattr(node, "attr", None),
                                      *(alias.name for alias in getattr(node, "names", ()))}]
    assert guarded == []


def test_nothing_below_the_pulumi_layer_imports_pulumi():
    pulumi_layer = LAYERS.index("pulumi")
    below = [f"{i.importer}:{i.line} imports {i.target}" for i in every_import()
             if i.target.split(".")[0] in ("pulumi", "pulumi_rabbitmq") and layer(i.importer) < pulumi_layer]
    assert below == []


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (or a node importing itself): Tarjan's."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(edges.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("level", ["file", "folder"])
def test_no_import_circle(level: str):
    edges: dict[str, set[str]] = {}
    for i in every_import():
        if ours(i.target) and i.target != i.importer:
            if level == "folder":
                edges.setdefault(_folder(i.importer), set()).add(_folder(i.target))
            else:
                edges.setdefault(i.importer, set()).add(i.target)
    if level == "folder":
        edges = {folder: {after for after in afters if after != folder} for folder, afters in edges.items()}
    assert circles(edges) == []


def _folder(module: str) -> str:
    return ".".join(module.split(".")[:2]) if module not in ROOT_MODULES else module


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
