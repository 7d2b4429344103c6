"""`make plan`: the table of every resource and a Mermaid diagram of every retry path, for the shipped
stacks and for names that would break Markdown tables or Mermaid labels if they were not escaped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.lib.engine import STASH
from tools.lib.inventory import contracts, physical_name
from tools.lib.mockrun import ROOT, Registered, record_program
from tools.lib.plan_report import COLUMNS, render

MERMAID_NODE = re.compile(r'  (\w+)(\[\[|\{\{|\[\()"([^"]*)"(\]\]|\}\}|\)\])')
"""A node line of our diagrams: id, opening bracket, quoted label (no raw quote inside), closing bracket."""


def cells(line: str) -> list[str]:
    """A table row's cells as GitHub splits them: on every `|` that no backslash escapes."""
    assert line.startswith("| ") and line.endswith(" |"), line
    return [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]


def code_text(cell: str) -> str:
    """What a code-span cell shows: the fence removed, `\\|` back to `|`."""
    match = re.fullmatch(r"(`+) ?(.*?) ?\1", cell)
    assert match, cell
    return match[2].replace("\\|", "|")


def table(plan: str) -> list[list[str]]:
    lines = plan.splitlines()
    start = lines.index(f"| {' | '.join(COLUMNS)} |")
    assert cells(lines[start + 1]) == ["---"] * len(COLUMNS)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return rows


def diagrams(plan: str) -> dict[str, str]:
    """Heading → Mermaid source, for each `## …` section."""
    return dict(re.findall(r"^## ([^\n]+)\n\n```mermaid\n(.*?)\n```$", plan, flags=re.MULTILINE | re.DOTALL))


def decoded(label: str) -> str:
    return re.sub(r"#(\d+);", lambda m: chr(int(m[1])), label)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_resource_is_a_row_with_every_column(stack: str):
    resources = record_program(stack)
    custom = [r for r in resources if r.custom and r.type != STASH]
    rows = table(render(stack, resources))
    assert all(len(row) == len(COLUMNS) for row in rows)
    assert sorted((row[1], code_text(row[2]), code_text(row[3])) for row in rows) == sorted(
        (r.type.rsplit(":", 1)[-1], r.name, physical_name(r)) for r in custom)
    assert all(code_text(row[4]) for row in rows if row[1] != "VHost")  # key inputs are there
    assert {row[0] for row in rows} == {"create"}, "the shipped stacks import nothing"
    assert f"{len(custom)} resources: " in render(stack, resources)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_retry_path_has_a_mermaid_diagram_with_its_tiers(stack: str):
    resources = record_program(stack)
    expected = contracts(resources)
    found = diagrams(render(stack, resources))
    assert sorted(found) == sorted(f"`{vhost}` / `{queue}`" for vhost, queue in expected)
    for (vhost, queue), contract in expected.items():
        source = found[f"`{vhost}` / `{queue}`"]
        assert source.startswith("flowchart LR\n") and f'input[["{queue}"]]' in source
        if contract.get("strategy") == "levels":
            levels = int(contract["delay_levels"])
            # A copy goes to the level of its delay's highest 1 bit, never through a "top level" node.
            assert "top" not in re.findall(r"^  (\w+)", source, flags=re.MULTILINE)
            assert 'level of its delay\'s highest 1 bit' in source and "--> levels" in source
            assert f'levels[("rabbitmq-retry.delay.0 … rabbitmq-retry.delay.{levels - 1}<br/>{levels} levels' in source
            assert 'deliver -- "only this queue" --> input' in source
            continue
        for number, tier in enumerate(contract["tiers"], start=1):
            assert f'wait{number}[("{tier["queue"]}<br/>TTL ' in source
            assert f'retry -- "{tier["routing_key"]}" --> wait{number}' in source
        assert 'requeue -- "only this queue" --> input' in source
        assert f'input -. "after {int(contract["max_retries"])} retries: park" .-> error_x' in source


AWKWARD_QUEUE = 'or|ders"`x`<b>#quot;'
AWKWARD_EXCHANGE = 'ev|ents"&'
AWKWARD_STACK = f"""\
config:
  rabbitmq-retry:vhosts:
    - name: 'sh|op"'
      exchanges:
        - {{name: '{AWKWARD_EXCHANGE}', type: topic}}
      queues:
        - name: '{AWKWARD_QUEUE}'
          bindings: [{{exchange: '{AWKWARD_EXCHANGE}', routing_key: 'a|b'}}]
          retry: {{delays: [1s, 5s]}}
"""


@pytest.fixture
def awkward(program_copy: Path) -> list[Registered]:
    (program_copy / "Pulumi.awkward.yaml").write_text(AWKWARD_STACK)
    return record_program("awkward", program_copy)


def test_names_with_pipes_and_quotes_keep_the_table_intact(awkward: list[Registered]):
    rows = table(render("awkward", awkward))
    assert len(rows) == sum(r.custom and r.type != STASH for r in awkward)
    assert all(len(row) == len(COLUMNS) for row in rows)
    assert {code_text(row[3]) for row in rows} == {physical_name(r) for r in awkward if r.custom and r.type != STASH}
    assert AWKWARD_QUEUE in {code_text(row[3]) for row in rows}
    binding = next(row for row in rows if code_text(row[3]) == f"{AWKWARD_EXCHANGE} → {AWKWARD_QUEUE}")
    assert code_text(binding[4]) == "routing_key='a|b'"


def test_names_with_quotes_keep_the_mermaid_labels_intact(awkward: list[Registered]):
    (source,) = diagrams(render("awkward", awkward)).values()
    labels = {m[1]: m[3] for line in source.splitlines() if (m := MERMAID_NODE.fullmatch(line))}
    assert {node: decoded(label) for node, label in labels.items()} == {
        "input": AWKWARD_QUEUE, "retry": f"{AWKWARD_QUEUE}.retry<br/>direct",
        "requeue": f"{AWKWARD_QUEUE}.requeue<br/>fanout", "error_x": f"{AWKWARD_QUEUE}.error<br/>fanout",
        "error_q": f"{AWKWARD_QUEUE}.error", "wait1": f"{AWKWARD_QUEUE}.wait.1<br/>TTL 1s",
        "wait2": f"{AWKWARD_QUEUE}.wait.2<br/>TTL 5s",
    }
    assert not re.search(r"[`<>&|]", "".join(label.replace("<br/>", "") for label in labels.values()))


def test_make_plan_exits_clean(program_copy: Path):
    """No event loop is left for the interpreter to finalize: that is what printed `Exception ignored in:
    <function BaseEventLoop.__del__>` now and then after a plan that succeeded."""
    result = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-m", "tools.plan_report",
                             "--stack", "dev"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("# Plan for stack `dev`\n")


ADOPTED_STACK = """\
config:
  rabbitmq-retry:vhosts:
    - name: jobs
      existing: true
      queues:
        - {name: jobs.audit, type: classic}
        - {name: jobs.new, type: classic}
      import:
        - queue jobs.audit@jobs
"""


def test_an_imported_queue_is_planned_as_import_not_create(program_copy: Path):
    """After `make adopt`: the queue the broker already holds (with its messages) is adopted, not created."""
    (program_copy / "Pulumi.adopted.yaml").write_text(ADOPTED_STACK)
    resources = record_program("adopted", program_copy)
    plan = render("adopted", resources)
    ops = {code_text(row[3]): (row[0], row[1]) for row in table(plan)}
    assert ops["jobs.audit"] == ("import", "Queue") and ops["jobs.new"] == ("create", "Queue")
    assert "; 1 imported (adopted as the broker holds them, with their messages)" in plan
